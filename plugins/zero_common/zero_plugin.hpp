// plugins/zero_common/zero_plugin.hpp: the plugin face of ZeRO stages 1 and 2: descriptor (name, what it
// provides, DeepSpeed's zero_optimization keys with their defaults) and the partition table. Each stage's
// folder exports it with ZHOST_PLUGIN_ENTRY(zhost::zero::describe(N), zhost::zero::api(N)).
#pragma once

#include "zhost/cpp/plugin.hpp"

namespace zhost::zero {

const zhost_plugin_descriptor* describe(int stage);
const zhost_plugin_api* api(int stage);

}  // namespace zhost::zero
