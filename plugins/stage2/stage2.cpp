// plugins/stage2/stage2.cpp: the ZeRO stage 2 plugin (optimizer states and gradients partitioned). The
// implementation is shared with stage 1 in plugins/zero_common.
#include "plugins/zero_common/zero_plugin.hpp"

ZHOST_PLUGIN_ENTRY(zhost::zero::describe(2), zhost::zero::api(2))
