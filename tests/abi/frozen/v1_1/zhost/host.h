/* zhost/host.h: the host-services table, everything a plugin may ask of the zhost host.
 *
 * A plugin never links against the host. It reaches logging, configuration, memory, collectives, the
 * rank-agreement key-value store, clocks/trace spans and the abort flag only through this table, which
 * it receives at negotiation and again in create().
 *
 * Threading contract: every function in this table is thread-safe and may be called from any thread a
 * plugin starts, except where a comment says otherwise. Functions taking a zhost_host_context identify the
 * calling plugin instance (for log attribution, config lookup and accounting).
 *
 * Lifetimes: the table and every context stay valid from create() until the plugin's destroy() returns
 * (the table negotiation hands out lives until the process ends). Every pointer of the ABI, who owns it and
 * until when: Note [Lifetimes] in docs/abi.md.
 */
#ifndef ZHOST_HOST_H
#define ZHOST_HOST_H

#include <dlpack/dlpack.h>

#include "zhost/core.h"
#include "zhost/descriptor.h" /* zhost_config_type */

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque per-instance handle the host passes to plugins; plugins only hand it back. */
typedef struct zhost_host_context zhost_host_context;

typedef enum zhost_log_level {
  ZHOST_LOG_TRACE = 0,
  ZHOST_LOG_DEBUG = 1,
  ZHOST_LOG_INFO = 2,
  ZHOST_LOG_WARN = 3,
  ZHOST_LOG_ERROR = 4
} zhost_log_level;

/* ---- memory ---------------------------------------------------------------------------------------- */
typedef enum zhost_memory_kind {
  ZHOST_MEMORY_HOST = 1,   /* pageable host memory */
  ZHOST_MEMORY_PINNED = 2, /* page-locked host memory (cudaHostAlloc with CUDA; mlock'd pages without) */
  ZHOST_MEMORY_DEVICE = 3  /* accelerator memory; ZHOST_ERR_UNSUPPORTED on a host without one */
} zhost_memory_kind;

/* Long-lived buffers are known to the host by handle: the host accounts for them in telemetry and can
 * register them with CUDA or io_uring as fixed buffers. 0 is never a valid handle. */
typedef uint64_t zhost_buffer_handle;

typedef struct zhost_buffer_alloc_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_memory_kind memory;
  uint64_t size_bytes;
  uint64_t alignment;         /* 0 = default: 64 bytes, 4096 for pinned (suits O_DIRECT) */
  int32_t device_id;          /* DEVICE only */
  const char* label;          /* copied; shown in memory telemetry */
  zhost_buffer_handle handle; /* out */
  void* data;                 /* out: valid until buffer_release(handle) */
} zhost_buffer_alloc_args;
#define ZHOST_BUFFER_ALLOC_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_buffer_alloc_args, data)
#define ZHOST_BUFFER_ALLOC_ARGS_MIN_SIZE ZHOST_BUFFER_ALLOC_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_buffer_alloc_args, ZHOST_BUFFER_ALLOC_ARGS_SIZE);

typedef struct zhost_buffer_release_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_buffer_handle handle; /* from buffer_alloc; releasing 0 is not an error */
} zhost_buffer_release_args;
#define ZHOST_BUFFER_RELEASE_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_buffer_release_args, handle)
#define ZHOST_BUFFER_RELEASE_ARGS_MIN_SIZE ZHOST_BUFFER_RELEASE_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_buffer_release_args, ZHOST_BUFFER_RELEASE_ARGS_SIZE);

/* ---- logging, configuration, key-value store, trace spans, abort ------------------------------------- */
typedef struct zhost_log_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_log_level level;
  const char* message; /* copied */
} zhost_log_args;
#define ZHOST_LOG_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_log_args, message)
#define ZHOST_LOG_ARGS_MIN_SIZE ZHOST_LOG_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_log_args, ZHOST_LOG_ARGS_SIZE);

