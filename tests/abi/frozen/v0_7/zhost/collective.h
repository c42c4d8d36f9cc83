/* zhost/collective.h: the capability table of a collective-transform plugin (ZeRO++ and third parties).
 *
 * STATUS: draft of ABI 0.x, completed by the ZeRO++ work.
 *
 * A transform changes how chosen collectives travel (quantized payloads with their scales, hierarchical
 * routes through sub-groups). The host offers each collective to the loaded transform first: the
 * transform either serves it, calling the host's plain collectives for the wire part, or declines with
 * *handled = 0 and the host runs it unchanged. Partition plugins therefore never change when a transform
 * is switched on.
 */
#ifndef ZHOST_COLLECTIVE_H
#define ZHOST_COLLECTIVE_H

#include "zhost/core.h"
#include "zhost/host.h"
#include "zhost/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum zhost_collective_op {
  ZHOST_OP_ALL_REDUCE = 1,
  ZHOST_OP_REDUCE_SCATTER = 2,
  ZHOST_OP_ALL_GATHER = 3,
  ZHOST_OP_BROADCAST = 4,
  ZHOST_OP_ALL_TO_ALL = 5
} zhost_collective_op;

typedef struct zhost_collective_api {
  size_t struct_size;
  const zhost_ext_header* ext;
  /* Serve `op` with `args` (its intent says why), or set *handled = 0 to let the host run it. */
  zhost_status* (*interpose)(zhost_plugin_instance* self, zhost_collective_op op, zhost_collective_args* args,
                             int32_t* handled);
} zhost_collective_api;
#define ZHOST_COLLECTIVE_API_SIZE ZHOST_STRUCT_SIZE(zhost_collective_api, interpose)
#define ZHOST_COLLECTIVE_API_MIN_SIZE ZHOST_STRUCT_SIZE(zhost_collective_api, interpose) /* since 0.1 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_collective_api, ZHOST_COLLECTIVE_API_SIZE);

#ifdef __cplusplus
}
#endif
#endif /* ZHOST_COLLECTIVE_H */
