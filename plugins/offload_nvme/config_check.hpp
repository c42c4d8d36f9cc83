// plugins/offload_nvme/config_check.hpp: the NVMe tier's checks of a job's config (zhost_plugin_api.check_config):
// Note [NVMe config check], config_check.cpp.
#pragma once

#include "zhost/cpp/plugin.hpp"

namespace zhost::nvme_tier {

// Refuses (sdk::ConfigCheck::refuse) a folder this job would use that is missing, not a writable folder or
// not on a file system that takes O_DIRECT, and model states that cannot fit its disk's free space.
void check_config(const sdk::ConfigCheck& check);

}  // namespace zhost::nvme_tier
