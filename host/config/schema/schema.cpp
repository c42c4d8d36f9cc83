// host/config/schema/schema.cpp: declaring keys (with conflict checks between owners) and looking them up.
#include "host/config/schema/schema.hpp"

#include <algorithm>

#include "host/config/parse/key_path.hpp"
#include "host/config/parse/toml_node.hpp"
#include "host/config/schema/convert_node.hpp"
#include "host/core/error.hpp"
#include "host/core/text.hpp"

namespace zhost::config {
namespace {

std::string describe_default(const std::optional<ConfigValue>& value, bool optional) {
  if (value) return "default " + to_toml_literal(*value);
  return optional ? "no default (optional)" : "no default (required)";
}

std::optional<ConfigValue> parse_default(const KeySpec& spec) {
  if (!spec.default_toml) return std::nullopt;
  auto literal = parse_toml_literal(*spec.default_toml);
  if (!literal) {
    fail_usage("{} declares config key {} with default `{}`, which is not a TOML value; fix the declaration",
               describe_owner(spec.owner), spec.path, text::excerpt(*spec.default_toml));
  }
  KeySpec declared = spec;  // the problem's "write e.g." hint must not suggest the default that does not fit
  declared.default_toml.reset();
  Conversion conversion = convert_node(*literal->get(kLiteralKey), declared);
  if (!conversion.value) {
    fail_usage("{} declares config key {} with a default that does not fit its own declaration: {}",
               describe_owner(spec.owner), spec.path, conversion.problem);
  }
  return conversion.value;
}

void check_spec_shape(const KeySpec& spec) {
  if (!is_valid_path(spec.path)) {
    fail_usage("{} declares config key '{}', which is not a dotted path of names like zero.stage",
               describe_owner(spec.owner), text::excerpt(spec.path));
  }
  bool numeric = spec.type == ValueType::Int || spec.type == ValueType::Float || spec.type == ValueType::FloatList;
  if ((spec.min || spec.max) && !numeric) {
    fail_usage("{} declares a range for config key {}, which is a {}; only numbers have ranges",
               describe_owner(spec.owner), spec.path, type_name(spec.type));
  }
  bool textual = spec.type == ValueType::String || spec.type == ValueType::StringList;
  if (!spec.choices.empty() && !textual) {
    fail_usage("{} declares choices for config key {}, which is a {}; only strings have choices",
               describe_owner(spec.owner), spec.path, type_name(spec.type));
  }
}

}  // namespace

std::string describe_owner(const std::string& owner) {
  return owner == kHostOwner ? "the host" : "plugin '" + text::excerpt(owner) + "'";
}

void Schema::add(KeySpec spec) {
  check_spec_shape(spec);
  std::optional<ConfigValue> default_value = parse_default(spec);
  // Kept as TOML writes the value (one line, no comment), for the hints that quote it.
  if (default_value) spec.default_toml = to_toml_literal(*default_value);

  auto existing = entries_.find(spec.path);
  if (existing != entries_.end()) {
    Entry& entry = existing->second;
    bool same_type = entry.spec.type == spec.type;
    bool same_default = entry.default_value == default_value && entry.spec.optional == spec.optional;
    if (!same_type || !same_default) {
      fail_usage(
          "config key {} is declared differently by {} ({}, {}) and {} ({}, {}); they cannot be loaded "
          "together until they agree",
          spec.path, describe_owner(entry.owners.front()), type_name(entry.spec.type),
          describe_default(entry.default_value, entry.spec.optional), describe_owner(spec.owner), type_name(spec.type),
          describe_default(default_value, spec.optional));
    }
    if (std::find(entry.owners.begin(), entry.owners.end(), spec.owner) == entry.owners.end()) {
      entry.owners.push_back(spec.owner);
    }
    return;
  }

  check_no_table_clash(spec);
  for (const auto& table : enclosing_tables(spec.path)) table_first_key_.emplace(table, spec.path);
  std::string owner = spec.owner;
  std::string path = spec.path;
  entries_.emplace(path, Entry{std::move(spec), std::move(default_value), {std::move(owner)}, {}});
}

void Schema::check_no_table_clash(const KeySpec& spec) const {
  auto table = table_first_key_.find(spec.path);
  if (table != table_first_key_.end()) {
    fail_usage("{} declares config key {}, but {} declares {}, which makes {} a table; rename one of them",
               describe_owner(spec.owner), spec.path, describe_owner(owners(table->second).front()), table->second,
               spec.path);
  }
  for (const auto& enclosing : enclosing_tables(spec.path)) {
    auto key = entries_.find(enclosing);
    if (key != entries_.end()) {
      fail_usage(
          "{} declares config key {}, but {} declares {} as a value, so it cannot be a table; rename "
          "one of them",
          describe_owner(spec.owner), spec.path, describe_owner(key->second.owners.front()), enclosing);
    }
  }
}

void Schema::add_rule(ConfigRule rule) {
  ZHOST_ASSERT(!rule.keys.empty() && rule.check);
  rules_.push_back(std::move(rule));
}

void Schema::add_rename_hint(std::string old_prefix, std::string new_prefix) {
  rename_hints_.emplace_back(std::move(old_prefix), std::move(new_prefix));
}

const KeySpec* Schema::find(const std::string& path) const {
  auto it = entries_.find(path);
  return it == entries_.end() ? nullptr : &it->second.spec;
}

bool Schema::is_table(const std::string& path) const { return table_first_key_.count(path) != 0; }

const Schema::Entry& Schema::entry(const std::string& path) const {
  auto it = entries_.find(path);
  if (it == entries_.end()) fail("config key '{}' is not declared in the schema (a zhost bug)", path);
  return it->second;
}

const std::vector<std::string>& Schema::owners(const std::string& path) const {
  static const std::vector<std::string> kNone;
  auto it = entries_.find(path);
  return it == entries_.end() ? kNone : it->second.owners;
}

void Schema::add_reader(const std::string& path, const std::string& plugin) {
  auto it = entries_.find(path);
  if (it == entries_.end()) fail("config key '{}' is read by plugin '{}' but not declared (a zhost bug)", path, plugin);
  if (std::find(it->second.readers.begin(), it->second.readers.end(), plugin) == it->second.readers.end())
    it->second.readers.push_back(plugin);
}

const std::vector<std::string>& Schema::readers(const std::string& path) const {
  static const std::vector<std::string> kNone;
  auto it = entries_.find(path);
  return it == entries_.end() ? kNone : it->second.readers;
}

const std::optional<ConfigValue>& Schema::default_value(const std::string& path) const {
  return entry(path).default_value;
}

std::vector<const KeySpec*> Schema::keys() const {
  std::vector<const KeySpec*> keys;
  keys.reserve(entries_.size());
  for (const auto& [path, entry] : entries_) keys.push_back(&entry.spec);
  return keys;
}

std::vector<std::string> Schema::tables() const {
  std::vector<std::string> tables;
  for (const auto& [table, first_key] : table_first_key_) tables.push_back(table);
  return tables;
}

}  // namespace zhost::config