typedef struct zhost_log_enabled_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_log_level level;
  int32_t enabled; /* out: 1 when a line of `level` would be written */
} zhost_log_enabled_args;
#define ZHOST_LOG_ENABLED_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_log_enabled_args, enabled)
#define ZHOST_LOG_ENABLED_ARGS_MIN_SIZE ZHOST_LOG_ENABLED_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_log_enabled_args, ZHOST_LOG_ENABLED_ARGS_SIZE);

/* One config value, by key and type (zhost/descriptor.h's zhost_config_type): the field of that type is set. */
typedef struct zhost_config_get_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  const char* key; /* a dotted key the plugin declared; borrowed for the call */
  zhost_config_type type;
  int32_t bool_value;       /* out, ZHOST_CONFIG_BOOL */
  int64_t int_value;        /* out, ZHOST_CONFIG_INT */
  double float_value;       /* out, ZHOST_CONFIG_FLOAT */
  const char* string_value; /* out, ZHOST_CONFIG_STRING: owned by the host, valid until destroy() */
} zhost_config_get_args;
#define ZHOST_CONFIG_GET_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_config_get_args, string_value)
#define ZHOST_CONFIG_GET_ARGS_MIN_SIZE ZHOST_CONFIG_GET_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_config_get_args, ZHOST_CONFIG_GET_ARGS_SIZE);

typedef struct zhost_kv_set_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  const char* key;   /* the plugin's own namespace (see kv_set); copied */
  const void* value; /* len bytes, copied */
  size_t len;
} zhost_kv_set_args;
#define ZHOST_KV_SET_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_kv_set_args, len)
#define ZHOST_KV_SET_ARGS_MIN_SIZE ZHOST_KV_SET_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_kv_set_args, ZHOST_KV_SET_ARGS_SIZE);

typedef struct zhost_kv_get_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  const char* key; /* borrowed for the call */
  void* out;       /* capacity bytes, the caller's */
  size_t capacity;
  size_t len;         /* out: the value's full length, also when it exceeds capacity */
  int64_t timeout_ms; /* how long to wait for the key to appear; negative: the job's collective timeout */
} zhost_kv_get_args;
#define ZHOST_KV_GET_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_kv_get_args, timeout_ms)
#define ZHOST_KV_GET_ARGS_MIN_SIZE ZHOST_KV_GET_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_kv_get_args, ZHOST_KV_GET_ARGS_SIZE);

typedef struct zhost_trace_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  const char* name; /* trace_begin: the span's name, copied */
  uint64_t span;    /* trace_begin: out, the span's id; trace_end: in */
} zhost_trace_args;
#define ZHOST_TRACE_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_trace_args, span)
#define ZHOST_TRACE_ARGS_MIN_SIZE ZHOST_TRACE_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_trace_args, ZHOST_TRACE_ARGS_SIZE);

typedef struct zhost_abort_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  const char* reason; /* copied; shown in the job's final error line */
} zhost_abort_args;
#define ZHOST_ABORT_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_abort_args, reason)
#define ZHOST_ABORT_ARGS_MIN_SIZE ZHOST_ABORT_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_abort_args, ZHOST_ABORT_ARGS_SIZE);

/* ---- collectives (served once the engine has a process group) -------------------------------------- */
typedef struct zhost_group zhost_group; /* opaque; NULL means the whole data-parallel world */
typedef struct zhost_work zhost_work;   /* an in-flight asynchronous collective */

typedef enum zhost_reduce_op {
  ZHOST_REDUCE_SUM = 0,
  ZHOST_REDUCE_AVG = 1,
  ZHOST_REDUCE_MAX = 2,
  ZHOST_REDUCE_MIN = 3
} zhost_reduce_op;

/* Why a collective happens: a collective-transform plugin (quantization, hierarchical routes) decides
 * from the intent whether to interpose. */
