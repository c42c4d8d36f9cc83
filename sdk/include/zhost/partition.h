/* zhost/partition.h: the capability table of a partition plugin (ZeRO stages 1, 2, 3).
 *
 * STATUS: draft of ABI 0.x. The training-engine work completes the step arguments; stage plugins then
 * freeze it with ABI 1.0.
 *
 * The host owns the model, its parameters and autograd. At start it registers every trainable parameter
 * once (identical ids and order on every rank, which the host checks). The plugin decides where each
 * parameter's states live and when collectives move them. The host calls the hooks below in the order of
 * one step (docs/architecture.md):
 *
 *   for each block b:  pre_forward(b)  ... block forward ...  post_forward(b)
 *   backward:          pre_backward(b) when b's output gradient arrives
 *                      grad_ready(p)   for each parameter as its gradient is accumulated
 *                      post_backward(b) when all of b's gradients are ready
 *   backward_end()     after the whole backward of one micro-batch
 *   step(args)         at the gradient-accumulation boundary
 *
 * Hooks with nothing to do must return quickly (well under a microsecond): the host calls them for every
 * block of every micro-batch.
 */
#ifndef ZHOST_PARTITION_H
#define ZHOST_PARTITION_H

#include <dlpack/dlpack.h>

#include "zhost/core.h"
#include "zhost/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zhost_param_info {
    size_t struct_size;
    const zhost_ext_header *ext;
    uint32_t id;          /* dense, 0..num_params-1, in registration order */
    const char *name;     /* e.g. "blocks.3.attn.qkv.weight"; valid until destroy() */
    int32_t block;        /* owning block in model order */
    DLTensor tensor;      /* the parameter's current full storage (borrowed; may be rebound by the host) */
} zhost_param_info;
#define ZHOST_PARAM_INFO_SIZE ZHOST_STRUCT_SIZE(zhost_param_info, tensor)
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_param_info, ZHOST_PARAM_INFO_SIZE);

typedef struct zhost_step_args {
    size_t struct_size;
    const zhost_ext_header *ext;
    int64_t step;            /* optimizer step about to be taken, from 1 */
    double lr;               /* learning rate for this step */
    double loss_scale;       /* gradients carry this factor; 1 without fp16 */
    double clip_norm;        /* global-norm clipping threshold, 0 = off */
    double grad_norm;        /* out: global gradient norm before clipping (unscaled) */
    int32_t skipped;         /* out: 1 when an overflow skipped the step */
} zhost_step_args;
#define ZHOST_STEP_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_step_args, skipped)
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_step_args, ZHOST_STEP_ARGS_SIZE);

typedef struct zhost_partition_api {
    size_t struct_size;
    const zhost_ext_header *ext;
    zhost_status *(*register_params)(zhost_plugin_instance *self, const zhost_param_info *params, size_t num_params);
    zhost_status *(*pre_forward)(zhost_plugin_instance *self, int32_t block);
    zhost_status *(*post_forward)(zhost_plugin_instance *self, int32_t block);
    zhost_status *(*pre_backward)(zhost_plugin_instance *self, int32_t block);
    zhost_status *(*grad_ready)(zhost_plugin_instance *self, uint32_t param_id, const DLTensor *grad);
    zhost_status *(*post_backward)(zhost_plugin_instance *self, int32_t block);
    zhost_status *(*backward_end)(zhost_plugin_instance *self);
    zhost_status *(*step)(zhost_plugin_instance *self, zhost_step_args *args);
} zhost_partition_api;
#define ZHOST_PARTITION_API_SIZE ZHOST_STRUCT_SIZE(zhost_partition_api, step)
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_partition_api, ZHOST_PARTITION_API_SIZE);

#ifdef __cplusplus
}
#endif
#endif /* ZHOST_PARTITION_H */
