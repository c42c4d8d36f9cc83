/* zhost/storage.h: the storage table of an offload tier (host memory, NVMe, third-party tiers): flat buffers
 * outside device memory, moved asynchronously.
 *
 * An offload tier fills one or both of two tables, split by role (docs/abi.md "Tier roles"): this one when it
 * stores (descriptor flag ZHOST_PLUGIN_FLAG_TIER_STORES: optimizer storage, parameter shards), and
 * zhost_optimizer_tier_api (zhost/optimizer.h) when it computes (ZHOST_PLUGIN_FLAG_TIER_COMPUTES: it runs the
 * optimizer where the states live). The host refuses a tier whose flags and tables disagree.
 *
 * Buffers are named by a 64-bit key chosen by the caller (e.g. sub-group id and state kind); a tier moves device
 * tensors through the host's copy services (zhost/host.h). Buffer keys and optimizer-group keys are two separate
 * namespaces: buffer 5 and group 5 are different things. A tier exports and imports its whole state through a
 * byte stream (hot swap of a storing tier, docs/abi.md "Storage swap").
 */
#ifndef ZHOST_STORAGE_H
#define ZHOST_STORAGE_H

#include <dlpack/dlpack.h>

#include "zhost/core.h"
#include "zhost/host.h"
#include "zhost/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zhost_tier_event zhost_tier_event; /* completion of an asynchronous tier operation */

typedef struct zhost_tier_io_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  uint64_t key;            /* caller-chosen buffer name */
  DLTensor* data;          /* source (store) or destination (load), contiguous, in host memory or on the
                              training device; borrowed until the event completes */
  zhost_tier_event* event; /* out: NULL when done already, else complete it with wait() or test(); until then
                              the event is the caller's */
} zhost_tier_io_args;
#define ZHOST_TIER_IO_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_tier_io_args, event)
#define ZHOST_TIER_IO_ARGS_MIN_SIZE ZHOST_TIER_IO_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_tier_io_args, ZHOST_TIER_IO_ARGS_SIZE);

/* wait, test and order_compute_after. */
typedef struct zhost_tier_event_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_tier_event* event; /* from store or load; NULL is a completed event */
  int32_t done;            /* out, test only: 1 when the event completed (and was freed), 0 while in flight */
} zhost_tier_event_args;
#define ZHOST_TIER_EVENT_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_tier_event_args, done)
#define ZHOST_TIER_EVENT_ARGS_MIN_SIZE ZHOST_TIER_EVENT_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_tier_event_args, ZHOST_TIER_EVENT_ARGS_SIZE);

/* A buffer or optimizer group by key: drop (both tables) and the optimizer's grad_zero. */
typedef struct zhost_tier_key_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  uint64_t key;
} zhost_tier_key_args;
#define ZHOST_TIER_KEY_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_tier_key_args, key)
#define ZHOST_TIER_KEY_ARGS_MIN_SIZE ZHOST_TIER_KEY_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_tier_key_args, ZHOST_TIER_KEY_ARGS_SIZE);

/* Writes a chunk of exported state; returns non-zero to stop the export. */
typedef int32_t (*zhost_state_writer)(void* user, const void* bytes, size_t len);
/* Reads up to `capacity` bytes of state to import; returns bytes read, 0 at the end, negative on error. */
typedef int64_t (*zhost_state_reader)(void* user, void* bytes, size_t capacity);

/* export_state and import_state: the tier's whole state as a byte stream. */
typedef struct zhost_tier_stream_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_state_writer write; /* export_state: called with each chunk, in order */
  zhost_state_reader read;  /* import_state: called until it returns 0 */
  void* user;               /* passed back unchanged */
} zhost_tier_stream_args;
#define ZHOST_TIER_STREAM_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_tier_stream_args, user)
#define ZHOST_TIER_STREAM_ARGS_MIN_SIZE ZHOST_TIER_STREAM_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_tier_stream_args, ZHOST_TIER_STREAM_ARGS_SIZE);

/* What a tier holds now. host_bytes: host memory it allocated (buffers, staging, resident states).
 * storage_bytes: a storing tier: what its own storage holds (the NVMe tier: its files, in whole blocks);
 * a computing tier: what it placed in its storing tier (that tier counts the same bytes itself). A tier with both
 * tables answers the same figures from both; the host counts them once. */
