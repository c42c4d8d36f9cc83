// host/plugins/resolver.cpp: needs -> providers, transitive requirements, conflicts, cycles, order.
#include "host/plugins/resolver.hpp"

#include <algorithm>
#include <functional>
#include <set>

#include "host/core/error.hpp"
#include "host/core/text.hpp"
#include "zhost/partition.h"
#include "zhost/zhost.h"

namespace zhost {

const char* tier_role_name(zhost_tier_role role) {
  switch (role) {
    case ZHOST_TIER_FOR_OPTIMIZER:
      return "optimizer-compute";
    case ZHOST_TIER_FOR_OPTIMIZER_STORAGE:
      return "optimizer-storage";
    case ZHOST_TIER_FOR_PARAMS:
      return "params";
  }
  return "unknown";
}

uint64_t tier_flags(const LoadedPlugin& plugin) {
  constexpr uint64_t kTierBits = ZHOST_PLUGIN_FLAG_TIER_STORES | ZHOST_PLUGIN_FLAG_TIER_COMPUTES |
                                 ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE | ZHOST_PLUGIN_FLAG_TIER_DEVICE_STORES |
                                 ZHOST_PLUGIN_FLAG_TIER_OUTSIDE_HOST_MEMORY;
  if (plugin.info.kind != ZHOST_KIND_OFFLOAD) return 0;
  return plugin.info.flags & kTierBits;  // the loader checked that the tables match (check_api)
}

std::vector<std::string> Resolution::roles_of(const LoadedPlugin* plugin) const {
  std::vector<std::string> roles;
  for (const auto& [role, tier] : tiers)
    if (tier == plugin) roles.push_back(tier_role_name(role));
  return roles;
}

std::vector<Need> needs_for(const ZeroSelection& zero) {
  std::vector<Need> needs;
  // Stage 0 is a need too: the host's built-in data-parallel engine serves it, unless a plugin file
  // providing partition:stage0 is found first on the search path.
  needs.push_back({fmt::format("partition:stage{}", zero.stage), fmt::format("zero.stage = {}", zero.stage)});
  const std::string device_reason = fmt::format("zero.offload_optimizer.device = \"{}\"", zero.offload_optimizer);
  const bool storage_named = zero.offload_optimizer_storage != "none";
  if (storage_named && zero.offload_optimizer == "none")
    fail_usage(
        "zero.offload_optimizer.storage = \"{}\" keeps the optimizer's states in a storage tier, but no tier "
        "runs the optimizer; set zero.offload_optimizer.device = \"cpu\"",
        zero.offload_optimizer_storage);
  // Note [Storing tiers by their descriptors]: DeepSpeed's NVMe device for offload_optimizer means states that
  // live on NVMe while the CPU steps them. The host does not know that tier by name: a storing tier declares in
  // its descriptor that, named as the optimizer's device, it keeps the states (ZHOST_PLUGIN_FLAG_TIER_DEVICE_STORES:
  // the CPU tier then steps them, docs/abi.md "Tier composition"), and that it keeps them outside host memory
  // (ZHOST_PLUGIN_FLAG_TIER_OUTSIDE_HOST_MEMORY: the host's memory check leaves them out). Its own keys and checks
  // (its folders, their room) are its descriptor's keys and its check_config. job_setup.cpp turns the flags of
  // the tiers found into ZeroSelection::optimizer_device_stores and the config rules' TierFacts, so a
  // third-party tier that declares the same gets the same treatment.
  if (zero.optimizer_device_stores) {
    if (storage_named)
      fail_usage(
          "zero.offload_optimizer.device = \"{}\" keeps the states in that storing tier already; remove "
          "zero.offload_optimizer.storage = \"{}\"",
          zero.offload_optimizer, zero.offload_optimizer_storage);
    needs.push_back({"offload:" + zero.offload_optimizer, device_reason, ZHOST_TIER_FOR_OPTIMIZER_STORAGE});
    needs.push_back({"offload:cpu", device_reason + " (the CPU tier steps the states)", ZHOST_TIER_FOR_OPTIMIZER});
  } else if (zero.offload_optimizer != "none") {
    needs.push_back({"offload:" + zero.offload_optimizer, device_reason, ZHOST_TIER_FOR_OPTIMIZER});
    if (storage_named)
      needs.push_back({"offload:" + zero.offload_optimizer_storage,
                       fmt::format("zero.offload_optimizer.storage = \"{}\"", zero.offload_optimizer_storage),
                       ZHOST_TIER_FOR_OPTIMIZER_STORAGE});
  }
  if (zero.offload_param != "none")
    needs.push_back({"offload:" + zero.offload_param,
                     fmt::format("zero.offload_param.device = \"{}\"", zero.offload_param), ZHOST_TIER_FOR_PARAMS});
  if (zero.quantized_weights) needs.push_back({"collective:qwz", "zero.zero_quantized_weights = true"});
  if (zero.quantized_gradients) needs.push_back({"collective:qgz", "zero.zero_quantized_gradients = true"});
  if (zero.hpz_partition_size > 1)
    needs.push_back({"collective:hpz", fmt::format("zero.zero_hpz_partition_size = {}", zero.hpz_partition_size)});
  if (zero.loco) needs.push_back({"collective:loco", "zero.zeropp_loco_param.enabled = true"});
  return needs;
}

namespace {

std::string describe_found(const std::vector<LoadedPlugin>& found) {
  std::vector<std::string> items;
  for (const auto& p : found) items.push_back(fmt::format("{} ({})", p.info.name, text::join(p.info.provides, ", ")));
  return items.empty() ? "no plugins at all" : text::join(items, "; ");
}

const LoadedPlugin* first_provider(const std::vector<LoadedPlugin>& found, const std::string& capability) {
  for (const auto& p : found)
    if (std::count(p.info.provides.begin(), p.info.provides.end(), capability)) return &p;
  return nullptr;
}

std::string declared_roles(uint64_t flags) {
  std::vector<std::string> can;
  if (flags & ZHOST_PLUGIN_FLAG_TIER_STORES) can.push_back("storing buffers");
  if (flags & ZHOST_PLUGIN_FLAG_TIER_COMPUTES) can.push_back("running the optimizer");
  return can.empty() ? "no tier role" : text::join(can, " and ");
}

// The tier name a config writes for a capability: "offload:hello" -> "hello".
std::string tier_name(const std::string& capability) { return capability.substr(capability.find(':') + 1); }

// Each tier serves the roles its needs ask for (declared or inferred, see tier_flags), and a composed pair
// fits together: the computing tier keeps states in another tier, and that tier is nobody else's.
void check_tier_roles(const std::vector<Need>& needs, Resolution& resolution) {
  for (const auto& need : needs) {
    if (!need.role) continue;
    const LoadedPlugin* tier = resolution.provider.at(need.capability);
    const uint64_t flags = tier_flags(*tier);
    const std::string who = fmt::format("plugin '{}' ({})", tier->info.name, tier->path.string());
    if (tier->info.kind != ZHOST_KIND_OFFLOAD)
      fail_usage("{} asks {} to serve as an offload tier (role {}), but it is a {} plugin", need.reason, who,
                 tier_role_name(*need.role), kind_name(tier->info.kind));
    if (*need.role == ZHOST_TIER_FOR_OPTIMIZER && !(flags & ZHOST_PLUGIN_FLAG_TIER_COMPUTES)) {
      if (flags & ZHOST_PLUGIN_FLAG_TIER_STORES)
        fail_usage(
            "{} asks {} to run the optimizer (role optimizer-compute), but it declares only storing "
            "buffers; let the CPU tier step the states kept there: zero.offload_optimizer.device = \"cpu\" "
            "and zero.offload_optimizer.storage = \"{}\"",
            need.reason, who, tier_name(need.capability));
      fail_usage("{} asks {} to run the optimizer (role optimizer-compute), but it declares {}", need.reason, who,
                 declared_roles(flags));
    }
    if (*need.role != ZHOST_TIER_FOR_OPTIMIZER && !(flags & ZHOST_PLUGIN_FLAG_TIER_STORES))
      fail_usage("{} asks {} to store buffers (role {}), but it declares {}", need.reason, who,
                 tier_role_name(*need.role), declared_roles(flags));
    resolution.tiers[*need.role] = tier;
  }
  auto storage = resolution.tiers.find(ZHOST_TIER_FOR_OPTIMIZER_STORAGE);
  if (storage == resolution.tiers.end()) return;
  const LoadedPlugin* compute = resolution.tiers.at(ZHOST_TIER_FOR_OPTIMIZER);
  if (!(tier_flags(*compute) & ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE))
    fail_usage(
        "plugin '{}' ({}) runs the optimizer but cannot keep its states in another tier (it does not declare "
        "ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE); remove zero.offload_optimizer.storage or use "
        "zero.offload_optimizer.device = \"cpu\"",
        compute->info.name, compute->path.string());
  if (storage->second == compute)
    fail_usage("plugin '{}' would store the optimizer states it steps itself; remove zero.offload_optimizer.storage",
               compute->info.name);
}

// Note [One instance per storing role]: a plugin storing for both roles is created twice.
std::vector<InstanceSpec> instance_specs(const Resolution& resolution) {
  const auto storage = resolution.tiers.find(ZHOST_TIER_FOR_OPTIMIZER_STORAGE);
  const auto params = resolution.tiers.find(ZHOST_TIER_FOR_PARAMS);
  const LoadedPlugin* split =
      storage != resolution.tiers.end() && params != resolution.tiers.end() && storage->second == params->second
          ? storage->second
          : nullptr;
  std::vector<InstanceSpec> specs;
  for (const LoadedPlugin* plugin : resolution.plugins) {
    if (plugin != split) {
      specs.push_back({plugin, 0});
      continue;
    }
    specs.push_back({plugin, ZHOST_TIER_FOR_OPTIMIZER_STORAGE});
    specs.push_back({plugin, ZHOST_TIER_FOR_PARAMS});
  }
  return specs;
}

}  // namespace

Resolution resolve_plugins(const std::vector<Need>& needs, const std::vector<LoadedPlugin>& found) {
  Resolution resolution;
  // 1. Serve each need, then each chosen plugin's requirements, breadth first.
  std::vector<std::pair<std::string, std::string>> queue;  // capability, why
  for (const auto& need : needs) queue.emplace_back(need.capability, need.reason);
  std::vector<const LoadedPlugin*> chosen;
  for (size_t i = 0; i < queue.size(); ++i) {
    const auto [capability, why] = queue[i];
    const LoadedPlugin* provider = first_provider(found, capability);
    if (!provider) {
      std::vector<std::string> known;
      for (const auto& p : found) known.insert(known.end(), p.info.provides.begin(), p.info.provides.end());
      if (i < needs.size())
        fail_usage(
            "{} needs a plugin providing '{}', but none was found (found: {}){}; add its directory to "
            "plugins.path or ZHOST_PLUGIN_PATH",
            why, capability, describe_found(found), text::did_you_mean(capability, known));
      fail_usage("{}, but no plugin providing '{}' was found (found: {})", why, capability, describe_found(found));
    }
    resolution.provider[capability] = provider;
    resolution.chosen_for[provider].push_back(why);
    if (std::find(chosen.begin(), chosen.end(), provider) != chosen.end()) continue;
    chosen.push_back(provider);
    for (const auto& required : provider->info.requires_caps)
      queue.emplace_back(required, fmt::format("plugin '{}' requires '{}'", provider->info.name, required));
  }
  // 2. Conflicts among the chosen plugins.
  for (const auto* plugin : chosen)
    for (const auto& conflict : plugin->info.conflicts)
      for (const auto* other : chosen)
        if (other != plugin && std::count(other->info.provides.begin(), other->info.provides.end(), conflict))
          fail_usage(
              "plugins '{}' ({}) and '{}' ({}) conflict: '{}' declares it cannot run with '{}'; change the config "
              "so that only one of them is needed",
              plugin->info.name, plugin->path.string(), other->info.name, other->path.string(), plugin->info.name,
              conflict);
  check_tier_roles(needs, resolution);
  // 3. Initialisation order: dependencies first, cycles reported with their path; tiers before the plugins
  // that use them (storage, compute, params), so they are created before and destroyed after them.
  enum class Mark { kNone, kVisiting, kDone };
  std::map<const LoadedPlugin*, Mark> marks;
  std::vector<const LoadedPlugin*> stack;
  std::function<void(const LoadedPlugin*)> visit = [&](const LoadedPlugin* plugin) {
    Mark& mark = marks[plugin];
    if (mark == Mark::kDone) return;
    if (mark == Mark::kVisiting) {
      std::vector<std::string> cycle;
      auto start = std::find(stack.begin(), stack.end(), plugin);
      for (auto it = start; it != stack.end(); ++it) cycle.push_back((*it)->info.name);
      cycle.push_back(plugin->info.name);
      fail_usage("plugin dependency cycle: {}; one of these plugins must drop its requirement",
                 text::join(cycle, " requires "));
    }
    mark = Mark::kVisiting;
    stack.push_back(plugin);
    for (const auto& required : plugin->info.requires_caps) visit(resolution.provider.at(required));
    stack.pop_back();
    marks[plugin] = Mark::kDone;
    resolution.plugins.push_back(plugin);
  };
  for (zhost_tier_role role : {ZHOST_TIER_FOR_OPTIMIZER_STORAGE, ZHOST_TIER_FOR_OPTIMIZER, ZHOST_TIER_FOR_PARAMS})
    if (auto tier = resolution.tiers.find(role); tier != resolution.tiers.end()) visit(tier->second);
  for (const auto* plugin : chosen) visit(plugin);
  resolution.instances = instance_specs(resolution);
  return resolution;
}

const LoadedPlugin* storage_swap_target(const std::string& name, const std::vector<LoadedPlugin>& found,
                                        const std::string& why) {
  if (name == "cpu" || name == "none") return nullptr;
  const std::string capability = "offload:" + name;
  const LoadedPlugin* tier = first_provider(found, capability);
  if (!tier) {
    std::vector<std::string> known{"cpu"};
    for (const auto& p : found)
      for (const auto& provided : p.info.provides)
        if (capability_area(provided) == "offload" && (tier_flags(p) & ZHOST_PLUGIN_FLAG_TIER_STORES))
          known.push_back(tier_name(provided));
    fail_usage(
        "{}: no plugin provides '{}' (storages found: {}){}; add its directory to plugins.path or "
        "ZHOST_PLUGIN_PATH",
        why, capability, text::join(known, ", "), text::did_you_mean(name, known));
  }
  if (tier->info.kind != ZHOST_KIND_OFFLOAD || !(tier_flags(*tier) & ZHOST_PLUGIN_FLAG_TIER_STORES))
    fail_usage("{}: plugin '{}' ({}) provides '{}' but does not store buffers (it declares {}); name a storing tier",
               why, tier->info.name, tier->path.string(), capability, declared_roles(tier_flags(*tier)));
  return tier;
}

bool can_move_storage(const LoadedPlugin& compute) {
  const zhost_optimizer_tier_api* table = compute.api ? compute.api->optimizer : nullptr;
  return table && table->move_storage && (tier_flags(compute) & ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE);
}

bool can_move_param_storage(const LoadedPlugin& partition) {
  const zhost_partition_api* table = partition.api ? partition.api->partition : nullptr;
  return table && table->move_param_storage;
}

std::map<std::string, std::string> inactive_plugin_keys(const Resolution& resolution,
                                                        const std::vector<LoadedPlugin>& found) {
  std::set<std::string> active;
  for (const auto* plugin : resolution.plugins)
    for (const auto& key : plugin->info.config_keys) active.insert(key.key);
  std::map<std::string, std::string> inactive;
  for (const auto& plugin : found) {
    if (std::count(resolution.plugins.begin(), resolution.plugins.end(), &plugin)) continue;
    for (const auto& key : plugin.info.config_keys)
      if (!active.count(key.key) && !inactive.count(key.key))
        inactive[key.key] = fmt::format("it is read by plugin '{}' ({}), which this config does not use",
                                        plugin.info.name, text::join(plugin.info.provides, ", "));
  }
  return inactive;
}

}  // namespace zhost
