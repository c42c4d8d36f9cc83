/* zhost/optimizer.h: the optimizer a job trains with, as the host describes it to partition plugins
 * (zhost/partition.h, zhost_partition_setup), and the optimizer table of a computing offload tier
 * (ZHOST_PLUGIN_FLAG_TIER_COMPUTES, ZeRO-Offload): a partition plugin hands the tier one optimizer group per key
 * (e.g. its partition); the tier keeps the group's fp32 master weights, optimizer states and an fp32 gradient
 * accumulator. The partition adds reduced gradients into the accumulator (a view in host memory), and at the
 * step the tier updates the master and states in one pass and writes the new values, in the dtype the caller
 * asks for, to where the partition all-gathers them from. Storing tiers fill zhost/storage.h's table instead or
 * as well.
 */
#ifndef ZHOST_OPTIMIZER_H
#define ZHOST_OPTIMIZER_H

#include <dlpack/dlpack.h>

#include "zhost/core.h"
#include "zhost/plugin.h"
#include "zhost/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum zhost_optimizer_kind {
  ZHOST_OPTIMIZER_ADAMW = 1, /* decoupled weight decay (torch.optim.AdamW) */
  ZHOST_OPTIMIZER_ADAM = 2,  /* L2 weight decay (torch.optim.Adam) */
  ZHOST_OPTIMIZER_SGD = 3,   /* momentum SGD, L2 weight decay */
  ZHOST_OPTIMIZER_LION = 4,  /* sign update, decoupled weight decay */
  ZHOST_OPTIMIZER_LAMB = 5   /* since 1.1: Adam's update scaled per parameter by a trust ratio (DeepSpeed's
                                FusedLamb); it needs each parameter whole, so only a partition that steps whole
                                parameters (stage 0) may accept it */
} zhost_optimizer_kind;

typedef struct zhost_optimizer_desc {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_optimizer_kind kind;
  double beta1;
  double beta2;
  double eps;
  double weight_decay;
  double momentum;         /* SGD */
  int32_t bias_correction; /* Adam kinds and Lamb */
  double max_coeff;        /* since 1.1, Lamb: the trust ratio's upper bound (DeepSpeed's default 10) */
  double min_coeff;        /* since 1.1, Lamb: its lower bound (DeepSpeed's default 0.01) */
} zhost_optimizer_desc;
#define ZHOST_OPTIMIZER_DESC_SIZE ZHOST_STRUCT_SIZE(zhost_optimizer_desc, min_coeff)
#define ZHOST_OPTIMIZER_DESC_MIN_SIZE ZHOST_STRUCT_SIZE(zhost_optimizer_desc, bias_correction) /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_optimizer_desc, ZHOST_OPTIMIZER_DESC_SIZE);

typedef struct zhost_tier_optimizer_setup {
  size_t struct_size;
  const zhost_ext_header* ext;
  uint64_t key;                          /* names the group; unique per instance */
  const zhost_optimizer_desc* optimizer; /* borrowed for the call */
  const DLTensor* initial_master;        /* 1-D fp32 in host memory: the group's starting values, copied */
} zhost_tier_optimizer_setup;
#define ZHOST_TIER_OPTIMIZER_SETUP_SIZE ZHOST_STRUCT_SIZE(zhost_tier_optimizer_setup, initial_master)
#define ZHOST_TIER_OPTIMIZER_SETUP_MIN_SIZE ZHOST_TIER_OPTIMIZER_SETUP_SIZE /* since 1.0 */
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
  int64_t offset;       /* step_range only: the range's first element in the group */
  double beta1;         /* since 1.1: this step's betas, which a momentum schedule (DeepSpeed's OneCycle) may */
  double beta2;         /* change every step; absent (1.0 caller): the optimizer_desc's */
} zhost_tier_step_args;
#define ZHOST_TIER_STEP_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_tier_step_args, beta2)
#define ZHOST_TIER_STEP_ARGS_MIN_SIZE ZHOST_STRUCT_SIZE(zhost_tier_step_args, offset) /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_tier_step_args, ZHOST_TIER_STEP_ARGS_SIZE);

typedef struct zhost_tier_grad_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  uint64_t key;
  DLTensor grad; /* out: the group's fp32 accumulator, 1-D in host memory, valid until the group is dropped */
} zhost_tier_grad_args;
#define ZHOST_TIER_GRAD_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_tier_grad_args, grad)
#define ZHOST_TIER_GRAD_ARGS_MIN_SIZE ZHOST_TIER_GRAD_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_tier_grad_args, ZHOST_TIER_GRAD_ARGS_SIZE);

/* grad_done: the caller adds nothing more into elements [offset, offset + numel) of group key's accumulator
 * before the group's next step (or grad_zero). */