typedef struct zhost_tier_memory {
  size_t struct_size;
  const zhost_ext_header* ext;
  uint64_t host_bytes;
  uint64_t storage_bytes;
} zhost_tier_memory;
#define ZHOST_TIER_MEMORY_SIZE ZHOST_STRUCT_SIZE(zhost_tier_memory, storage_bytes)
#define ZHOST_TIER_MEMORY_MIN_SIZE ZHOST_TIER_MEMORY_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_tier_memory, ZHOST_TIER_MEMORY_SIZE);

/* Moving a computing tier's optimizer states to another storage while a job runs (hot swap, docs/abi.md
 * "Storage swap"). The host calls the three phases on every rank: COPY everywhere, then, once every rank's COPY
 * succeeded, COMMIT everywhere, else ABORT everywhere. */
typedef enum zhost_storage_move_phase {
  ZHOST_STORAGE_MOVE_COPY = 1,   /* copy every group's master and states into `storage`; the groups keep using
                                    the current storage, which stays untouched. On failure the tier has dropped
                                    what it had copied (ABORT is still called and finds nothing) */
  ZHOST_STORAGE_MOVE_COMMIT = 2, /* use the copies from now on and drop the old ones; cannot fail */
  ZHOST_STORAGE_MOVE_ABORT = 3   /* drop the copies and stay on the current storage; cannot fail */
} zhost_storage_move_phase;

typedef struct zhost_tier_storage_move {
  size_t struct_size;
  const zhost_ext_header* ext;
  int32_t phase; /* a zhost_storage_move_phase */
  /* COPY: the new storage tier; instance NULL: the computing tier's own host memory. The ref is copied; the
   * instance must stay alive until ABORT returns, or, after COMMIT, until the next COMMIT returns or the
   * computing tier's destroy() has returned. Ignored by COMMIT and ABORT. */
  const zhost_tier_ref* storage;
  uint64_t bytes; /* out, COPY: bytes of master and states copied */
} zhost_tier_storage_move;
#define ZHOST_TIER_STORAGE_MOVE_SIZE ZHOST_STRUCT_SIZE(zhost_tier_storage_move, bytes)
#define ZHOST_TIER_STORAGE_MOVE_MIN_SIZE ZHOST_TIER_STORAGE_MOVE_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_tier_storage_move, ZHOST_TIER_STORAGE_MOVE_SIZE);

typedef struct zhost_storage_api {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_status* (*store)(zhost_plugin_instance* self, zhost_tier_io_args* args);
  zhost_status* (*load)(zhost_plugin_instance* self, zhost_tier_io_args* args);
  /* Blocks until the event's operation has completed and frees the event; the status is its outcome. */
  zhost_status* (*wait)(zhost_plugin_instance* self, zhost_tier_event_args* args);
  /* Never blocks. Sets args->done = 1 when the event's operation has completed: the event is then completed and
   * freed exactly as by wait(), and the status is the operation's outcome. Sets done = 0 while it is still in
   * flight: nothing is freed and the event stays the caller's. A tier that cannot tell without blocking answers
   * 0, so a caller that needs the data ends with wait(). */
  zhost_status* (*test)(zhost_plugin_instance* self, zhost_tier_event_args* args);
  /* Optional (NULL: wait() before using the data): compute-stream work issued after this call waits for the
   * event's transfer, and the caller is not blocked; the event stays pending and still needs wait(). Lets a
   * load into device memory overlap with compute. */
  zhost_status* (*order_compute_after)(zhost_plugin_instance* self, zhost_tier_event_args* args);
  /* Frees buffer args->key (the buffer namespace only); dropping an unknown key is not an error. */
  zhost_status* (*drop)(zhost_plugin_instance* self, zhost_tier_key_args* args);
  zhost_status* (*export_state)(zhost_plugin_instance* self, zhost_tier_stream_args* args);
  zhost_status* (*import_state)(zhost_plugin_instance* self, zhost_tier_stream_args* args);
  /* What the tier holds now (zhost_tier_memory). */
  zhost_status* (*memory)(zhost_plugin_instance* self, zhost_tier_memory* out);
} zhost_storage_api;
#define ZHOST_STORAGE_API_SIZE ZHOST_STRUCT_SIZE(zhost_storage_api, memory)
#define ZHOST_STORAGE_API_MIN_SIZE ZHOST_STORAGE_API_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_storage_api, ZHOST_STORAGE_API_SIZE);

#ifdef __cplusplus
}
#endif
#endif /* ZHOST_STORAGE_H */
