// host/config/schema/schema.hpp: the declared config keys (the host's and every plugin's), their types,
// defaults and limits, plus rules that span several keys. validate() checks a Document against it.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "host/config/parse/value.hpp"

namespace zhost::config {

class ResolvedConfig;

// The owner name of keys the host itself declares; plugins use their plugin name.
inline constexpr const char* kHostOwner = "host";

// One declared key.
struct KeySpec {
  std::string path;  // dotted, e.g. "zero.offload_optimizer.device"
  ValueType type = ValueType::String;
  std::optional<std::string> default_toml;  // TOML literal text ("2", "5e8", "\"cpu\""); nullopt: see below
  bool optional = false;                    // no default: false = the user must set it; true = may be unset
  std::string doc;                          // one line
  std::optional<double> min;                // numeric range, inclusive (Int, Float, each FloatList item)
  std::optional<double> max;
  bool min_exclusive = false;        // min itself is not allowed (e.g. timeouts > 0)
  bool max_exclusive = false;        // max itself is not allowed (e.g. probabilities < 1)
  std::vector<std::string> choices;  // allowed values of a String (or of each StringList item)
  std::string owner = kHostOwner;    // "host" or a plugin name
};

// A check across several keys, e.g. "fp16 and bf16 cannot both be enabled". It runs only when every key
// in `keys` is active and resolved without error; it returns the problem (without a location, which
// validate() adds from the first explicitly set key in `keys`) or nullopt. A `warning` rule's finding does
// not fail validation: it is a setting that does nothing in this job (ResolvedConfig::warnings()).
struct ConfigRule {
  std::vector<std::string> keys;
  std::function<std::optional<std::string>(const ResolvedConfig&)> check;
  std::string owner = kHostOwner;
  bool warning = false;
};

// What the storing tiers found say about themselves in their descriptors, by the name a config gives a tier
// ("offload:NAME" serves device = "NAME"), for the rules that depend on it (Note [Storing tiers by their
// descriptors], host/plugins/resolver.cpp). The host knows no tier by name: without tiers found, both are empty.
struct TierFacts {
  // Named as zero.offload_optimizer.device, the tier keeps the states and the CPU tier steps them
  // (ZHOST_PLUGIN_FLAG_TIER_DEVICE_STORES: DeepSpeed's NVMe device).
  std::set<std::string> device_stores;
  // The tier keeps what it stores outside host memory (ZHOST_PLUGIN_FLAG_TIER_OUTSIDE_HOST_MEMORY).
  std::set<std::string> outside_host_memory;
};

class Schema {
 public:
  // Declares a key. A key has one declaration (Note [Each key declared once], host/job/job_setup.cpp); a
  // second one, from a plugin that did not follow it, is accepted when type and default agree; otherwise,
  // or for a malformed spec (bad path, a default that does not fit the
  // type or limits, a key where another declares a table), throws UsageError naming the owners.
  void add(KeySpec spec);
  void add_rule(ConfigRule rule);
  // Unknown keys under `old_prefix` (a DeepSpeed table name such as "zero_optimization") are pointed to
  // `new_prefix` ("zero") in the error message.
  void add_rename_hint(std::string old_prefix, std::string new_prefix);
  // The storing tiers' facts that rules read through ResolvedConfig::tiers().
  void set_tier_facts(TierFacts facts) { tier_facts_ = std::move(facts); }
  const TierFacts& tier_facts() const { return tier_facts_; }

  const KeySpec* find(const std::string& path) const;  // nullptr when not declared
  bool contains(const std::string& path) const { return find(path) != nullptr; }
  // True when `path` is a table holding declared keys ("zero", "zero.offload_optimizer").
  bool is_table(const std::string& path) const;
  // Every owner that declared the key, in declaration order (empty when not declared).
  const std::vector<std::string>& owners(const std::string& path) const;
  // A plugin that reads the declared key `path` without declaring it (its descriptor's reads_keys).
  void add_reader(const std::string& path, const std::string& plugin);
  const std::vector<std::string>& readers(const std::string& path) const;  // in order added
  // The parsed default; nullopt for required and optional-without-default keys.
  const std::optional<ConfigValue>& default_value(const std::string& path) const;

  std::vector<const KeySpec*> keys() const;  // sorted by path
  std::vector<std::string> tables() const;   // every table holding declared keys, sorted
  const std::vector<ConfigRule>& rules() const { return rules_; }
  const std::vector<std::pair<std::string, std::string>>& rename_hints() const { return rename_hints_; }

 private:
  struct Entry {
    KeySpec spec;
    std::optional<ConfigValue> default_value;
    std::vector<std::string> owners;
    std::vector<std::string> readers;
  };
  const Entry& entry(const std::string& path) const;  // throws Error for an undeclared path
  void check_no_table_clash(const KeySpec& spec) const;

  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> table_first_key_;  // table path -> a key declared beneath it
  std::vector<ConfigRule> rules_;
  std::vector<std::pair<std::string, std::string>> rename_hints_;
  TierFacts tier_facts_;
};

// "the host" or "plugin 'stage2'", for messages.
std::string describe_owner(const std::string& owner);

}  // namespace zhost::config
