// host/config/schema/host_rules.hpp: the rules across the host's config keys: every combination `zhost run`
// would refuse, so that `zhost config check` refuses it first, and keys the chosen type does not read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/config/schema/schema.hpp"

namespace zhost::config {

// Adds the rules to a schema that already holds the host's keys (add_host_keys calls it).
void add_host_rules(Schema& schema);

// Whether a tier that stores outside host memory (ZHOST_PLUGIN_FLAG_TIER_OUTSIDE_HOST_MEMORY, e.g. in files on
// NVMe) keeps the optimizer's fp32 master and states (named by zero.offload_optimizer.device or .storage) or
// stage 3's parameter shards (zero.offload_param.device): one definition for config check's rules and the
// engine's host-memory check (Note [Storing tiers by their descriptors], host/plugins/resolver.cpp).
bool optimizer_states_outside_host_memory(const ResolvedConfig& config);
bool params_outside_host_memory(const ResolvedConfig& config);

// One entry of zero.offload_optimizer.swap_schedule or zero.offload_param.swap_schedule, "STEP:STORAGE": after
// step STEP the optimizer's states (or stage 3's parameter shards) move into STORAGE ("cpu": host memory, or a
// storing tier's name). Note [Storage swap], host/engine/storage_swap.hpp.
// The storage a job starts with under `key`'s schedule: for the optimizer's states the device itself when its
// tier keeps them (TierFacts::device_stores), zero.offload_optimizer.storage, or "cpu" (the computing tier's
// memory); for parameter shards zero.offload_param.device.
std::string initial_swap_storage(const ResolvedConfig& config, const std::string& key);
struct StorageSwapPoint {
  int64_t after_step = 0;
  std::string storage;
};
// The schedule under `key`; an entry that is not "STEP:STORAGE" with a whole STEP >= 1 sets `problem` (when not
// null) to a one-line reason and ends the list there.
std::vector<StorageSwapPoint> storage_swap_schedule(const ResolvedConfig& config, const std::string& key,
                                                    std::string* problem = nullptr);

}  // namespace zhost::config
