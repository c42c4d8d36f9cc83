/* zhost/offload.h: the capability table of an offload tier (host memory, NVMe, third-party tiers).
 *
 * STATUS: ABI 0.x. store/load/drop/export/import and the optimizer of computing tiers are served by
 * offload_cpu; the NVMe work may still extend the table. Since 0.3 a tier moves device tensors through the
 * host's copy services (zhost/host.h, zhost_copy_services). Since 0.4 a tier declares its roles, keys have
 * two namespaces, events can be tested without blocking and a computing tier may keep its optimizer states
 * in a storage tier: the tier contract, docs/abi.md "Tier contract". Since 0.7 a computing tier can move its
 * states to another storage while the job runs (optimizer_move_storage): docs/abi.md "Storage swap". Since 0.9
 * it can move finished gradients there too (optimizer_grad_done): docs/abi.md "Gradients in storage".
 *
 * A tier stores flat buffers outside device memory and moves them asynchronously. Buffers are named by a
 * 64-bit key chosen by the caller (e.g. sub-group id and state kind). A tier that can compute (the CPU
 * tier) also runs the optimizer where the states live. Tiers export and import their whole state through
 * a byte stream.
 *
 * Roles (docs/abi.md "Tier roles"): a tier declares in its descriptor's flags what it can do,
 * ZHOST_PLUGIN_FLAG_TIER_STORES (store/load/drop buffers) and ZHOST_PLUGIN_FLAG_TIER_COMPUTES (the
 * optimizer_* functions below), and ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE when, computing, it can keep its
 * groups' states in another tier (host services tier_for(ZHOST_TIER_FOR_OPTIMIZER_STORAGE)). A tier built
 * against headers older than 0.4 declares nothing; the host then infers: stores when store and load are
 * set, computes when optimizer_setup is set.
 *
 * Key namespaces (0.4): buffer keys (store, load, drop) and optimizer-group keys (optimizer_setup,
 * optimizer_grad, optimizer_step, optimizer_step_range, optimizer_drop) are two separate namespaces: buffer
 * 5 and group 5 are different things, and drop() never touches a group. (A tier built against 0.3 may
 * drop a group of the same key in drop(); callers never relied on it.)
 */
#ifndef ZHOST_OFFLOAD_H
#define ZHOST_OFFLOAD_H

#include <dlpack/dlpack.h>

#include "zhost/core.h"
#include "zhost/optimizer.h"
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
  zhost_tier_event* event; /* out: NULL when done already, else complete it with wait_event() or
                              test_event(); until then the event is the caller's */
} zhost_tier_io_args;
#define ZHOST_TIER_IO_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_tier_io_args, event)
#define ZHOST_TIER_IO_ARGS_MIN_SIZE ZHOST_STRUCT_SIZE(zhost_tier_io_args, event) /* since 0.1 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_tier_io_args, ZHOST_TIER_IO_ARGS_SIZE);

/* Writes a chunk of exported state; returns non-zero to stop the export. */
typedef int32_t (*zhost_state_writer)(void* user, const void* bytes, size_t len);
/* Reads up to `capacity` bytes of state to import; returns bytes read, 0 at the end, negative on error. */
typedef int64_t (*zhost_state_reader)(void* user, void* bytes, size_t capacity);

/* ---- computing tiers: the optimizer runs where its states live (ZeRO-Offload) ------------------------
 * A partition plugin hands a tier one optimizer group per key (e.g. its partition): the tier keeps the
 * group's fp32 master weights, optimizer states and an fp32 gradient accumulator. The partition adds
 * reduced gradients into the accumulator (a view in host memory), and at the step the tier updates the
 * master and states in one pass and writes the new values, in the dtype the caller asks for, to where
 * the partition all-gathers them from. */
typedef struct zhost_tier_optimizer_setup {
  size_t struct_size;
  const zhost_ext_header* ext;
  uint64_t key;                          /* names the group; unique per instance */
  const zhost_optimizer_desc* optimizer; /* borrowed for the call */
  const DLTensor* initial_master;        /* 1-D fp32 in host memory: the group's starting values, copied */
} zhost_tier_optimizer_setup;
#define ZHOST_TIER_OPTIMIZER_SETUP_SIZE ZHOST_STRUCT_SIZE(zhost_tier_optimizer_setup, initial_master)
#define ZHOST_TIER_OPTIMIZER_SETUP_MIN_SIZE /* since 0.1 */ \
  ZHOST_STRUCT_SIZE(zhost_tier_optimizer_setup, initial_master)
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_tier_optimizer_setup, ZHOST_TIER_OPTIMIZER_SETUP_SIZE);

