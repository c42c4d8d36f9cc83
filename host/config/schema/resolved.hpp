// host/config/schema/resolved.hpp: the validated config every part of the host reads: one typed value per
// active key (defaults filled in), where each value came from, and the printout of `zhost config check`.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "host/config/parse/value.hpp"
#include "host/config/schema/schema.hpp"

namespace zhost::config {

namespace detail {
class ResolvedConfigBuilder;  // validate()'s helper, the only writer
}

// Where a resolved value came from.
struct ValueOrigin {
  enum class Kind { Default, File, Override };
  Kind kind = Kind::Default;
  std::string file;          // Kind::File
  int64_t line = 0;          // Kind::File
  int64_t column = 0;        // Kind::File
  bool show_column = false;  // Kind::File: "FILE:LINE:COL:" in messages (JSON configs, whose lines hold many keys)
  std::string assignment;    // Kind::Override: what followed --set, e.g. "zero.stage=2"
  std::string how;           // Kind::File: how the value was made from what the file holds ("auto: HF Trainer default")

  // "default", "FILE:LINE", "FILE:LINE (HOW)" or "--set".
  std::string describe() const;
  // The start of an error message about the value: "FILE:LINE:", "--set zero.stage=2:", or for a default
  // the config's own prefix, "CONFIG_NAME:" ("config:" when there is no file).
  std::string location(const std::string& config_name) const;
};

class ResolvedConfig {
 public:
  // Typed getters. Each throws Error (a zhost bug, not a user mistake) for an undeclared or inactive path,
  // a path of another type, or an optional key that has no value.
  bool get_bool(const std::string& path) const;
  int64_t get_int(const std::string& path) const;
  double get_float(const std::string& path) const;
  const std::string& get_string(const std::string& path) const;
  const std::vector<double>& get_float_list(const std::string& path) const;
  const std::vector<std::string>& get_string_list(const std::string& path) const;
  // For optional Int keys without a default (train_batch_size): nullopt when unset.
  std::optional<int64_t> get_optional_int(const std::string& path) const;
  // Any key's value, whatever its type (nullopt: an optional key left unset); throws like the getters.
  const std::optional<ConfigValue>& get(const std::string& path) const;

  // True when the file or a --set gave the key a value (false for defaults and unset optional keys).
  bool has(const std::string& path) const;
  // True when this config reads the key: the host or a chosen plugin declared it.
  bool active(const std::string& path) const { return entries_.count(path) != 0; }
  // "default", "FILE:LINE", "FILE:LINE (auto: HF Trainer default)" or "--set".
  std::string origin(const std::string& path) const;
  // The start of an error message about this key (ValueOrigin::location).
  std::string location(const std::string& path) const;
  // The config file's name as errors show it; empty without one.
  const std::string& source_name() const { return source_name_; }
  // What the storing tiers found declare (the schema's TierFacts).
  const TierFacts& tiers() const { return tiers_; }
  // Who declared the key ("host", plugin names).
  const std::vector<std::string>& owners(const std::string& path) const;
  // Active keys, sorted.
  std::vector<std::string> keys() const;
  // The whole config as TOML, defaults included, each key followed by "# ORIGIN (OWNERS)" or
  // "# ORIGIN (OWNERS; read by READERS)"; tables and
  // keys in sorted order. Unset optional keys appear as comments. Parsing it again gives the same values.
  std::string to_toml() const;
  // One line each ("FILE:LINE:COL: note: ..."): keys of a DeepSpeed JSON config that this config does not
  // read (DeepSpeed ignores them too), accepted rather than refused.
  const std::vector<std::string>& notes() const { return notes_; }
  // One line each ("FILE:LINE:COL: warning: ..."): settings that do nothing in this job, found by the
  // warning rules (ConfigRule::warning). `config check` prints them; rank 0 logs them when a job starts.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  friend class detail::ResolvedConfigBuilder;
  struct Entry {
    ValueType type = ValueType::String;
    std::optional<ConfigValue> value;  // nullopt: an optional key left unset
    ValueOrigin origin;
    std::vector<std::string> owners;
    std::vector<std::string> readers;  // plugins that read it without declaring it
  };
  const Entry& entry(const std::string& path) const;
  const ConfigValue& typed_value(const std::string& path, ValueType type) const;

  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> inactive_;  // dotted path -> why it is not in this config
  std::string source_name_;                      // the config file, empty without one
  TierFacts tiers_;
  std::vector<std::string> notes_;
  std::vector<std::string> warnings_;
};

}  // namespace zhost::config
