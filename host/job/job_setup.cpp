// host/job/job_setup.cpp: config file -> discovered plugins -> resolved needs -> validated config.
//
// Validation runs twice on purpose. The first pass checks the document against the host's keys plus the
// keys of every plugin found (so a typo is caught even in a plugin's key) and yields the ZeRO selectors.
// The selectors give the needs, the needs give the chosen plugins, and the second pass validates against
// the host's keys plus the chosen plugins' keys only, so a key of a plugin this config does not use is
// rejected with the reason ("it is read by plugin 'stage2', which this config does not use").
#include "host/job/job_setup.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "host/config/schema/host_rules.hpp"
#include "host/config/schema/host_schema.hpp"
#include "host/config/schema/validate.hpp"
#include "host/core/error.hpp"
#include "host/core/text.hpp"

namespace zhost {
namespace {

config::ValueType to_value_type(zhost_config_type type) {
  switch (type) {
    case ZHOST_CONFIG_BOOL:
      return config::ValueType::Bool;
    case ZHOST_CONFIG_INT:
      return config::ValueType::Int;
    case ZHOST_CONFIG_FLOAT:
      return config::ValueType::Float;
    case ZHOST_CONFIG_STRING:
      return config::ValueType::String;
  }
  return config::ValueType::String;
}

// The flags of the first tier found that provides "offload:NAME", for each NAME (the tier resolution picks).
std::map<std::string, uint64_t> tier_flags_by_name(const std::vector<LoadedPlugin>& found) {
  std::map<std::string, uint64_t> flags;
  for (const auto& plugin : found)
    for (const auto& capability : plugin.info.provides)
      if (capability_area(capability) == "offload")
        flags.emplace(capability.substr(capability.find(':') + 1), tier_flags(plugin));
  return flags;
}

// What the tiers found declare, for the config rules (Note [Storing tiers by their descriptors]).
config::TierFacts tier_facts(const std::vector<LoadedPlugin>& found) {
  config::TierFacts facts;
  for (const auto& [name, flags] : tier_flags_by_name(found)) {
    if ((flags & ZHOST_PLUGIN_FLAG_TIER_STORES) && (flags & ZHOST_PLUGIN_FLAG_TIER_DEVICE_STORES))
      facts.device_stores.insert(name);
    if ((flags & ZHOST_PLUGIN_FLAG_TIER_STORES) && (flags & ZHOST_PLUGIN_FLAG_TIER_OUTSIDE_HOST_MEMORY))
      facts.outside_host_memory.insert(name);
  }
  return facts;
}

ZeroSelection zero_selection(const config::ResolvedConfig& config) {
  ZeroSelection zero;
  zero.stage = config.get_int("zero.stage");
  zero.offload_optimizer = config.get_string("zero.offload_optimizer.device");
  zero.optimizer_device_stores = config.tiers().device_stores.count(zero.offload_optimizer) != 0;
  zero.offload_optimizer_storage = config.get_string("zero.offload_optimizer.storage");
  zero.offload_param = config.get_string("zero.offload_param.device");
  zero.quantized_weights = config.get_bool("zero.zero_quantized_weights");
  zero.quantized_gradients = config.get_bool("zero.zero_quantized_gradients");
  zero.hpz_partition_size = config.get_int("zero.zero_hpz_partition_size");
  zero.loco = config.get_bool("zero.zeropp_loco_param.enabled");
  return zero;
}

// Capabilities that zhost's own plugins will provide in a later version. Asking for one that no plugin on
// the search path provides is a feature this version lacks, not a missing plugin folder: say so.
struct PlannedCapability {
  const char* key;
  const char* capability;
  const char* what;
  const char* instead;
  bool (*asks)(const config::ResolvedConfig& config, const PlannedCapability& planned);
};
// An offload device that names the capability's tier ("offload:NAME" is served by device = "NAME").
bool asks_tier(const config::ResolvedConfig& config, const PlannedCapability& planned) {
  return "offload:" + config.get_string(planned.key) == planned.capability;
}
bool asks_flag(const config::ResolvedConfig& config, const PlannedCapability& planned) {
  return config.get_bool(planned.key);
}
bool asks_above_one(const config::ResolvedConfig& config, const PlannedCapability& planned) {
  return config.get_int(planned.key) > 1;
}
const PlannedCapability kPlannedCapabilities[] = {
    {"zero.offload_optimizer.device", "offload:nvme", "the NVMe offload tier (ZeRO-Infinity)",
     "offload to host memory with \"cpu\", or write \"none\"", asks_tier},
    {"zero.offload_param.device", "offload:nvme", "the NVMe offload tier (ZeRO-Infinity)",
     "offload to host memory with \"cpu\", or write \"none\"", asks_tier},
    {"zero.zero_quantized_weights", "collective:qwz", "ZeRO++ quantized weight all-gather (qwZ)", "set it to false",
     asks_flag},
    {"zero.zero_quantized_gradients", "collective:qgz", "ZeRO++ quantized gradient reduction (qgZ)", "set it to false",
     asks_flag},
    {"zero.zero_hpz_partition_size", "collective:hpz", "ZeRO++ hierarchical partitioning (hpZ)", "set it to 1",
     asks_above_one},
};

void refuse_planned_capabilities(const config::ResolvedConfig& config, const std::vector<LoadedPlugin>& found) {
  std::vector<std::string> errors;
  for (const auto& planned : kPlannedCapabilities) {
    if (!planned.asks(config, planned)) continue;
    bool provided = false;
    for (const auto& plugin : found)
      for (const auto& capability : plugin.info.provides) provided = provided || capability == planned.capability;
    if (provided) continue;
    errors.push_back(fmt::format("{} {} asks for {} ('{}'), which this version of zhost does not have yet; {}",
                                 config.location(planned.key), planned.key, planned.what, planned.capability,
                                 planned.instead));
  }
  if (!errors.empty()) throw config::ConfigErrors(std::move(errors));
}

// A job has at most one collective transform (Note [Collective transforms]): two would each want to carry the
// same collectives.
void check_one_transform(const Resolution& resolution, const std::vector<Need>& needs) {
  std::vector<std::string> transforms;
  for (const LoadedPlugin* plugin : resolution.plugins)
    if (plugin->info.kind == ZHOST_KIND_COLLECTIVE)
      transforms.push_back(fmt::format("'{}' ({})", plugin->info.name, plugin->path.string()));
  if (transforms.size() <= 1) return;
  std::vector<std::string> asked;
  for (const Need& need : needs)
    if (need.capability.rfind("collective:", 0) == 0) asked.push_back(need.reason);
  fail_usage(
      "{} need collective transforms from {} plugins ({}), but a job runs at most one; use one plugin that "
      "provides all of them, or ask for fewer",
      fmt::join(asked, ", "), transforms.size(), fmt::join(transforms, ", "));
}

std::vector<std::string> search_dirs(const JobSetupOptions& options, const config::Document& document) {
  std::vector<std::string> dirs = options.plugin_dirs;
  if (auto configured = document.peek("plugins.path"))
    if (auto* list = std::get_if<std::vector<std::string>>(&*configured))
      for (const std::string& dir : *list) {
        if (auto problem = plugin_dir_problem(dir))
          fail_usage("{}: plugins.path names '{}', which {}; fix the entry or remove it", document.source_name(), dir,
                     *problem);
        dirs.push_back(dir);
      }
  return dirs;
}

// The storages of the swap schedules (their syntax is checked by the host's rules) must each be a storing tier
// found now, and the optimizer's under a computing tier that can move its states (Note [Storage swap]); they are
// created only at their swap.
void check_swap_schedules(const config::ResolvedConfig& config, const Resolution& resolution,
                          const std::vector<LoadedPlugin>& found) {
  for (const char* key : {"zero.offload_optimizer.swap_schedule", "zero.offload_param.swap_schedule"}) {
    const std::vector<config::StorageSwapPoint> schedule = config::storage_swap_schedule(config, key);
    if (schedule.empty()) continue;
    auto compute = resolution.tiers.find(ZHOST_TIER_FOR_OPTIMIZER);
    if (std::string(key) == "zero.offload_optimizer.swap_schedule" && compute != resolution.tiers.end() &&
        !can_move_storage(*compute->second))
      fail_usage(
          "{}: plugin '{}' ({}) runs the optimizer but cannot move its states to another storage (it has no "
          "move_storage in its optimizer table); remove the schedule",
          key, compute->second->info.name, compute->second->path.string());
    if (std::string(key) == "zero.offload_param.swap_schedule") {
      for (const LoadedPlugin* plugin : resolution.plugins)
        if (plugin->info.kind == ZHOST_KIND_PARTITION && !can_move_param_storage(*plugin))
          fail_usage(
              "{}: partition plugin '{}' ({}) cannot move its parameter shards to another storage (it has no "
              "move_param_storage in its partition table); remove the schedule",
              key, plugin->info.name, plugin->path.string());
    }
    for (const config::StorageSwapPoint& point : schedule)
      if (point.storage != "cpu" || std::string(key) == "zero.offload_optimizer.swap_schedule")
        storage_swap_target(point.storage, found, fmt::format("{} \"{}:{}\"", key, point.after_step, point.storage));
  }
}

}  // namespace

// Every storing tier found, when the job's computing tier can move its states: a schedule or `zhost control` may
// swap any of them in (Note [Storage swap]), so their keys (e.g. zero.offload_optimizer.nvme_path) are this
// job's keys too.
std::vector<const LoadedPlugin*> swappable_storages(const Resolution& resolution,
                                                    const std::vector<LoadedPlugin>& found) {
  std::vector<const LoadedPlugin*> storages;
  auto compute = resolution.tiers.find(ZHOST_TIER_FOR_OPTIMIZER);
  if (compute == resolution.tiers.end() || !can_move_storage(*compute->second)) return storages;
  for (const auto& plugin : found)
    if (&plugin != compute->second && plugin.info.kind == ZHOST_KIND_OFFLOAD &&
        (tier_flags(plugin) & ZHOST_PLUGIN_FLAG_TIER_STORES))
      storages.push_back(&plugin);
  return storages;
}

std::map<std::string, ConfigValue> JobSetup::plugin_config(const LoadedPlugin& plugin) const {
  return plugin_config_values(*config, plugin);
}

std::map<std::string, ConfigValue> plugin_config_values(const config::ResolvedConfig& config,
                                                        const LoadedPlugin& plugin) {
  std::vector<std::string> keys;
  for (const auto& key : plugin.info.config_keys) keys.push_back(key.key);
  for (const auto& key : plugin.info.reads_keys)
    if (config.active(key)) keys.push_back(key);  // always, in the config of a job the plugin is in (add_read_keys)
  std::map<std::string, ConfigValue> values;
  for (const auto& key : keys) {
    const auto& value = config.get(key);
    if (!value) continue;
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, int64_t> || std::is_same_v<T, double> ||
                        std::is_same_v<T, std::string>)
            values[key] = v;
        },
        *value);
  }
  return values;
}