typedef struct zhost_tier_step_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  uint64_t key;
  int64_t step; /* 1-based count of applied steps, this one included (bias correction) */
  double lr;
  double grad_scale;    /* the step uses accumulator * grad_scale as the gradient */
  DLTensor* params_out; /* 1-D, the group's length, fp32/bf16/fp16 in host memory (pinned, to be copied
                           to a device): receives the updated values; borrowed for the call. NULL: not
                           needed */
  /* 0.4: optimizer_step_range only: the range's first element. A 0.4 caller sets it and passes the same
   * value as optimizer_step_range's `offset` argument (which tiers built against 0.3 read); a 0.4 tier
   * reads this field when ZHOST_HAS_FIELD(args, zhost_tier_step_args, offset), else the argument. */
  int64_t offset;
} zhost_tier_step_args;
#define ZHOST_TIER_STEP_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_tier_step_args, offset)
/* What a caller built for ABI 0.3 writes: everything up to params_out. */
#define ZHOST_TIER_STEP_ARGS_SIZE_0_3 ZHOST_STRUCT_SIZE(zhost_tier_step_args, params_out)
#define ZHOST_TIER_STEP_ARGS_MIN_SIZE ZHOST_STRUCT_SIZE(zhost_tier_step_args, params_out) /* since 0.1 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_tier_step_args, ZHOST_TIER_STEP_ARGS_SIZE);

/* Bytes a tier holds in host memory (and on its storage) for all its groups and buffers. */
/* What a tier holds now. host_bytes: host memory it allocated (buffers, staging, resident states).
 * storage_bytes: a storing tier: what its own storage holds (the NVMe tier: its files, in whole blocks);
 * a computing tier: what it placed in its storing tier (that tier counts the same bytes itself). */
typedef struct zhost_tier_memory {
  size_t struct_size;
  const zhost_ext_header* ext;
  uint64_t host_bytes;
  uint64_t storage_bytes;
} zhost_tier_memory;
#define ZHOST_TIER_MEMORY_SIZE ZHOST_STRUCT_SIZE(zhost_tier_memory, storage_bytes)
#define ZHOST_TIER_MEMORY_MIN_SIZE ZHOST_STRUCT_SIZE(zhost_tier_memory, storage_bytes) /* since 0.1 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_tier_memory, ZHOST_TIER_MEMORY_SIZE);

/* 0.5: a range of one state of a computing tier's optimizer group, read or written for a checkpoint
 * (docs/checkpoints.md). */
typedef struct zhost_tier_state_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  uint64_t key;      /* the optimizer group */
  const char* state; /* "master" or an optimizer state's name ("exp_avg", "exp_avg_sq"); borrowed for the call */
  int64_t offset;    /* first element, in the group */
  DLTensor* data;    /* 1-D, contiguous, fp32, in host memory, numel(data) elements; borrowed for the call */
} zhost_tier_state_args;
#define ZHOST_TIER_STATE_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_tier_state_args, data)
#define ZHOST_TIER_STATE_ARGS_MIN_SIZE ZHOST_STRUCT_SIZE(zhost_tier_state_args, data) /* since 0.5 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_tier_state_args, ZHOST_TIER_STATE_ARGS_SIZE);