typedef enum zhost_collective_intent {
  ZHOST_INTENT_GENERIC = 0,
  ZHOST_INTENT_PARAM_GATHER = 1,  /* gathering parameter shards for a block's forward or backward */
  ZHOST_INTENT_GRAD_REDUCE = 2,   /* reducing gradients */
  ZHOST_INTENT_PARAM_SYNC = 3,    /* all-gather of updated partitions after the step (stage 1/2) */
  ZHOST_INTENT_PARAM_READ = 4,    /* gathering parameters to save, export or hand out: the values must
                                     arrive exactly, so a transform never changes them */
  ZHOST_INTENT_PARAM_REGATHER = 5 /* gathering `block`'s parameters again within the micro-batch that
                                    gathered them (PARAM_GATHER), unchanged since and with the same sizes:
                                    e.g. backward's gather (hpZ serves it from a copy within the node) */
} zhost_collective_intent;

#define ZHOST_COLLECTIVE_ASYNC (1u << 0) /* return at once with `work` set; complete it with wait() */

/* One args struct serves every collective; fields a collective does not use are ignored.
 * send/recv (descriptors and memory) and send_counts/recv_counts are borrowed until the collective
 * completes: the call's return, or wait() with ZHOST_COLLECTIVE_ASYNC. Views are flat and contiguous. For all-gather,
 * recv holds world_size * numel(send) elements; for reduce-scatter, send holds world_size * numel(recv);
 * all_reduce and broadcast work in place on `recv` (send may be NULL). */
typedef struct zhost_collective_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_group* group;
  const DLTensor* send;
  DLTensor* recv;
  const int64_t* send_counts; /* all_to_all: per-rank element counts, or NULL for equal splits */
  const int64_t* recv_counts;
  zhost_reduce_op op;
  int32_t root; /* broadcast */
  zhost_collective_intent intent;
  int32_t block;    /* the model block the intent refers to, or -1 */
  uint32_t flags;   /* ZHOST_COLLECTIVE_* */
  zhost_work* work; /* out with ZHOST_COLLECTIVE_ASYNC */
} zhost_collective_args;
#define ZHOST_COLLECTIVE_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_collective_args, work)
#define ZHOST_COLLECTIVE_ARGS_MIN_SIZE ZHOST_COLLECTIVE_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_collective_args, ZHOST_COLLECTIVE_ARGS_SIZE);

/* Extension type 2 (docs/abi.md 8), optional on zhost_collective_args.ext: the collective's flat buffer is
 * several tensors laid end to end (stage 3: the parameters of a unit), so that a collective transform can
 * keep each quantization block within one of them (DeepSpeed quantizes every parameter apart). starts[i] is
 * where tensor i begins, in elements of the whole buffer: recv of an all-gather, send of a reduce-scatter
 * (every rank's part together); starts[0] = 0, strictly increasing, each below the whole buffer's element
 * count; the last tensor runs to the end (padding included). Borrowed like send and recv. Readers that do not
 * know it (the host's own collectives, transforms before it) ignore it. */
#define ZHOST_EXT_SEGMENTS 2u
typedef struct zhost_segments_ext {
  zhost_ext_header header; /* type ZHOST_EXT_SEGMENTS, struct_size sizeof(zhost_segments_ext) */
  const int64_t* starts;   /* count entries */
  size_t count;
} zhost_segments_ext;

/* The nodes of the job as its launcher placed the ranks (zhost run --nnodes, torchrun, Slurm, Open MPI;
 * never inferred from device counts). Nodes are numbered 0..num_nodes-1 in the order of their smallest rank.
 * For hierarchical collectives: the ranks of one node talk over the fast local link. */
typedef struct zhost_topology {
  size_t struct_size;
  const zhost_ext_header* ext;
  int32_t num_nodes;           /* out */
  int32_t node;                /* out: this rank's node */
  const int32_t* node_of_rank; /* out: world_size entries, the node of each job-wide rank; owned by the host,
                                  valid until the job ends */
} zhost_topology;
#define ZHOST_TOPOLOGY_SIZE ZHOST_STRUCT_SIZE(zhost_topology, node_of_rank)
#define ZHOST_TOPOLOGY_MIN_SIZE ZHOST_TOPOLOGY_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_topology, ZHOST_TOPOLOGY_SIZE);