namespace {

void add_plugin_key(config::Schema& schema, const LoadedPlugin& plugin, const ConfigKeyInfo& key, bool relax_required) {
  config::KeySpec spec;
  spec.path = key.key;
  spec.type = to_value_type(key.type);
  spec.default_toml = key.default_literal;
  spec.optional = relax_required && !key.default_literal;
  spec.doc = key.doc;
  spec.min = key.min_value;
  spec.max = key.max_value;
  spec.choices = key.choices;
  spec.owner = plugin.info.name;
  schema.add(std::move(spec));
}

}  // namespace

void add_plugin_keys(config::Schema& schema, const LoadedPlugin& plugin, bool relax_required) {
  for (const auto& key : plugin.info.config_keys) add_plugin_key(schema, plugin, key, relax_required);
}

// Note [Each key declared once]: a config key has one declaration - its type, default, range and doc line -
// in the host's schema (host/config/schema/host_schema.cpp) or in one plugin's descriptor. A plugin that reads a key
// declared elsewhere (stage2 reads stage0's zero.reduce_bucket_size; the stages read the host's
// zero.offload_optimizer.delayed_update) names it in its descriptor's reads_keys, and config_get answers it
// as one of its own. A job's schema then holds the declaration of every key its plugins read, taken from the
// plugin found that declares it even when that plugin serves nothing in this job; a third-party plugin reads
// the same way. A key the host declares for plugins to read is, like a plugin's own key, refused when set in a
// config none of whose plugins reads it (prepare_job). tests/cli/keys_once_test.cpp holds the host and zhost's own
// plugins to this.
void add_read_keys(config::Schema& schema, const LoadedPlugin& plugin, const std::vector<LoadedPlugin>& found) {
  for (const auto& key : plugin.info.reads_keys) {
    if (schema.contains(key)) {
      schema.add_reader(key, plugin.info.name);
      continue;
    }
    const LoadedPlugin* owner = nullptr;
    const ConfigKeyInfo* declaration = nullptr;
    for (const auto& other : found)
      for (const auto& declared : other.info.config_keys)
        if (!owner && declared.key == key) {
          owner = &other;
          declaration = &declared;
        }
    if (!owner)
      fail_usage(
          "plugin '{}' ({}) reads config key '{}', which neither the host nor any plugin found declares; put the "
          "plugin that declares it on the search path (`zhost plugins` lists what is found)",
          plugin.info.name, plugin.path.string(), key);
    add_plugin_key(schema, *owner, *declaration, /*relax_required=*/false);
    schema.add_reader(key, plugin.info.name);
  }
}

