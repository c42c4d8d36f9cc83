// host/plugins/resolver.hpp: from what a config needs to the set of plugins that serve it.
//
// Needs are capability names with the config setting that asks for them ("partition:stage2" because
// zero.stage = 2). Each need is served by the first plugin in search order that provides it; the chosen
// plugins' own requirements are served the same way, transitively. Reported before anything runs, each
// as one line: a need nobody provides (listing what was found), a requirement nobody provides, two chosen
// plugins that conflict, and dependency cycles. The result is in initialisation order (dependencies first).
//
// Offload tiers also serve roles (docs/abi.md "Tier roles"): a need that asks a tier to run the optimizer,
// to store its states or to store parameters carries the role, and the resolver checks that the chosen
// tier declares it; the resolution maps each role to its tier, and orders tiers before the plugins that
// use them (storage before compute before the rest), so they are created before and destroyed after them.
//
// Note [One instance per storing role]: a tier plugin chosen for both storing roles (optimizer-storage and
// params, e.g. both offload devices naming the NVMe tier) gets one instance per role, each told its role at
// create (zhost_plugin_create_args.tier_role): the two never share buffer keys, folders or queues. Any
// other plugin gets one instance, with tier_role 0 (it serves every role it was given: the CPU tier that
// runs the optimizer and stores parameters keeps them in its two key namespaces).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "host/plugins/plugin_info.hpp"

namespace zhost {

struct Need {
  std::string capability;                              // e.g. "offload:cpu"
  std::string reason;                                  // e.g. "zero.offload_optimizer.device = \"cpu\""
  std::optional<zhost_tier_role> role = std::nullopt;  // for a tier: the role it must serve
};

// "optimizer-compute", "optimizer-storage", "params": how config check and errors name a role.
const char* tier_role_name(zhost_tier_role role);
// The ZHOST_PLUGIN_FLAG_TIER_* bits a plugin serves: declared in its descriptor, or for a tier built against
// headers older than 0.4 (which declare nothing) inferred from its offload table: stores when store and
// load are set, computes when optimizer_setup is set (docs/abi.md "Tier roles").
uint64_t tier_flags(const LoadedPlugin& plugin);

// The ZeRO selectors of a config, from which needs derive.
struct ZeroSelection {
  int64_t stage = 0;
  std::string offload_optimizer = "none";
  std::string offload_optimizer_storage = "none";
  std::string offload_param = "none";
  // The tier of offload_optimizer declares ZHOST_PLUGIN_FLAG_TIER_DEVICE_STORES: it keeps the states and the
  // CPU tier steps them (Note [Storing tiers by their descriptors]).
  bool optimizer_device_stores = false;
  bool quantized_weights = false;
  bool quantized_gradients = false;
  int64_t hpz_partition_size = 1;
  bool loco = false;  // zero.zeropp_loco_param.enabled
};

// Throws UsageError for a selection no plugin set could serve (a storage tier without a computing one).
std::vector<Need> needs_for(const ZeroSelection& zero);

// One plugin instance to create: its plugin, and the role it alone serves (0: every role of the plugin).
struct InstanceSpec {
  const LoadedPlugin* plugin = nullptr;
  uint32_t tier_role = 0;  // a zhost_tier_role, or 0
};

struct Resolution {
  std::vector<const LoadedPlugin*> plugins;             // initialisation order
  std::vector<InstanceSpec> instances;                  // initialisation order (Note [One instance per storing role])
  std::map<std::string, const LoadedPlugin*> provider;  // capability -> chosen plugin
  std::map<const LoadedPlugin*, std::vector<std::string>> chosen_for;  // plugin -> reasons it was chosen
  std::map<zhost_tier_role, const LoadedPlugin*> tiers;                // role -> the tier serving it

  // The roles `plugin` serves, by name ("optimizer-compute"); empty for a plugin that is no tier.
  std::vector<std::string> roles_of(const LoadedPlugin* plugin) const;
};

// Throws UsageError on the first problem. `found` is in search order.
Resolution resolve_plugins(const std::vector<Need>& needs, const std::vector<LoadedPlugin>& found);

// A storage a job's optimizer states can be moved into while it runs (docs/abi.md "Storage swap"; a
// zero.offload_optimizer.swap_schedule entry or `zhost control RUN_DIR swap`): "cpu" or "none" are the computing
// tier's own host memory (nullptr); any other NAME is the first plugin in `found` providing offload:NAME, which
// must store buffers. Throws UsageError starting with `why` when there is none or it cannot store.
const LoadedPlugin* storage_swap_target(const std::string& name, const std::vector<LoadedPlugin>& found,
                                        const std::string& why);
// Whether `compute`, a computing tier, can move its states to another storage (its optimizer table's move_storage).
bool can_move_storage(const LoadedPlugin& compute);
// Whether `partition`, a partition plugin, can move its offloaded parameter shards (move_param_storage).
bool can_move_param_storage(const LoadedPlugin& partition);

// Config keys declared by found plugins that the resolution does not use, with the reason, for the
// config validator ("it belongs to plugin 'stage2', which this config does not use").
std::map<std::string, std::string> inactive_plugin_keys(const Resolution& resolution,
                                                        const std::vector<LoadedPlugin>& found);

}  // namespace zhost
