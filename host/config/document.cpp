// host/config/document.cpp: loading TOML config files and applying --set overrides.
#include "host/config/document.hpp"

#include "host/config/key_path.hpp"
#include "host/config/toml_node.hpp"
#include "host/core/error.hpp"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace zhost::config {
namespace {

std::string one_line(std::string_view text) {
  std::string line(text);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return line;
}

std::string trim(std::string_view text) {
  size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  size_t end = text.find_last_not_of(" \t");
  return std::string(text.substr(begin, end - begin + 1));
}

// Where a value already in the document came from, for override messages.
std::string where_set(const DocumentData& data, const std::string& path, const toml::node& node) {
  auto record = data.overrides.find(path);
  if (record != data.overrides.end()) return "by --set " + record->second.assignment;
  return fmt::format("at {}:{}", data.source_name, node.source().begin.line);
}

}  // namespace

Document::Document() : data_(std::make_unique<DocumentData>()) {}
Document::~Document() = default;
Document::Document(const Document& other) : data_(std::make_unique<DocumentData>(*other.data_)) {}
Document& Document::operator=(const Document& other) {
  if (this != &other) data_ = std::make_unique<DocumentData>(*other.data_);
  return *this;
}
Document::Document(Document&& other) noexcept = default;
Document& Document::operator=(Document&& other) noexcept = default;

Document Document::load_file(const std::string& path) {
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) {
    fail_usage("{}: is a directory, not a config file; name a .toml file", path);
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) fail_usage("{}: cannot read the config file ({}); check the path", path, std::strerror(errno));
  std::ostringstream text;
  text << file.rdbuf();
  spdlog::debug("config: read {}", path);
  return parse(text.str(), path);
}

Document Document::parse(std::string_view toml_text, const std::string& source_name) {
  Document document;
  document.data_->source_name = source_name;
  try {
    document.data_->root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& error) {
    fail_usage("{}:{}:{}: {}", source_name, error.source().begin.line, error.source().begin.column,
               one_line(error.description()));
  }
  return document;
}

void Document::apply_override(std::string_view assignment) {
  std::string shown(assignment);
  size_t equals = assignment.find('=');
  if (equals == std::string_view::npos) {
    fail_usage("--set {}: expected KEY=VALUE, e.g. --set zero.stage=2", shown);
  }
  std::string path = trim(assignment.substr(0, equals));
  std::string value_text = trim(assignment.substr(equals + 1));
  if (!is_valid_path(path)) {
    fail_usage("--set {}: '{}' is not a dotted key path; write names of letters, digits, _ and - joined by dots, "
               "e.g. zero.offload_optimizer.device",
               shown, path);
  }
  std::vector<std::string> segments = split_path(path);

  auto literal = parse_toml_literal(value_text);
  if (literal && literal->get(kLiteralKey)->is_table()) {
    fail_usage("--set {}: the value is a table; set its keys one at a time, e.g. --set {}.KEY=VALUE", shown, path);
  }

  toml::table* table = &data_->root;
  std::string table_path;
  for (size_t i = 0; i + 1 < segments.size(); ++i) {
    table_path += (i ? "." : "") + segments[i];
    toml::node* node = table->get(segments[i]);
    if (!node) node = &table->insert(segments[i], toml::table{}).first->second;
    if (!node->is_table()) {
      fail_usage("--set {}: {} is already a value (set {}), not a table, so it cannot hold {}", shown, table_path,
                 where_set(*data_, table_path, *node), path);
    }
    table = node->as_table();
  }
  const std::string& leaf = segments.back();
  if (toml::node* existing = table->get(leaf); existing && existing->is_table()) {
    fail_usage("--set {}: {} is a table; set one of its keys instead, e.g. --set {}.KEY=VALUE", shown, path, path);
  }

  if (literal) {
    table->insert_or_assign(leaf, *literal->get(kLiteralKey));
  } else {
    table->insert_or_assign(leaf, value_text);  // not TOML: a bare string such as cpu
  }
  data_->overrides[path] = OverrideRecord{shown, value_text, data_->overrides_applied++};
  spdlog::debug("config: --set {}", shown);
}

void Document::apply_overrides(const std::vector<std::string>& assignments) {
  for (const auto& assignment : assignments) apply_override(assignment);
}

const std::string& Document::source_name() const { return data_->source_name; }

bool Document::contains(const std::string& path) const {
  const toml::node* node = data_->root.at_path(path).node();
  return node && !node->is_table();
}

std::optional<ConfigValue> Document::peek(const std::string& path) const {
  const toml::node* node = data_->root.at_path(path).node();
  if (!node) return std::nullopt;
  if (auto* value = node->as_boolean()) return ConfigValue(value->get());
  if (auto* value = node->as_integer()) return ConfigValue(value->get());
  if (auto* value = node->as_floating_point()) return ConfigValue(value->get());
  if (auto* value = node->as_string()) return ConfigValue(value->get());
  auto* array = node->as_array();
  if (!array) return std::nullopt;
  if (array->is_homogeneous(toml::node_type::string) || array->empty()) {
    std::vector<std::string> items;
    for (const auto& item : *array) items.push_back(item.as_string()->get());
    return ConfigValue(std::move(items));
  }
  std::vector<double> numbers;
  for (const auto& item : *array) {
    if (auto* integer = item.as_integer()) {
      numbers.push_back(static_cast<double>(integer->get()));
    } else if (auto* floating = item.as_floating_point()) {
      numbers.push_back(floating->get());
    } else {
      return std::nullopt;
    }
  }
  return ConfigValue(std::move(numbers));
}

}  // namespace zhost::config