config::Document load_job_document(const JobSetupOptions& options) {
  config::Document document = options.config_file.empty()
                                  ? config::Document()
                                  : config::Document::load_file(options.config_file.string(), options.overrides);
  if (!options.companion_file.empty()) {
    if (!document.is_deepspeed_json()) {
      fail_usage(
          "--companion {}: a companion goes with a DeepSpeed JSON config; {} is TOML already, so write its "
          "keys there",
          options.companion_file.string(), options.config_file.string());
    }
    document.add_companion(options.companion_file.string());
  }
  document.apply_overrides(options.overrides);
  return document;
}

JobSetup prepare_job(const JobSetupOptions& options) {
  JobSetup job;
  config::Document document = load_job_document(options);

  job.services = std::make_unique<HostServices>();
  job.discovery = discover_plugins(plugin_search_path(search_dirs(options, document)), PluginLoader(*job.services));
  for (const auto& line : job.discovery.shadowed) spdlog::warn("{}", line);
  require_no_failures(job.discovery);

  // Pass 1: host keys + every found plugin's keys.
  config::Schema everything;
  config::add_host_keys(everything);
  everything.set_tier_facts(tier_facts(job.discovery.plugins));
  for (const auto& plugin : job.discovery.plugins) add_plugin_keys(everything, plugin, /*relax_required=*/true);
  config::ResolvedConfig first = config::validate(document, everything);

  refuse_planned_capabilities(first, job.discovery.plugins);
  job.needs = needs_for(zero_selection(first));
  job.resolution = resolve_plugins(job.needs, job.discovery.plugins);
  check_one_transform(job.resolution, job.needs);

  check_swap_schedules(first, job.resolution, job.discovery.plugins);

  // Pass 2: host keys + the chosen plugins' keys; keys of unused plugins are rejected with the reason.
  config::add_host_keys(job.schema);
  job.schema.set_tier_facts(everything.tier_facts());
  std::map<std::string, std::string> inactive = inactive_plugin_keys(job.resolution, job.discovery.plugins);
  std::vector<const LoadedPlugin*> keyed = job.resolution.plugins;
  for (const auto* target : swappable_storages(job.resolution, job.discovery.plugins)) {
    if (std::find(keyed.begin(), keyed.end(), target) == keyed.end()) keyed.push_back(target);
    for (const auto& key : target->info.config_keys) inactive.erase(key.key);
  }
  for (const auto* plugin : keyed) add_plugin_keys(job.schema, *plugin);
  std::set<std::string> read_here;
  for (const auto* plugin : keyed) {
    add_read_keys(job.schema, *plugin, job.discovery.plugins);
    read_here.insert(plugin->info.reads_keys.begin(), plugin->info.reads_keys.end());
  }
  for (const auto& key : read_here) inactive.erase(key);
  // A host key that plugins read (the delayed update's, ZeRO++'s) is this config's only when one of its plugins
  // reads it, as a plugin's own key is: set otherwise, it is refused (noted in a DeepSpeed JSON) with the reason.
  for (const auto& plugin : job.discovery.plugins) {
    if (std::find(keyed.begin(), keyed.end(), &plugin) != keyed.end()) continue;
    for (const auto& key : plugin.info.reads_keys)
      if (!read_here.count(key) && !inactive.count(key) && job.schema.contains(key) &&
          job.schema.find(key)->owner == config::kHostOwner)
        inactive[key] = fmt::format("it is read by plugin '{}' ({}), which this config does not use", plugin.info.name,
                                    text::join(plugin.info.provides, ", "));
  }
  job.config = std::make_unique<config::ResolvedConfig>(config::validate(document, job.schema, inactive));
  job.notes = document.notes();
  job.notes.insert(job.notes.end(), job.config->notes().begin(), job.config->notes().end());
  job.notes.insert(job.notes.end(), job.config->warnings().begin(), job.config->warnings().end());
  for (const auto& line : job.notes) spdlog::debug("config: {}", line);
  // Note [A DeepSpeed JSON alone]: DeepSpeed's file holds no model, data or step count (the user's script
  // does), so the job trains zhost's defaults; say so once, with how to give them.
  if (document.is_deepspeed_json()) {
    std::vector<std::string> defaults, give;
    if (!job.config->has("model.type")) {
      defaults.push_back(fmt::format("model.type = \"{}\"", job.config->get_string("model.type")));
      give.push_back("--set model.type=hf --set model.path=DIR");
    }
    if (!job.config->has("data.type")) {
      defaults.push_back(fmt::format("data.type = \"{}\"", job.config->get_string("data.type")));
      give.push_back("--set data.type=text --set data.path=FILE");
    }
    if (!job.config->has("steps")) {
      defaults.push_back(fmt::format("steps = {}", job.config->get_int("steps")));
      give.push_back("--set steps=N");
    }
    if (!defaults.empty()) {
      job.infos.push_back(fmt::format(
          "{}: a DeepSpeed JSON names no model, data or steps, so this job trains zhost's defaults ({}); give "
          "yours with {}, or in a companion TOML (--companion FILE) or the file's \"zhost\" table",
          document.source_name(), text::join(defaults, ", "), text::join(give, " ")));
    }
  }
  if (const auto taken = document.hf_defaults_taken(); !taken.empty()) {
    job.infos.push_back(
        fmt::format("{}: \"auto\" that no --set, companion or \"zhost\" table fills took HF "
                    "Trainer's default: {}; give yours with --set KEY=VALUE",
                    document.source_name(), text::join(taken, ", ")));
  }
  return job;
}

}  // namespace zhost
