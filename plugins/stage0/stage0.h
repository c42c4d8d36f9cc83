/* plugins/stage0/stage0.h: stage 0, plain data parallelism, the host's built-in partition plugin
 * ("stage0", provides partition:stage0). It is written against the SDK alone like every other plugin, and
 * is linked into the zhost executable instead of being loaded from a file, so that a job without any
 * plugin file still runs (and the partition contract is exercised). The host registers this entry as a
 * built-in plugin before discovery; it is the same negotiation entry a .so would export. */
#ifndef ZHOST_PLUGINS_STAGE0_H
#define ZHOST_PLUGINS_STAGE0_H

#include "zhost/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

zhost_status* zhost_stage0_plugin_v1(zhost_negotiation* io);

#ifdef __cplusplus
}
#endif
#endif /* ZHOST_PLUGINS_STAGE0_H */