typedef struct zhost_group_info_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_group* group; /* NULL: the whole data-parallel world */
  int32_t rank;       /* out: this rank's index in the group */
  int32_t size;       /* out: the group's ranks */
} zhost_group_info_args;
#define ZHOST_GROUP_INFO_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_group_info_args, size)
#define ZHOST_GROUP_INFO_ARGS_MIN_SIZE ZHOST_GROUP_INFO_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_group_info_args, ZHOST_GROUP_INFO_ARGS_SIZE);

typedef struct zhost_barrier_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_group* group; /* NULL: the whole data-parallel world */
} zhost_barrier_args;
#define ZHOST_BARRIER_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_barrier_args, group)
#define ZHOST_BARRIER_ARGS_MIN_SIZE ZHOST_BARRIER_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_barrier_args, ZHOST_BARRIER_ARGS_SIZE);

typedef struct zhost_work_wait_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_work* work; /* from a ZHOST_COLLECTIVE_ASYNC collective; NULL returns at once */
} zhost_work_wait_args;
#define ZHOST_WORK_WAIT_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_work_wait_args, work)
#define ZHOST_WORK_WAIT_ARGS_MIN_SIZE ZHOST_WORK_WAIT_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_work_wait_args, ZHOST_WORK_WAIT_ARGS_SIZE);

typedef struct zhost_new_group_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  const int32_t* ranks; /* num_ranks job-wide ranks, borrowed for the call */
  size_t num_ranks;
  zhost_group* group; /* out; lives until the job ends */
} zhost_new_group_args;
#define ZHOST_NEW_GROUP_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_new_group_args, group)
#define ZHOST_NEW_GROUP_ARGS_MIN_SIZE ZHOST_NEW_GROUP_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_new_group_args, ZHOST_NEW_GROUP_ARGS_SIZE);

typedef struct zhost_collectives {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_status* (*group_info)(zhost_host_context* ctx, zhost_group_info_args* args);
  zhost_status* (*all_reduce)(zhost_host_context* ctx, zhost_collective_args* args);
  zhost_status* (*reduce_scatter)(zhost_host_context* ctx, zhost_collective_args* args);
  zhost_status* (*all_gather)(zhost_host_context* ctx, zhost_collective_args* args);
  zhost_status* (*broadcast)(zhost_host_context* ctx, zhost_collective_args* args);
  zhost_status* (*all_to_all)(zhost_host_context* ctx, zhost_collective_args* args);
  zhost_status* (*barrier)(zhost_host_context* ctx, zhost_barrier_args* args);
  /* Completes and frees args->work; a timeout or a dead peer comes back as ZHOST_ERR_TIMEOUT/COMM naming
   * the collective and the ranks that did not arrive. */
  zhost_status* (*wait)(zhost_host_context* ctx, zhost_work_wait_args* args);
  /* Sub-groups (e.g. the ranks of one node for hierarchical partitioning). Every member must call it
   * with the same ranks in the same order. */
  zhost_status* (*new_group)(zhost_host_context* ctx, zhost_new_group_args* args);
  /* Where the job's ranks run. */
  zhost_status* (*topology)(zhost_host_context* ctx, struct zhost_topology* out);
} zhost_collectives;
#define ZHOST_COLLECTIVES_SIZE ZHOST_STRUCT_SIZE(zhost_collectives, topology)
#define ZHOST_COLLECTIVES_MIN_SIZE ZHOST_COLLECTIVES_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_collectives, ZHOST_COLLECTIVES_SIZE);

/* ---- offload tiers chosen by the config (docs/abi.md "Tier roles") ----------------------------------- */
typedef enum zhost_tier_role {
  /* the computing tier that runs the optimizer (zero.offload_optimizer.device); asked by partition plugins */
  ZHOST_TIER_FOR_OPTIMIZER = 1,
  /* the tier storing parameter shards (zero.offload_param.device); asked by partition plugins */
  ZHOST_TIER_FOR_PARAMS = 2,
  /* the storage tier holding the optimizer's master weights and states between steps
   * (zero.offload_optimizer.storage, or device = "nvme"); asked by the computing tier */
  ZHOST_TIER_FOR_OPTIMIZER_STORAGE = 3
} zhost_tier_role;