/* 0.7: moving a computing tier's optimizer states to another storage while a job runs (hot swap, docs/abi.md
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
#define ZHOST_TIER_STORAGE_MOVE_MIN_SIZE ZHOST_STRUCT_SIZE(zhost_tier_storage_move, bytes) /* since 0.7 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_tier_storage_move, ZHOST_TIER_STORAGE_MOVE_SIZE);

typedef struct zhost_offload_api {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_status* (*store)(zhost_plugin_instance* self, zhost_tier_io_args* args);
  zhost_status* (*load)(zhost_plugin_instance* self, zhost_tier_io_args* args);
  /* Blocks until the event's operation has completed and frees the event; the status is its outcome. */
  zhost_status* (*wait_event)(zhost_plugin_instance* self, zhost_tier_event* event);
  /* Frees buffer `key` (the buffer namespace only); dropping an unknown key is not an error. */
  zhost_status* (*drop)(zhost_plugin_instance* self, uint64_t key);
  zhost_status* (*export_state)(zhost_plugin_instance* self, zhost_state_writer write, void* user);
  zhost_status* (*import_state)(zhost_plugin_instance* self, zhost_state_reader read, void* user);
  /* Computing tiers (NULL where a tier only stores): */
  zhost_status* (*optimizer_setup)(zhost_plugin_instance* self, const zhost_tier_optimizer_setup* setup);
  /* The group's fp32 gradient accumulator (zeros after setup and after each step), as a 1-D view in host
   * memory, valid until the group is dropped. */
  zhost_status* (*optimizer_grad)(zhost_plugin_instance* self, uint64_t key, DLTensor* out);
  /* One optimizer step of the group on accumulator * grad_scale (the caller folds averaging, loss-scale
   * and clipping into grad_scale); zeroes the accumulator. */
  zhost_status* (*optimizer_step)(zhost_plugin_instance* self, const zhost_tier_step_args* args);
  zhost_status* (*memory)(zhost_plugin_instance* self, zhost_tier_memory* out);
  /* 0.3, computing tiers (NULL: whole groups only): optimizer_step on elements [offset, offset +
   * numel(params_out)) of the group alone (0.4: the offset is args->offset, see zhost_tier_step_args); params_out is
   * required and receives that range, and that range of the accumulator is zeroed. A caller steps a group piece by
   * piece so that each piece's copy to the device overlaps with the next piece's step. */
  zhost_status* (*optimizer_step_range)(zhost_plugin_instance* self, const zhost_tier_step_args* args, int64_t offset);
  /* 0.3, optional (NULL: wait_event() before using the data): compute-stream work issued after this call
   * waits for the event's transfer, and the caller is not blocked; the event stays pending and still
   * needs wait_event(). Lets a load into device memory overlap with compute. */
  zhost_status* (*order_compute_after)(zhost_plugin_instance* self, zhost_tier_event* event);
  /* 0.4, optional (NULL: wait_event() only): never blocks. Sets *done = 1 when the event's operation has
   * completed: the event is then completed and freed exactly as by wait_event(), and the status is the
   * operation's outcome. Sets *done = 0 while it is still in flight: nothing is freed and the event stays
   * the caller's, for a later test_event() or wait_event(). A tier that cannot tell without blocking
   * answers 0, so a caller that needs the data ends with wait_event(). A NULL event is done. */
  zhost_status* (*test_event)(zhost_plugin_instance* self, zhost_tier_event* event, int32_t* done);
  /* 0.4, computing tiers (NULL: groups live until destroy()): frees optimizer group `key` (its master,
   * states and accumulator; the accumulator view of optimizer_grad() dies with it). Dropping an unknown
   * group is not an error. */
  zhost_status* (*optimizer_drop)(zhost_plugin_instance* self, uint64_t key);
  /* 0.5, computing tiers (NULL: a job whose optimizer this tier runs cannot save or resume checkpoints):
   * synchronous copies of elements [offset, offset + numel(data)) of group key's state `state` into `data`
   * (read), or from `data` into the group (write: nothing else of the group changes). Called between steps. */
  zhost_status* (*optimizer_read_state)(zhost_plugin_instance* self, const zhost_tier_state_args* args);
  zhost_status* (*optimizer_write_state)(zhost_plugin_instance* self, const zhost_tier_state_args* args);
  /* 0.7, computing tiers with ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE (NULL: its storage cannot be swapped): one
   * phase of moving every optimizer group's master and states to another storage (zhost_tier_storage_move).
   * Called between steps, while no call of this tier is in flight and no event of its storage is pending. */
  zhost_status* (*optimizer_move_storage)(zhost_plugin_instance* self, zhost_tier_storage_move* args);
  /* 0.9, computing tiers (NULL: accumulators stay in host memory), docs/abi.md "Gradients in storage": the
   * caller adds nothing more into elements [offset, offset + numel) of group key's accumulator before the
   * group's next step (or optimizer_grad_zero). A tier that keeps the group's states in a storage tier may move
   * that range's gradients there and give their host memory back; it sets *moved to 1 when it may have, and
   * the optimizer_grad() view is then not to be read over that range until the step, which uses the moved
   * values. *moved = 0: the view still holds them. optimizer_read_state(..., "grad", ...) reads the
   * accumulator wherever its elements are. */
  zhost_status* (*optimizer_grad_done)(zhost_plugin_instance* self, uint64_t key, int64_t offset, int64_t numel,
                                       int32_t* moved);
  /* 0.9, with optimizer_grad_done: zeroes group key's whole accumulator, moved ranges included (a step skipped
   * for overflow); the view reads zeros after it. */
  zhost_status* (*optimizer_grad_zero)(zhost_plugin_instance* self, uint64_t key);
} zhost_offload_api;
#define ZHOST_OFFLOAD_API_SIZE ZHOST_STRUCT_SIZE(zhost_offload_api, optimizer_grad_zero)
/* What a tier built for ABI 0.7 or 0.8 fills: everything up to optimizer_move_storage. */
#define ZHOST_OFFLOAD_API_SIZE_0_8 ZHOST_STRUCT_SIZE(zhost_offload_api, optimizer_move_storage)
/* What a tier built for ABI 0.5 or 0.6 fills: everything up to optimizer_write_state. */
#define ZHOST_OFFLOAD_API_SIZE_0_6 ZHOST_STRUCT_SIZE(zhost_offload_api, optimizer_write_state)
/* What a tier built for ABI 0.4 fills: everything up to optimizer_drop. */
#define ZHOST_OFFLOAD_API_SIZE_0_4 ZHOST_STRUCT_SIZE(zhost_offload_api, optimizer_drop)
/* What a tier built for ABI 0.3 fills: everything up to order_compute_after. */
#define ZHOST_OFFLOAD_API_SIZE_0_3 ZHOST_STRUCT_SIZE(zhost_offload_api, order_compute_after)
/* What a tier built for ABI 0.1 or 0.2 fills: everything up to memory (= ZHOST_OFFLOAD_API_MIN_SIZE). */
#define ZHOST_OFFLOAD_API_SIZE_0_2 ZHOST_STRUCT_SIZE(zhost_offload_api, memory)
#define ZHOST_OFFLOAD_API_MIN_SIZE ZHOST_STRUCT_SIZE(zhost_offload_api, memory) /* since 0.1 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_offload_api, ZHOST_OFFLOAD_API_SIZE);

#ifdef __cplusplus
}
#endif
#endif /* ZHOST_OFFLOAD_H */
