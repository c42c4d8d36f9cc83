/* zhost/collective.h: the capability table of a collective-transform plugin (ZeRO++ and third parties).
 *
 * Note [Collective transforms] (docs/abi.md "Collective transforms")
 * A transform changes how chosen collectives travel (quantized payloads with their scales, hierarchical
 * routes through sub-groups). A job loads at most one. The host offers it every all_reduce, reduce_scatter,
 * all_gather, broadcast and all_to_all that another plugin (or the host's own stage 0) starts through
 * zhost_collectives, on the calling thread, before anything travels; barriers are not offered. The
 * transform either
 *   - declines: args->handled = 0, returns NULL; the host then runs the collective unchanged; or
 *   - serves it: args->handled = 1. It runs the wire part through the host's zhost_collectives with its own
 *     context; collectives started from inside interpose() are never offered again. A served collective
 *     is complete when interpose() returns: args->recv holds the result and args->work is NULL, also when
 *     the caller asked for ZHOST_COLLECTIVE_ASYNC (wait(NULL) returns at once).
 * A non-NULL status fails the collective as the caller's own would (the caller owns and destroys it).
 * args and everything it points to are borrowed for the call. Partition plugins therefore never change
 * when a transform is switched on; only the numbers in recv may (quantization) and the bytes on the wire.
 */
#ifndef ZHOST_COLLECTIVE_H
#define ZHOST_COLLECTIVE_H

#include "zhost/core.h"
#include "zhost/host.h"
#include "zhost/partition.h"
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

typedef struct zhost_interpose_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_collective_op op;
  zhost_collective_args* collective; /* the caller's; collective->intent says why */
  int32_t handled;                   /* out: 1 served, 0 declined */
} zhost_interpose_args;
#define ZHOST_INTERPOSE_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_interpose_args, handled)
#define ZHOST_INTERPOSE_ARGS_MIN_SIZE ZHOST_INTERPOSE_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_interpose_args, ZHOST_INTERPOSE_ARGS_SIZE);

typedef struct zhost_collective_api {
  size_t struct_size;
  const zhost_ext_header* ext;
  /* Serve args->op with args->collective or set args->handled = 0 to let the host run it
   * (Note [Collective transforms]). */
  zhost_status* (*interpose)(zhost_plugin_instance* self, zhost_interpose_args* args);
  /* Optional (NULL: holds nothing): what the transform keeps between collectives, for the model-state figures:
   * `params` its parameter copies (hpZ), `grads` its gradient state (LoCo's errors), `buffers` staging. */
  zhost_status* (*memory)(zhost_plugin_instance* self, zhost_model_state_bytes* out);
} zhost_collective_api;
#define ZHOST_COLLECTIVE_API_SIZE ZHOST_STRUCT_SIZE(zhost_collective_api, memory)
#define ZHOST_COLLECTIVE_API_MIN_SIZE ZHOST_COLLECTIVE_API_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_collective_api, ZHOST_COLLECTIVE_API_SIZE);

#ifdef __cplusplus
}
#endif
#endif /* ZHOST_COLLECTIVE_H */
