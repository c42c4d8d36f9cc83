// plugins/stage1/stage1.cpp: the ZeRO stage 1 plugin (optimizer states partitioned). The implementation is
// shared with stage 2 in plugins/zero_common.
#include "plugins/zero_common/zero_plugin.hpp"

ZHOST_PLUGIN_ENTRY(zhost::zero::describe(1), zhost::zero::api(1))
