// host/job/plugin_checks.hpp: each chosen plugin's own checks of the config (zhost_plugin_api.check_config), run
// by `zhost config check`, by `zhost run` before any rank starts, and by each rank before it creates an instance.
// Note [Plugin config checks], plugin_checks.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "host/job/job_setup.hpp"

namespace zhost {

// What the host knows of the job beyond its config when it asks the plugins (zhost_config_check_args);
// 0 means not known.
struct ConfigCheckFacts {
  int64_t world_size = 0;
  int64_t local_ranks = 0;
  uint64_t optimizer_storage_bytes = 0;  // what the optimizer-storage tier will keep on this machine
  uint64_t params_storage_bytes = 0;     // what the params tier will keep on this machine
  // The model's parameters in registration order: elements and owning block of each; empty when not known.
  std::vector<int64_t> param_numels;
  std::vector<int32_t> param_blocks;
  uint32_t num_blocks = 0;
};

// Calls check_config of every plugin the job chose, and of every storing tier it may swap in. Throws
// config::ConfigErrors with one line per refusal (ZHOST_ERR_CONFIG: "LOCATION MESSAGE", located at the key the
// plugin names), or the error of another status code ("plugin 'NAME' (FILE) cannot run here: ...").
void check_plugin_configs(const JobSetup& job, const ConfigCheckFacts& facts);

}  // namespace zhost
