// host/job/plugin_checks.cpp: Note [Plugin config checks].
#include "host/job/plugin_checks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "host/config/schema/host_rules.hpp"
#include "host/config/schema/validate.hpp"
#include "host/core/text.hpp"
#include "zhost/plugin.h"

namespace zhost {
namespace {

// Note [Plugin config checks]: what a plugin needs of the config is checked by the plugin, through its
// optional check_config, so that a third-party plugin's settings are refused at `zhost config
// check` exactly as zhost's own, and the host keeps no plugin's name: the NVMe tier checks its folders (a
// writable folder that takes O_DIRECT) and the room on their disks, stage 3 its offload buffer against the
// model's largest shard. The host calls it once per chosen plugin (each storing role it serves as a bit of
// tier_roles), and for each storing tier that a swap schedule names (with that role) or that `zhost control`
// may swap in (no role: it checks what is set), with a host context holding the plugin's declared keys, what
// the job is (world size, ranks here, the bytes each storing role will hold, the model's parameter shapes) and why the
// plugin was chosen. A ZHOST_ERR_CONFIG refusal becomes one config error line at the key the plugin names
// (or at the setting that chose it), like the host's own rules; every refusal is collected before the job
// fails, so `config check` lists them all. `zhost config check` and `zhost run` call it before any rank
// starts, and each rank again before it creates instances (a rank started by another launcher).

// The config keys a reason names: the first word of each "; "-separated part ("zero.stage = 2").
std::vector<std::string> reason_keys(const std::string& reasons) {
  std::vector<std::string> keys;
  size_t start = 0;
  while (start < reasons.size()) {
    size_t end = reasons.find("; ", start);
    if (end == std::string::npos) end = reasons.size();
    const std::string part = reasons.substr(start, end - start);
    keys.push_back(part.substr(0, part.find(' ')));
    start = end + 2;
  }
  return keys;
}

// Where a refusal is reported: the key the plugin named when the config sets it, else the first setting that
// chose the plugin, else the named key's default, else the config itself.
std::string refusal_location(const config::ResolvedConfig& config, const char* key, const std::string& reasons) {
  const auto written = [&config](const std::string& path) { return config.active(path) && config.has(path); };
  if (key && written(key)) return config.location(key);
  for (const std::string& chooser : reason_keys(reasons))
    if (written(chooser)) return config.location(chooser);
  if (key && config.active(key)) return config.location(key);
  return (config.source_name().empty() ? std::string("config") : config.source_name()) + ":";
}

// What of this config a partition or computing tier built against ABI 1.0 would not know, and so silently
// compute otherwise: Lamb (a kind 1.0 lacks) and betas that change by the step (read from the step args since
// 1.1, Note [OneCycle's momentum]). Empty when nothing.
struct Abi11Need {
  const char* key = nullptr;  // where the refusal points
  std::string what;           // empty: the job needs nothing of 1.1
  std::string instead;        // the other way out than a rebuild
};
Abi11Need needs_abi_1_1(const config::ResolvedConfig& config) {
  if (config.get_string("optimizer.type") == "Lamb")
    return {"optimizer.type", "optimizer.type = \"Lamb\"", "choose another optimizer"};
  if (config.get_string("scheduler.type") == "OneCycle" && config.get_bool("scheduler.cycle_momentum") &&
      config.get_string("optimizer.type") != "SGD")
    return {"scheduler.cycle_momentum", "OneCycle's momentum cycling (scheduler.cycle_momentum = true)",
            "set scheduler.cycle_momentum = false"};
  return {};
}

}  // namespace

void check_plugin_configs(const JobSetup& job, const ConfigCheckFacts& facts) {
  const config::ResolvedConfig& config = *job.config;
  if (const Abi11Need needs = needs_abi_1_1(config); !needs.what.empty()) {
    std::vector<std::string> old;
    for (const LoadedPlugin* plugin : job.resolution.plugins) {
      const bool steps = plugin->api && (plugin->api->partition || plugin->api->optimizer);
      if (steps && plugin->abi_major == 1 && plugin->abi_minor < 1)
        old.push_back(
            fmt::format("{} {} needs zhost ABI 1.1, and plugin '{}' ({}) was built against 1.{}; rebuild "
                        "it against the zhost SDK 1.1 or later, or {}",
                        refusal_location(config, needs.key, ""), needs.what, plugin->info.name, plugin->path.string(),
                        plugin->abi_minor, needs.instead));
    }
    if (!old.empty()) throw config::ConfigErrors(std::move(old));
  }
  // Each plugin to ask, with the storing roles it serves (bits) and why it is in the job.
  std::map<const LoadedPlugin*, std::pair<uint32_t, std::vector<std::string>>> asked;
  std::vector<const LoadedPlugin*> order;
  auto ask = [&](const LoadedPlugin* plugin, uint32_t roles, const std::string& why) {
    if (!asked.count(plugin)) order.push_back(plugin);
    auto& [bits, reasons] = asked[plugin];
    bits |= roles;
    if (!why.empty() && std::find(reasons.begin(), reasons.end(), why) == reasons.end()) reasons.push_back(why);
  };
  for (const LoadedPlugin* plugin : job.resolution.plugins) {
    uint32_t roles = 0;
    for (const auto& [role, tier] : job.resolution.tiers)
      if (tier == plugin) roles |= 1u << role;
    auto why = job.resolution.chosen_for.find(plugin);
    ask(plugin, roles, why == job.resolution.chosen_for.end() ? "" : text::join(why->second, "; "));
  }
  for (const auto& [key, role] : {std::pair<const char*, zhost_tier_role>{"zero.offload_optimizer.swap_schedule",
                                                                          ZHOST_TIER_FOR_OPTIMIZER_STORAGE},
                                  {"zero.offload_param.swap_schedule", ZHOST_TIER_FOR_PARAMS}})
    for (const config::StorageSwapPoint& point : config::storage_swap_schedule(config, key))
      if (point.storage != "cpu" && point.storage != "none")
        ask(storage_swap_target(point.storage, job.discovery.plugins, key), 1u << role,
            fmt::format("{} \"{}:{}\"", key, point.after_step, point.storage));
  for (const LoadedPlugin* storage : swappable_storages(job.resolution, job.discovery.plugins)) ask(storage, 0, "");

  uint32_t job_roles = 0;
  for (const auto& [role, tier] : job.resolution.tiers) job_roles |= 1u << role;
  std::vector<std::string> errors;
  for (const LoadedPlugin* plugin : order) {
    const zhost_plugin_api* api = plugin->api;
    if (!api || !api->check_config) continue;
    const auto& [roles, reasons] = asked.at(plugin);
    const std::string chosen_for = text::join(reasons, "; ");
    zhost_host_context* ctx = job.services->create_context({plugin->info.name, plugin_config_values(config, *plugin)});
    zhost_config_check_args args{};
    args.struct_size = sizeof(args);
    args.host = job.services->table();
    args.ctx = ctx;
    args.tier_roles = roles;
    args.job_tier_roles = job_roles;
    args.chosen_for = chosen_for.c_str();
    args.world_size = facts.world_size;
    args.local_ranks = facts.local_ranks;
    args.optimizer_storage_bytes = facts.optimizer_storage_bytes;
    args.params_storage_bytes = facts.params_storage_bytes;
    args.num_params = static_cast<uint32_t>(facts.param_numels.size());
    args.num_blocks = facts.num_blocks;
    args.param_numels = facts.param_numels.empty() ? nullptr : facts.param_numels.data();
    args.param_blocks = facts.param_blocks.empty() ? nullptr : facts.param_blocks.data();
    zhost_status* status = api->check_config(&args);
    job.services->destroy_context(ctx);
    if (!status) continue;
    if (job.services->table()->status_code(status) == ZHOST_ERR_CONFIG) {
      errors.push_back(refusal_location(config, args.key, chosen_for) + " " +
                       job.services->table()->status_message(status));
      job.services->table()->status_destroy(status);
      continue;
    }
    HostServices::throw_if_error(
        status, fmt::format("plugin '{}' ({}) cannot run here", plugin->info.name, plugin->path.string()));
  }
  if (!errors.empty()) throw config::ConfigErrors(std::move(errors));
}

}  // namespace zhost
