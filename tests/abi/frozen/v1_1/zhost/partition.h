/* zhost/partition.h: the capability table of a partition plugin (ZeRO stages 1, 2, 3), and the contract
 * the host's own data-parallel engine (stage 0) implements too.
 *
 * The host owns the model, its parameters and autograd. At start it hands the plugin the parameter
 * registry once (identical ids and order on every rank, which the host checks across ranks), with which
 * parameters each block reads, the optimizer and the precision. The plugin decides where each
 * parameter's states live and when collectives move them. The host calls the hooks in the order of one
 * step:
 *
 *   begin_micro_batch(m)                  before each micro-batch's forward
 *   for each block b:  pre_forward(b)  ... block forward ...  post_forward(b)
 *   backward:          pre_backward(b)    when the gradient of b's output arrives
 *                      grad_ready(p)      when parameter p's gradient has been accumulated (its .grad)
 *                      post_backward(b)   when every parameter b reads has its gradient
 *   backward_end()     after the whole backward of one micro-batch
 *   step(args)         at the gradient-accumulation boundary
 *
 * Gradients: the loss the host differentiates is (mean loss of the rank's micro-batch) * loss_scale /
 * gradient_accumulation_steps, so the plugin averages over the data-parallel world itself (divides the
 * sum by world size exactly once). In step() it unscales, computes the global norm, clips, detects
 * overflow (skipping the step on every rank alike), steps the optimizer on the states it owns, and writes
 * the updated values back into the parameters' storage. After step() the host drops the parameters'
 * gradients.
 *
 * Hooks with nothing to do must return quickly (well under a microsecond): the host calls them for every
 * block of every micro-batch. Hooks of one instance never run concurrently, but the backward hooks
 * (pre_backward, grad_ready, post_backward) may arrive on autograd's worker thread rather than the thread
 * that called forward (with CUDA, LibTorch runs backward on a per-device thread).
 */
#ifndef ZHOST_PARTITION_H
#define ZHOST_PARTITION_H

#include <dlpack/dlpack.h>

#include "zhost/core.h"
#include "zhost/optimizer.h"
#include "zhost/plugin.h"
#include "zhost/storage.h" /* zhost_tier_storage_move */

#ifdef __cplusplus
extern "C" {
#endif

/* An element of zhost_partition_setup.params: it never grows (docs/abi.md, "Versioning rule"). */
typedef struct zhost_param_info {
  size_t struct_size;
  const zhost_ext_header* ext;
  uint32_t id;      /* dense, 0..num_params-1, in registration order */
  const char* name; /* e.g. "blocks.3.attn.qkv.weight"; valid until destroy() */
  int32_t block;    /* owning block in model order */
  DLTensor tensor;  /* the parameter's full storage (dtype = compute dtype). The descriptor (shape,
                     * strides) is borrowed for setup(); the memory `data` points to stays valid until
                     * destroy(): the host never moves a parameter's storage during a job. data is NULL
                     * under ZHOST_PLUGIN_FLAG_PARTITIONS_PARAMETERS (no storage yet; see `params`) */
} zhost_param_info;
#define ZHOST_PARAM_INFO_SIZE ZHOST_STRUCT_SIZE(zhost_param_info, tensor)
#define ZHOST_PARAM_INFO_MIN_SIZE ZHOST_PARAM_INFO_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_param_info, ZHOST_PARAM_INFO_SIZE);

typedef struct zhost_partition_setup {
  size_t struct_size;
  const zhost_ext_header* ext;
  const zhost_param_info* params; /* num_params entries, borrowed for the call */
  size_t num_params;
  int32_t num_blocks;
  /* Parameters read by each block, in CSR form: block b reads
   * block_param_ids[block_param_offsets[b] .. block_param_offsets[b+1]). Tied weights appear in every
   * block that reads them. Borrowed for the call. */
  const uint32_t* block_param_ids;
  const size_t* block_param_offsets; /* num_blocks + 1 entries */
  zhost_optimizer_desc optimizer;
  DLDataType master_dtype; /* fp32: the dtype of master weights and optimizer states */
  int32_t gradient_accumulation_steps;
} zhost_partition_setup;
#define ZHOST_PARTITION_SETUP_SIZE ZHOST_STRUCT_SIZE(zhost_partition_setup, gradient_accumulation_steps)
#define ZHOST_PARTITION_SETUP_MIN_SIZE ZHOST_PARTITION_SETUP_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_partition_setup, ZHOST_PARTITION_SETUP_SIZE);

typedef struct zhost_micro_batch_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  int64_t step;        /* the optimizer step this micro-batch contributes to, from 1 */
  int32_t micro_step;  /* 0 .. gradient_accumulation_steps-1 */
  int32_t is_boundary; /* 1 on the last micro-batch before step() */
} zhost_micro_batch_args;
#define ZHOST_MICRO_BATCH_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_micro_batch_args, is_boundary)
#define ZHOST_MICRO_BATCH_ARGS_MIN_SIZE ZHOST_MICRO_BATCH_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_micro_batch_args, ZHOST_MICRO_BATCH_ARGS_SIZE);