struct zhost_storage_api;
struct zhost_optimizer_tier_api;
/* tier_for's args: the role in, the tier out. */
typedef struct zhost_tier_ref {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_tier_role role;                             /* in (tier_for) */
  struct zhost_plugin_instance* instance;           /* out: NULL when the config names no tier for the role */
  const struct zhost_storage_api* storage;          /* out: the tier's storage table (zhost/storage.h); NULL when it
                                                       does not store */
  const struct zhost_optimizer_tier_api* optimizer; /* out: its optimizer table (zhost/optimizer.h); NULL when
                                                       it does not compute */
  const char* name;                                 /* out: the tier plugin's name; valid for the job */
} zhost_tier_ref;
#define ZHOST_TIER_REF_SIZE ZHOST_STRUCT_SIZE(zhost_tier_ref, name)
#define ZHOST_TIER_REF_MIN_SIZE ZHOST_TIER_REF_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_tier_ref, ZHOST_TIER_REF_SIZE);

/* ---- parameter storage, for a plugin that partitions parameters (ZHOST_PLUGIN_FLAG_PARTITIONS_PARAMETERS) ----
 * The host owns the parameters (autograd needs them); the plugin decides when they have storage. It binds
 * the parameters of a fetch unit (e.g. one block's) to one flat storage, then materialises it (the host
 * allocates it; the plugin all-gathers into it) before the unit's parameters are read, and releases it
 * (the host frees it) after. Tensors autograd saved for backward that view a parameter share its storage,
 * so they see the storage come and go with it: the plugin materialises again before backward reads them.
 * Served only to the partition instance, on the thread that runs the partition hooks. */
typedef struct zhost_param_group zhost_param_group; /* opaque: parameters sharing one flat storage */

/* Makes parameters ids[0..count) views of one flat storage of `numel` elements (compute dtype, training device):
 * parameter ids[i] at element offsets[i], contiguous in its shape. A parameter joins at most one group. The
 * storage starts released. The group lives until the job ends. */
typedef struct zhost_param_group_create_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  const uint32_t* ids;    /* count entries, borrowed for the call */
  const int64_t* offsets; /* count entries, borrowed for the call */
  size_t count;
  int64_t numel;
  zhost_param_group* group; /* out */
} zhost_param_group_create_args;
#define ZHOST_PARAM_GROUP_CREATE_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_param_group_create_args, group)
#define ZHOST_PARAM_GROUP_CREATE_ARGS_MIN_SIZE ZHOST_PARAM_GROUP_CREATE_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_param_group_create_args, ZHOST_PARAM_GROUP_CREATE_ARGS_SIZE);

/* materialize and release. */
typedef struct zhost_param_group_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_param_group* group;
  DLTensor flat; /* materialize: out, all `numel` elements of the group's storage, valid until release() */
} zhost_param_group_args;
#define ZHOST_PARAM_GROUP_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_param_group_args, flat)
#define ZHOST_PARAM_GROUP_ARGS_MIN_SIZE ZHOST_PARAM_GROUP_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_param_group_args, ZHOST_PARAM_GROUP_ARGS_SIZE);

typedef struct zhost_initial_values_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  uint32_t id;    /* the parameter */
  int64_t offset; /* first element, in the flattened parameter */
  DLTensor* dst;  /* contiguous, any dtype, host or device; borrowed for the call */
} zhost_initial_values_args;
#define ZHOST_INITIAL_VALUES_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_initial_values_args, dst)
#define ZHOST_INITIAL_VALUES_ARGS_MIN_SIZE ZHOST_INITIAL_VALUES_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_initial_values_args, ZHOST_INITIAL_VALUES_ARGS_SIZE);

