// host/config/document/import_toml.cpp: writing the mapped tree of a DeepSpeed JSON config as TOML with comments.
#include "host/config/document/import_toml.hpp"

#include <fmt/format.h>

#include <map>
#include <sstream>

#include "host/config/document/document_data.hpp"
#include "host/config/parse/key_path.hpp"
#include "host/config/parse/toml_node.hpp"

namespace zhost::config {
namespace {

// "key = value" as toml++ writes it.
std::string assignment(const std::string& key, const toml::node& node) {
  toml::table one;
  one.insert(key, node);
  std::ostringstream out;
  out << toml::toml_formatter{one, toml::toml_formatter::default_flags & ~toml::format_flags::indentation};
  std::string text = out.str();
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

class Writer {
 public:
  Writer(const DocumentData& data, const std::function<bool(const std::string&)>& active)
      : data_(data), active_(active) {
    for (const auto& record : data.import_records) {
      if (record.kind == ImportRecord::Kind::Mapped) from_[record.zhost_path] = record.ds_path;
    }
  }

  void table(const toml::table& table, const std::string& path) {
    bool header = path.empty();
    for (auto&& [key, node] : table) {
      if (node.is_table()) continue;
      if (!header) {
        out_ += fmt::format("\n[{}]\n", path);
        header = true;
      }
      leaf(join_path(path, key.str()), std::string(key.str()), node);
    }
    for (auto&& [key, node] : table) {
      if (auto* subtable = node.as_table()) this->table(*subtable, join_path(path, key.str()));
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void leaf(const std::string& path, const std::string& key, const toml::node& node) {
    std::string comment;
    auto place = data_.places.find(path);
    auto ds = from_.find(path);
    if (ds != from_.end()) comment = "from " + ds->second;
    if (place != data_.places.end()) {
      comment += fmt::format("{}{}:{}:{}", comment.empty() ? "" : ", ", place->second.file, place->second.at.line,
                             place->second.at.column);
    }
    if (active_(path)) {
      out_ += fmt::format("{}  # {}\n", assignment(key, node), comment);
    } else {
      out_ += fmt::format("# {}  # {}: not read by this config (DeepSpeed ignores it too)\n", assignment(key, node),
                          comment);
    }
  }

  const DocumentData& data_;
  const std::function<bool(const std::string&)>& active_;
  std::map<std::string, std::string> from_;  // zhost path -> DeepSpeed key
  std::string out_;
};

}  // namespace

std::string imported_toml(const Document& document, const std::function<bool(const std::string&)>& active,
                          const std::vector<std::string>& problems) {
  // What the JSON means, as validate() reads it: HF "auto"s nothing fills hold HF Trainer's defaults (Note
  // [HF's "auto"]), so that the TOML trains the same job.
  Document settled = document;
  if (settled.is_deepspeed_json()) settled.settle_deepspeed_json();
  const DocumentData& data = settled.data();
  std::string out =
      fmt::format("# zhost config imported from DeepSpeed's {} (zhost config import)\n", data.source_name);
  if (!problems.empty()) {
    out += "#\n# REFUSED: fix these in the JSON and import again, or in this file\n";
    for (const auto& line : problems) out += "#   " + line + "\n";
  }
  const std::vector<std::string> notes = document.notes();
  if (!notes.empty()) {
    out += "#\n# accepted with a note (nothing to change here), or read under a deprecated name:\n";
    for (const auto& line : notes) out += "#   " + line + "\n";
  }
  out += "\n";
  Writer writer(data, active);
  writer.table(data.root, "");
  return out + writer.take();
}

}  // namespace zhost::config