typedef struct zhost_step_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  int64_t step;          /* optimizer steps applied so far + 1 (the step being attempted) */
  int64_t applied_steps; /* optimizer steps applied so far (bias correction uses applied_steps + 1) */
  double lr;             /* learning rate for this step */
  double loss_scale;     /* gradients carry this factor: fp16's loss scale / gradient pre-division (docs/config.md,
                            Note [Gradient pre-division]); 1 without either */
  double clip_norm;      /* global-norm clipping threshold, 0 = off */
  double grad_norm;      /* out: global gradient norm before clipping (unscaled); inf/nan on overflow */
  int32_t overflow;      /* out: 1 when a gradient was inf/nan on any rank; the step was not taken */
  double beta1;          /* since 1.1: this step's betas (Adam kinds, Lion, Lamb): the optimizer's, or a momentum */
  double beta2;          /* schedule's (DeepSpeed's OneCycle cycle_momentum); the host always fills them */
} zhost_step_args;
#define ZHOST_STEP_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_step_args, beta2)
#define ZHOST_STEP_ARGS_MIN_SIZE ZHOST_STRUCT_SIZE(zhost_step_args, overflow) /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_step_args, ZHOST_STEP_ARGS_SIZE);

/* Extension type 1 (docs/abi.md 8), on the step args of the job's last step: after this step() returns the
 * host reads the parameters (final weights) and ends the job, so a plugin that defers work past step() (a
 * delayed parameter update) completes it before returning. The extension is the bare header. */
#define ZHOST_EXT_LAST_STEP 1u

/* Extension type 3 (docs/abi.md 8), on the step args of a step after which the host moves a
 * tier's states (a storage swap, Note [Storage swap]): a plugin that defers work past step() completes it before
 * returning, so that no call into a tier is in flight when step() returns. Unlike type 1 the job goes on. The
 * extension is the bare header; a plugin that defers nothing ignores it. */
#define ZHOST_EXT_DRAIN 3u

/* Bytes of model state one rank holds, by kind, as ZeRO's memory analysis counts them. A plugin reports
 * what it allocated; the host adds what it holds itself (the parameters it owns, and full-size gradients
 * when the plugin does not take them) and compares the total with ZeRO's formula for the stage. */
typedef struct zhost_model_state_bytes {
  size_t struct_size;
  const zhost_ext_header* ext;
  uint64_t params;    /* parameter storage the plugin holds (stage 3 shards); not the host's parameters */
  uint64_t grads;     /* gradient storage held between micro-batches (e.g. a stage 2 gradient partition) */
  uint64_t master;    /* fp32 master weights */
  uint64_t optimizer; /* optimizer states (Adam: exp_avg, exp_avg_sq) */
  uint64_t buffers;   /* communication buckets and staging, not model state: reported apart */
  uint64_t offloaded; /* model states the plugin placed in an offload tier (host memory, NVMe) */
} zhost_model_state_bytes;
#define ZHOST_MODEL_STATE_BYTES_SIZE ZHOST_STRUCT_SIZE(zhost_model_state_bytes, offloaded)
#define ZHOST_MODEL_STATE_BYTES_MIN_SIZE ZHOST_MODEL_STATE_BYTES_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_model_state_bytes, ZHOST_MODEL_STATE_BYTES_SIZE);