typedef struct zhost_param_services {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_status* (*group_create)(zhost_host_context* ctx, zhost_param_group_create_args* args);
  /* Allocates the group's storage (contents undefined) and describes it in args->flat, for the plugin to fill.
   * Materialising a materialised group only describes it. */
  zhost_status* (*materialize)(zhost_host_context* ctx, zhost_param_group_args* args);
  /* Frees the storage; the parameters keep their shapes but have no data until the next materialize(). */
  zhost_status* (*release)(zhost_host_context* ctx, zhost_param_group_args* args);
  /* Fills args->dst with elements [offset, offset + numel(dst)) of parameter id's flattened initial value, zero
   * past its end: identical to what the unpartitioned model would hold, computed without building the whole
   * parameter. */
  zhost_status* (*initial_values)(zhost_host_context* ctx, zhost_initial_values_args* args);
} zhost_param_services;
#define ZHOST_PARAM_SERVICES_SIZE ZHOST_STRUCT_SIZE(zhost_param_services, initial_values)
#define ZHOST_PARAM_SERVICES_MIN_SIZE ZHOST_PARAM_SERVICES_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_param_services, ZHOST_PARAM_SERVICES_SIZE);

/* ---- copies between host memory and the training device ----------------------------------------
 * How offload tiers and partition plugins move data between host memory and the training device's own
 * memory (CUDA) without holding up the compute stream. A copy runs on a copy stream of the host's; from or
 * to pinned host memory it overlaps with compute, from pageable memory it is correct but slower. Without
 * separate device memory (training in host memory) copies complete inside start().
 *
 * Rules for a copy's tensors: contiguous, the same dtype and element count, each in host memory or in the
 * training device's memory; both are borrowed until the copy has completed. */
typedef struct zhost_copy zhost_copy; /* an in-flight copy */

typedef struct zhost_copy_start_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  const DLTensor* src; /* borrowed until the copy has completed */
  DLTensor* dst;       /* borrowed until the copy has completed */
  zhost_copy* copy;    /* out: to be completed exactly once by wait(), or NULL when it has completed already */
} zhost_copy_start_args;
#define ZHOST_COPY_START_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_copy_start_args, copy)
#define ZHOST_COPY_START_ARGS_MIN_SIZE ZHOST_COPY_START_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_copy_start_args, ZHOST_COPY_START_ARGS_SIZE);

/* order_compute_after and wait. */
typedef struct zhost_copy_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_copy* copy; /* a pending copy from start() */
} zhost_copy_args;
#define ZHOST_COPY_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_copy_args, copy)
#define ZHOST_COPY_ARGS_MIN_SIZE ZHOST_COPY_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_copy_args, ZHOST_COPY_ARGS_SIZE);

typedef struct zhost_copy_services {
  size_t struct_size;
  const zhost_ext_header* ext;
  /* 1 when the training device has memory of its own, so that host memory must be copied to and from
   * it (and a plugin should stage through pinned host memory); 0 when training runs in host memory. */
  int32_t (*device_memory_is_separate)(zhost_host_context* ctx);
  /* Starts copying src into dst, ordered after all work issued so far on the training device's compute
   * stream (a gradient just computed may be copied at once). */
  zhost_status* (*start)(zhost_host_context* ctx, zhost_copy_start_args* args);
  /* Makes compute-stream work issued after this call wait for the copy, without blocking the caller
   * (e.g. before the copy's device source is overwritten, or before its device destination is read).
   * The copy stays pending: it still needs wait(). */
  zhost_status* (*order_compute_after)(zhost_host_context* ctx, zhost_copy_args* args);
  /* Blocks the calling thread until the copy has completed (its host destination may be read, its
   * source reused), and frees it. */
  zhost_status* (*wait)(zhost_host_context* ctx, zhost_copy_args* args);
} zhost_copy_services;
#define ZHOST_COPY_SERVICES_SIZE ZHOST_STRUCT_SIZE(zhost_copy_services, wait)
#define ZHOST_COPY_SERVICES_MIN_SIZE ZHOST_COPY_SERVICES_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_copy_services, ZHOST_COPY_SERVICES_SIZE);

