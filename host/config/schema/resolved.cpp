// host/config/schema/resolved.cpp: typed access to the validated config, and its TOML printout.
#include "host/config/schema/resolved.hpp"

#include <fmt/format.h>

#include "host/config/parse/key_path.hpp"
#include "host/core/error.hpp"
#include "host/core/text.hpp"

namespace zhost::config {
std::string ValueOrigin::describe() const {
  switch (kind) {
    case Kind::Default:
      return "default";
    case Kind::File:
      return how.empty() ? fmt::format("{}:{}", file, line) : fmt::format("{}:{} ({})", file, line, how);
    case Kind::Override:
      return "--set";
  }
  return {};
}

std::string ValueOrigin::location(const std::string& config_name) const {
  switch (kind) {
    case Kind::File:
      return show_column ? fmt::format("{}:{}:{}:", file, line, column) : fmt::format("{}:{}:", file, line);
    case Kind::Override:
      return fmt::format("--set {}:", text::excerpt(assignment));
    case Kind::Default:
      break;
  }
  return (config_name.empty() ? std::string("config") : config_name) + ":";
}

const ResolvedConfig::Entry& ResolvedConfig::entry(const std::string& path) const {
  auto it = entries_.find(path);
  if (it != entries_.end()) return it->second;
  auto inactive = inactive_.find(path);
  if (inactive != inactive_.end()) {
    fail("config key '{}' is not active in this config ({}); a zhost bug asked for it", path, inactive->second);
  }
  fail("config key '{}' is not declared; a zhost bug asked for it", path);
}

const ConfigValue& ResolvedConfig::typed_value(const std::string& path, ValueType type) const {
  const Entry& found = entry(path);
  if (found.type != type) {
    fail("config key '{}' is of type {}, not {}; a zhost bug read it with the wrong getter", path,
         type_name(found.type), type_name(type));
  }
  if (!found.value) fail("config key '{}' is optional and not set; a zhost bug read it without checking", path);
  return *found.value;
}

bool ResolvedConfig::get_bool(const std::string& path) const {
  return std::get<bool>(typed_value(path, ValueType::Bool));
}
int64_t ResolvedConfig::get_int(const std::string& path) const {
  return std::get<int64_t>(typed_value(path, ValueType::Int));
}
double ResolvedConfig::get_float(const std::string& path) const {
  return std::get<double>(typed_value(path, ValueType::Float));
}
const std::string& ResolvedConfig::get_string(const std::string& path) const {
  return std::get<std::string>(typed_value(path, ValueType::String));
}
const std::vector<double>& ResolvedConfig::get_float_list(const std::string& path) const {
  return std::get<std::vector<double>>(typed_value(path, ValueType::FloatList));
}
const std::vector<std::string>& ResolvedConfig::get_string_list(const std::string& path) const {
  return std::get<std::vector<std::string>>(typed_value(path, ValueType::StringList));
}

std::optional<int64_t> ResolvedConfig::get_optional_int(const std::string& path) const {
  if (!entry(path).value) return std::nullopt;
  return get_int(path);
}

const std::optional<ConfigValue>& ResolvedConfig::get(const std::string& path) const { return entry(path).value; }

bool ResolvedConfig::has(const std::string& path) const {
  return entry(path).origin.kind != ValueOrigin::Kind::Default;
}

std::string ResolvedConfig::origin(const std::string& path) const { return entry(path).origin.describe(); }

std::string ResolvedConfig::location(const std::string& path) const {
  return entry(path).origin.location(source_name_);
}

const std::vector<std::string>& ResolvedConfig::owners(const std::string& path) const { return entry(path).owners; }

std::vector<std::string> ResolvedConfig::keys() const {
  std::vector<std::string> paths;
  for (const auto& [path, found] : entries_) paths.push_back(path);
  return paths;
}

std::string ResolvedConfig::to_toml() const {
  // Group keys by table; std::map keeps tables and keys sorted, the root table ("") first.
  std::map<std::string, std::map<std::string, const Entry*>> tables;
  for (const auto& [path, found] : entries_) {
    tables[parent_path(path)][last_segment(path)] = &found;
  }
  std::string out;
  for (const auto& [table, keys] : tables) {
    if (!table.empty()) out += fmt::format("{}[{}]\n", out.empty() ? "" : "\n", table);
    for (const auto& [leaf, found] : keys) {
      std::string comment = fmt::format("{} ({})", found->origin.describe(), text::join(found->owners));
      if (!found->readers.empty()) comment.insert(comment.size() - 1, "; read by " + text::join(found->readers));
      if (found->value) {
        out += fmt::format("{} = {}  # {}\n", leaf, to_toml_literal(*found->value), comment);
      } else {
        out += fmt::format("# {} is not set ({}, optional)  # {}\n", leaf, type_name(found->type), comment);
      }
    }
  }
  return out;
}

}  // namespace zhost::config