/* ---- model state out and in, for checkpoints (docs/checkpoints.md, "The format") ----------------------
 * A partition plugin's model state is, for each parameter, its fp32 master ("master") and its optimizer states
 * under the names of zhost/optimizer.h's kinds ("exp_avg", "exp_avg_sq", "momentum_buffer"), each an fp32
 * tensor of the parameter's shape, of which each rank holds some element ranges. The plugin describes what
 * it holds as fragments: elements [offset, offset + numel(data)) of the flattened parameter's state `state`. */
typedef struct zhost_state_fragment {
  size_t struct_size;
  const zhost_ext_header* ext;
  uint32_t param_id;
  const char* state; /* "master" or an optimizer state's name; borrowed for the call */
  int64_t offset;    /* first element, in the flattened parameter */
  DLTensor* data;    /* 1-D, contiguous, fp32, in host memory or on the training device; borrowed for the call.
                      * save_state: the values (the host copies them before put returns); load_state: the
                      * destination get fills */
} zhost_state_fragment;
#define ZHOST_STATE_FRAGMENT_SIZE ZHOST_STRUCT_SIZE(zhost_state_fragment, data)
#define ZHOST_STATE_FRAGMENT_MIN_SIZE ZHOST_STATE_FRAGMENT_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_state_fragment, ZHOST_STATE_FRAGMENT_SIZE);

/* The host's side of save_state and load_state; the table and `user` are borrowed for the call. */
typedef struct zhost_state_io {
  size_t struct_size;
  const zhost_ext_header* ext;
  void* user; /* pass back unchanged */
  /* save_state: one fragment of state this rank saves. Across the ranks every element of every state is put
   * exactly once: a plugin whose ranks hold copies (data parallelism) puts only a share of them. */
  zhost_status* (*put)(void* user, const zhost_state_fragment* fragment);
  /* load_state: fills fragment->data from the checkpoint, whatever world size, stage or plugin saved it;
   * fails (a status naming the parameter and the state) when the checkpoint lacks an element. */
  zhost_status* (*get)(void* user, zhost_state_fragment* fragment);
} zhost_state_io;
#define ZHOST_STATE_IO_SIZE ZHOST_STRUCT_SIZE(zhost_state_io, get)
#define ZHOST_STATE_IO_MIN_SIZE ZHOST_STATE_IO_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_state_io, ZHOST_STATE_IO_SIZE);

/* pre_forward, post_forward, pre_backward, post_backward. */
typedef struct zhost_block_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  int32_t block; /* in model order */
} zhost_block_args;
#define ZHOST_BLOCK_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_block_args, block)
#define ZHOST_BLOCK_ARGS_MIN_SIZE ZHOST_BLOCK_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_block_args, ZHOST_BLOCK_ARGS_SIZE);

typedef struct zhost_grad_ready_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  uint32_t param_id;
  /* the parameter's accumulated gradient (compute dtype, parameter's shape), borrowed for the call. With
   * ZHOST_PLUGIN_FLAG_TAKES_GRADIENTS the host frees it after the call: the plugin copies what it keeps;
   * gradients then do not accumulate across micro-batches in the host, the plugin does that. */
  const DLTensor* grad;
} zhost_grad_ready_args;
#define ZHOST_GRAD_READY_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_grad_ready_args, grad)
#define ZHOST_GRAD_READY_ARGS_MIN_SIZE ZHOST_GRAD_READY_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_grad_ready_args, ZHOST_GRAD_READY_ARGS_SIZE);

typedef struct zhost_backward_end_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  int32_t micro_step; /* the micro-batch whose backward ended, as in begin_micro_batch */
} zhost_backward_end_args;
#define ZHOST_BACKWARD_END_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_backward_end_args, micro_step)
#define ZHOST_BACKWARD_END_ARGS_MIN_SIZE ZHOST_BACKWARD_END_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_backward_end_args, ZHOST_BACKWARD_END_ARGS_SIZE);