/* ---- the table ------------------------------------------------------------------------------------- */
typedef struct zhost_host_services {
  size_t struct_size;
  const zhost_ext_header* ext;
  uint32_t abi_major;
  uint32_t abi_minor;
  const char* host_version; /* zhost's release, e.g. "0.1.0" */

  /* statuses: create copies `message`; message() is valid until destroy() */
  zhost_status* (*status_create)(zhost_status_code code, const char* message);
  zhost_status_code (*status_code)(const zhost_status* status);
  const char* (*status_message)(const zhost_status* status);
  void (*status_destroy)(zhost_status* status);

  /* logging into the host's logger; lines carry the plugin's name and, once ranks exist, the rank */
  void (*log)(zhost_host_context* ctx, const zhost_log_args* args);
  void (*log_enabled)(zhost_host_context* ctx, zhost_log_enabled_args* args);

  /* configuration: any key the plugin declared, validated and with defaults applied. Asking for
   * an undeclared key or the wrong type is ZHOST_ERR_CONFIG. */
  zhost_status* (*config_get)(zhost_host_context* ctx, zhost_config_get_args* args);

  /* memory: buffers owned by the host, released by handle (all of an instance's buffers are released
   * after its destroy() at the latest) */
  zhost_status* (*buffer_alloc)(zhost_host_context* ctx, zhost_buffer_alloc_args* args);
  zhost_status* (*buffer_release)(zhost_host_context* ctx, zhost_buffer_release_args* args);

  /* key-value store shared by all ranks of the job, for rank agreement. Each plugin's keys are its own:
   * the host files them under the plugin's name, so two plugins (or a plugin and the host) never
   * collide, and instances of one plugin on every rank share them. A key set again is overwritten: a key
   * reused across steps carries the step in its name. kv_get waits up to timeout_ms for the key to appear;
   * when the value exceeds `capacity` nothing is copied and ZHOST_ERR_INVALID_ARGUMENT is returned. */
  zhost_status* (*kv_set)(zhost_host_context* ctx, zhost_kv_set_args* args);
  zhost_status* (*kv_get)(zhost_host_context* ctx, zhost_kv_get_args* args);

  /* clocks and trace spans (shown in the wall-clock breakdown and trace output) */
  uint64_t (*clock_ns)(void); /* monotonic */
  void (*trace_begin)(zhost_host_context* ctx, zhost_trace_args* args);
  void (*trace_end)(zhost_host_context* ctx, zhost_trace_args* args);

  /* abort flag: long-running plugin work polls abort_requested() (1: stop) and returns ZHOST_ERR_ABORTED;
   * request_abort() stops the whole job with args->reason in the final error line */
  int32_t (*abort_requested)(zhost_host_context* ctx);
  void (*request_abort)(zhost_host_context* ctx, const zhost_abort_args* args);

  /* collectives on the job's process group; NULL while no process group exists (e.g. `zhost plugins`) */
  const zhost_collectives* collectives;

  /* the offload tier serving args->role in this job, for a partition plugin (or, for
   * ZHOST_TIER_FOR_OPTIMIZER_STORAGE, the computing tier) to call directly; the tier's calls then run on
   * the caller's thread. Answered from the first capability-table call after every instance was created
   * (not inside create()); the instance and its tables stay valid until the caller's destroy() returns, since tiers
   * are created before the plugins that use them and destroyed after them (docs/abi.md "Tier lifetimes").
   * instance NULL: the config names no tier for the role. */
  zhost_status* (*tier_for)(zhost_host_context* ctx, zhost_tier_ref* args);

  /* parameter storage for a partition plugin with ZHOST_PLUGIN_FLAG_PARTITIONS_PARAMETERS; NULL otherwise
   * (and outside a training job) */
  const zhost_param_services* params;

  /* copies between host memory and the training device; NULL outside a training job */
  const zhost_copy_services* copies;
} zhost_host_services;
#define ZHOST_HOST_SERVICES_SIZE ZHOST_STRUCT_SIZE(zhost_host_services, copies)
#define ZHOST_HOST_SERVICES_MIN_SIZE ZHOST_HOST_SERVICES_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_host_services, ZHOST_HOST_SERVICES_SIZE);

#ifdef __cplusplus
}
#endif
#endif /* ZHOST_HOST_H */