typedef struct zhost_tier_grad_done_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  uint64_t key;
  int64_t offset;
  int64_t numel;
  int32_t moved; /* out: 1 when the tier may have moved the range out of host memory (the grad view is then not
                    to be read over it until the step, which uses the moved values); 0: the view holds them */
} zhost_tier_grad_done_args;
#define ZHOST_TIER_GRAD_DONE_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_tier_grad_done_args, moved)
#define ZHOST_TIER_GRAD_DONE_ARGS_MIN_SIZE ZHOST_TIER_GRAD_DONE_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_tier_grad_done_args, ZHOST_TIER_GRAD_DONE_ARGS_SIZE);

/* A range of one state of a computing tier's optimizer group, read or written for a checkpoint
 * (docs/checkpoints.md). */
typedef struct zhost_tier_state_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  uint64_t key;      /* the optimizer group */
  const char* state; /* "master", "grad" (the accumulator) or an optimizer state's name ("exp_avg", "exp_avg_sq");
                        borrowed for the call */
  int64_t offset;    /* first element, in the group */
  DLTensor* data;    /* 1-D, contiguous, fp32, in host memory, numel(data) elements; borrowed for the call */
} zhost_tier_state_args;
#define ZHOST_TIER_STATE_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_tier_state_args, data)
#define ZHOST_TIER_STATE_ARGS_MIN_SIZE ZHOST_TIER_STATE_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_tier_state_args, ZHOST_TIER_STATE_ARGS_SIZE);

typedef struct zhost_optimizer_tier_api {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_status* (*setup)(zhost_plugin_instance* self, const zhost_tier_optimizer_setup* args);
  /* The group's fp32 gradient accumulator (zeros after setup and after each step), as a view. */
  zhost_status* (*grad)(zhost_plugin_instance* self, zhost_tier_grad_args* args);
  /* One optimizer step of the group on accumulator * grad_scale (the caller folds averaging, loss-scale
   * and clipping into grad_scale); zeroes the accumulator. */
  zhost_status* (*step)(zhost_plugin_instance* self, const zhost_tier_step_args* args);
  /* Optional (NULL: whole groups only): step on elements [args->offset, offset + numel(params_out)) of the group
   * alone; params_out is required and receives that range, and that range of the accumulator is zeroed. A
   * caller steps a group piece by piece so that each piece's copy to the device overlaps with the next one's
   * step. */
  zhost_status* (*step_range)(zhost_plugin_instance* self, const zhost_tier_step_args* args);
  /* Frees optimizer group args->key (its master, states and accumulator; the grad view dies with it). Dropping
   * an unknown group is not an error. */
  zhost_status* (*drop)(zhost_plugin_instance* self, zhost_tier_key_args* args);
  /* Optional (NULL: a job whose optimizer this tier runs cannot save or resume checkpoints): synchronous copies
   * of elements [offset, offset + numel(data)) of group key's state `state` into `data` (read), or from `data`
   * into the group (write: nothing else of the group changes). Called between steps. */
  zhost_status* (*read_state)(zhost_plugin_instance* self, const zhost_tier_state_args* args);
  zhost_status* (*write_state)(zhost_plugin_instance* self, const zhost_tier_state_args* args);
  /* With ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE (NULL: its storage cannot be swapped): one phase of moving every
   * group's master and states to another storage (zhost_tier_storage_move). Called between steps, while no call
   * of this tier is in flight and no event of its storage is pending. */
  zhost_status* (*move_storage)(zhost_plugin_instance* self, zhost_tier_storage_move* args);
  /* Optional, with grad_zero (NULL: accumulators stay in host memory), docs/abi.md "Gradients in storage": a tier
   * that keeps the group's states in a storage tier may move a finished range's gradients there and give their
   * host memory back. read_state(..., "grad", ...) reads the accumulator wherever its elements are. */
  zhost_status* (*grad_done)(zhost_plugin_instance* self, zhost_tier_grad_done_args* args);
  /* Zeroes group key's whole accumulator, moved ranges included (a step skipped for overflow). */
  zhost_status* (*grad_zero)(zhost_plugin_instance* self, zhost_tier_key_args* args);
  /* What the tier holds now (zhost_tier_memory). */
  zhost_status* (*memory)(zhost_plugin_instance* self, zhost_tier_memory* out);
} zhost_optimizer_tier_api;
#define ZHOST_OPTIMIZER_TIER_API_SIZE ZHOST_STRUCT_SIZE(zhost_optimizer_tier_api, memory)
#define ZHOST_OPTIMIZER_TIER_API_MIN_SIZE ZHOST_OPTIMIZER_TIER_API_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_optimizer_tier_api, ZHOST_OPTIMIZER_TIER_API_SIZE);

#ifdef __cplusplus
}
#endif
#endif /* ZHOST_OPTIMIZER_H */