typedef struct zhost_gather_param_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  uint32_t param_id;
  DLTensor* out; /* the parameter's shape, contiguous, any dtype; host memory; borrowed for the call */
} zhost_gather_param_args;
#define ZHOST_GATHER_PARAM_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_gather_param_args, out)
#define ZHOST_GATHER_PARAM_ARGS_MIN_SIZE ZHOST_GATHER_PARAM_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_gather_param_args, ZHOST_GATHER_PARAM_ARGS_SIZE);

typedef struct zhost_partition_api {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_status* (*setup)(zhost_plugin_instance* self, const zhost_partition_setup* args);
  zhost_status* (*begin_micro_batch)(zhost_plugin_instance* self, const zhost_micro_batch_args* args);
  zhost_status* (*pre_forward)(zhost_plugin_instance* self, const zhost_block_args* args);
  zhost_status* (*post_forward)(zhost_plugin_instance* self, const zhost_block_args* args);
  zhost_status* (*pre_backward)(zhost_plugin_instance* self, const zhost_block_args* args);
  zhost_status* (*grad_ready)(zhost_plugin_instance* self, const zhost_grad_ready_args* args);
  zhost_status* (*post_backward)(zhost_plugin_instance* self, const zhost_block_args* args);
  zhost_status* (*backward_end)(zhost_plugin_instance* self, const zhost_backward_end_args* args);
  zhost_status* (*step)(zhost_plugin_instance* self, zhost_step_args* args);
  /* Optional (may be NULL): fills `out` (its struct_size set by the host) with the bytes this rank's
   * instance holds; called after setup(), with states allocated. */
  zhost_status* (*memory)(zhost_plugin_instance* self, zhost_model_state_bytes* out);
  /* Required with ZHOST_PLUGIN_FLAG_PARTITIONS_PARAMETERS (NULL otherwise): writes the current full value of
   * parameter args->param_id into args->out, e.g. to save the model. Collective: every rank calls it with the
   * same ids in the same order, outside a micro-batch. */
  zhost_status* (*gather_param)(zhost_plugin_instance* self, const zhost_gather_param_args* args);
  /* Optional (NULL, or ZHOST_ERR_UNSUPPORTED: the job cannot save checkpoints): io->put for every fragment of
   * master and optimizer state this rank saves. Called on every rank at a step boundary, outside a micro-batch;
   * the plugin's state does not change. */
  zhost_status* (*save_state)(zhost_plugin_instance* self, const zhost_state_io* io);
  /* Optional (NULL: the job cannot resume): io->get for every fragment of state this rank holds, then the
   * parameters' values made consistent with the loaded masters (16-bit copies, shards, all-gathers), as after a
   * step. Collective: every rank calls it once, after setup() and before the first micro-batch. */
  zhost_status* (*load_state)(zhost_plugin_instance* self, const zhost_state_io* io);
  /* Optional (NULL, or ZHOST_ERR_UNSUPPORTED: the job cannot swap its parameter storage): one phase of moving
   * every parameter shard the plugin keeps in its params tier (ZHOST_TIER_FOR_PARAMS) into another storing tier,
   * with the phases and ownership of the optimizer table's move_storage (docs/abi.md "Storage swap");
   * args->storage->instance is never NULL. Called on every rank between steps, outside a micro-batch. */
  zhost_status* (*move_param_storage)(zhost_plugin_instance* self, zhost_tier_storage_move* args);
} zhost_partition_api;
#define ZHOST_PARTITION_API_SIZE ZHOST_STRUCT_SIZE(zhost_partition_api, move_param_storage)
#define ZHOST_PARTITION_API_MIN_SIZE ZHOST_PARTITION_API_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_partition_api, ZHOST_PARTITION_API_SIZE);

#ifdef __cplusplus
}
#endif
#endif /* ZHOST_PARTITION_H */
