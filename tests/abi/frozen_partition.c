/* tests/abi/frozen_partition.c: a data-parallel partition plugin (plain SGD, whole model states on every
 * rank) written in C99 against ONLY one frozen copy of a released SDK's headers (tests/abi/frozen/vM_N, picked
 * by the include path), so that a real `zhost run` can train with what a plugin built for zhost M.N really
 * looks like. It provides "partition:stage1" (each build in a folder of its own, searched first), copies
 * each gradient of the boundary micro-batch into one flat buffer, all-reduces it through the host's
 * collectives at backward_end, and at step() averages and unscales, computes the global norm (overflow),
 * clips and steps SGD (momentum, L2 weight decay) on the parameters' own storage. fp32 host memory only. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "zhost/zhost.h"

#if ZHOST_ABI_MAJOR == 1 && ZHOST_ABI_MINOR == 0
#define PLUGIN_NAME "frozen_dp_v1_0"
#elif ZHOST_ABI_MAJOR == 1 && ZHOST_ABI_MINOR == 1
#define PLUGIN_NAME "frozen_dp_v1_1"
#else
#error "built against headers of an unexpected release"
#endif

static const zhost_host_services* g_host;

typedef struct param {
  float* data; /* the parameter's storage (the host's), updated in place */
  int64_t numel;
  int64_t offset; /* into the flat gradient buffer */
} param;

typedef struct dp {
  const zhost_host_services* host;
  zhost_host_context* ctx;
  param* params;
  size_t num_params;
  float* grads;    /* flat: the boundary micro-batch's gradients, summed over ranks at backward_end */
  float* momentum; /* flat momentum buffers, or NULL without momentum */
  int64_t total;
  zhost_optimizer_desc optimizer;
  int boundary;
  int32_t world;
} dp;

static zhost_status* fail(zhost_status_code code, const char* message) { return g_host->status_create(code, message); }

static int64_t numel_of(const DLTensor* t) {
  int64_t n = 1;
  int32_t i;
  for (i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

static int is_fp32_on_host(const DLTensor* t) {
  return t->dtype.code == kDLFloat && t->dtype.bits == 32 && t->dtype.lanes == 1 && t->device.device_type == kDLCPU;
}

static zhost_status* setup(zhost_plugin_instance* instance, const zhost_partition_setup* s) {
  dp* self = (dp*)instance;
  size_t i;
  if (s->optimizer.kind != ZHOST_OPTIMIZER_SGD)
    return fail(ZHOST_ERR_UNSUPPORTED, PLUGIN_NAME " trains with SGD only: set optimizer.type = \"SGD\"");
  self->optimizer = s->optimizer;
  self->params = (param*)calloc(s->num_params ? s->num_params : 1, sizeof(param));
  if (!self->params) return fail(ZHOST_ERR_OUT_OF_MEMORY, PLUGIN_NAME ": out of memory");
  self->num_params = s->num_params;
  self->total = 0;
  for (i = 0; i < s->num_params; ++i) {
    const DLTensor* t = &s->params[i].tensor;
    if (!is_fp32_on_host(t) || t->data == NULL)
      return fail(ZHOST_ERR_UNSUPPORTED, PLUGIN_NAME " trains fp32 parameters in host memory only");
    self->params[i].data = (float*)((char*)t->data + t->byte_offset);
    self->params[i].numel = numel_of(t);
    self->params[i].offset = self->total;
    self->total += self->params[i].numel;
  }
  self->grads = (float*)calloc((size_t)self->total + 1, sizeof(float));
  if (!self->grads) return fail(ZHOST_ERR_OUT_OF_MEMORY, PLUGIN_NAME ": out of memory");
  if (self->optimizer.momentum != 0) {
    self->momentum = (float*)calloc((size_t)self->total + 1, sizeof(float));
    if (!self->momentum) return fail(ZHOST_ERR_OUT_OF_MEMORY, PLUGIN_NAME ": out of memory");
  }
  {
    zhost_group_info_args world;
    zhost_status* status;
    memset(&world, 0, sizeof(world));
    world.struct_size = sizeof(world);
    if ((status = self->host->collectives->group_info(self->ctx, &world)) != NULL) return status;
    self->world = world.size;
  }
  if (self->world < 1) return fail(ZHOST_ERR_COMM, PLUGIN_NAME ": no process group");
  return NULL;
}

static zhost_status* begin_micro_batch(zhost_plugin_instance* instance, const zhost_micro_batch_args* args) {
  dp* self = (dp*)instance;
  self->boundary = args->is_boundary != 0;
  if (self->boundary) memset(self->grads, 0, (size_t)self->total * sizeof(float)); /* unused parameters: 0 */
  return NULL;
}

static zhost_status* no_op(zhost_plugin_instance* instance, const zhost_block_args* args) {
  (void)instance;
  (void)args;
  return NULL;
}

/* The host accumulates .grad over micro-batches: the boundary micro-batch's gradient is the whole sum. */
static zhost_status* grad_ready(zhost_plugin_instance* instance, const zhost_grad_ready_args* ready) {
  dp* self = (dp*)instance;
  const uint32_t id = ready->param_id;
  const DLTensor* grad = ready->grad;
  if (!self->boundary) return NULL;
  if (id >= self->num_params || !is_fp32_on_host(grad) || numel_of(grad) != self->params[id].numel)
    return fail(ZHOST_ERR_INVALID_ARGUMENT, PLUGIN_NAME ": unexpected gradient");
  memcpy(self->grads + self->params[id].offset, (const char*)grad->data + grad->byte_offset,
         (size_t)self->params[id].numel * sizeof(float));
  return NULL;
}

static zhost_status* backward_end(zhost_plugin_instance* instance, const zhost_backward_end_args* end) {
  dp* self = (dp*)instance;
  DLTensor view;
  int64_t length = self->total;
  zhost_collective_args args;
  if (!self->boundary) return NULL;
  memset(&view, 0, sizeof(view));
  view.data = self->grads;
  view.device.device_type = kDLCPU;
  view.ndim = 1;
  view.dtype.code = kDLFloat;
  view.dtype.bits = 32;
  view.dtype.lanes = 1;
  view.shape = &length;
  memset(&args, 0, sizeof(args));
  args.struct_size = sizeof(args);
  args.recv = &view;
  args.op = ZHOST_REDUCE_SUM;
  args.intent = ZHOST_INTENT_GRAD_REDUCE;
  args.block = -1;
  (void)end;
  return self->host->collectives->all_reduce(self->ctx, &args);
}

static zhost_status* step(zhost_plugin_instance* instance, zhost_step_args* args) {
  dp* self = (dp*)instance;
  const float unscale = (float)(1.0 / (self->world * args->loss_scale));
  const float lr = (float)args->lr, decay = (float)self->optimizer.weight_decay;
  const float momentum = (float)self->optimizer.momentum;
  double squares = 0;
  float clip = 1;
  int64_t i;
  size_t p;
  for (i = 0; i < self->total; ++i) {
    self->grads[i] *= unscale;
    squares += (double)self->grads[i] * self->grads[i];
  }
  args->grad_norm = sqrt(squares);
  args->overflow = isfinite(args->grad_norm) ? 0 : 1;
  if (args->overflow) return NULL;
  if (args->clip_norm > 0 && args->clip_norm / (args->grad_norm + 1e-6) < 1)
    clip = (float)(args->clip_norm / (args->grad_norm + 1e-6));
  for (p = 0; p < self->num_params; ++p) {
    float* value = self->params[p].data;
    const float* grad = self->grads + self->params[p].offset;
    float* buffer = self->momentum ? self->momentum + self->params[p].offset : NULL;
    for (i = 0; i < self->params[p].numel; ++i) {
      float direction = clip < 1 ? grad[i] * clip : grad[i];
      if (decay != 0) direction += decay * value[i];
      if (buffer) direction = buffer[i] = buffer[i] * momentum + direction;
      value[i] -= lr * direction;
    }
  }
  return NULL;
}

static zhost_status* memory(zhost_plugin_instance* instance, zhost_model_state_bytes* out) {
  dp* self = (dp*)instance;
  out->optimizer = self->momentum ? (uint64_t)self->total * sizeof(float) : 0;
  out->buffers = (uint64_t)self->total * sizeof(float);
  return NULL;
}

static zhost_status* create(zhost_plugin_create_args* args) {
  dp* self = (dp*)calloc(1, sizeof(dp));
  if (!self) return fail(ZHOST_ERR_OUT_OF_MEMORY, PLUGIN_NAME ": out of memory");
  if (!args->host->collectives) {
    free(self);
    return fail(ZHOST_ERR_UNSUPPORTED, PLUGIN_NAME " needs the host's collectives");
  }
  self->host = args->host;
  self->ctx = args->ctx;
  {
    zhost_log_args line;
    memset(&line, 0, sizeof(line));
    line.struct_size = sizeof(line);
    line.level = ZHOST_LOG_INFO;
    line.message = PLUGIN_NAME " created (built against frozen SDK headers)";
    args->host->log(args->ctx, &line);
  }
  args->instance = (zhost_plugin_instance*)self;
  return NULL;
}

static void destroy(zhost_plugin_instance* instance) {
  dp* self = (dp*)instance;
  free(self->params);
  free(self->grads);
  free(self->momentum);
  free(self);
}

static const zhost_partition_api k_partition = {
    sizeof(zhost_partition_api),
    NULL,
    setup,
    begin_micro_batch,
    no_op,
    no_op,
    no_op,
    grad_ready,
    no_op,
    backward_end,
    step,
    memory,
    NULL, /* gather_param, for plugins that partition parameters */
    NULL,
    NULL, /* save_state, load_state (this plugin cannot checkpoint) */
    NULL, /* move_param_storage */
};

static const zhost_plugin_api k_api = {
    sizeof(zhost_plugin_api), NULL, NULL, NULL, create, destroy, &k_partition, NULL, NULL, NULL};

static const char* const k_provides[] = {"partition:stage1", NULL};

static const zhost_plugin_descriptor k_descriptor = {sizeof(zhost_plugin_descriptor),
                                                     NULL,
                                                     PLUGIN_NAME,
                                                     "0.0.1",
                                                     "data parallel SGD built against frozen SDK headers",
                                                     ZHOST_KIND_PARTITION,
                                                     k_provides,
                                                     NULL,
                                                     NULL,
                                                     NULL,
                                                     0,
                                                     0};

ZHOST_EXPORT zhost_status* zhost_plugin_v1(zhost_negotiation* io) {
  if (io == NULL || io->struct_size < ZHOST_NEGOTIATION_SIZE || io->host_abi_major != ZHOST_ABI_MAJOR) return NULL;
  g_host = io->host;
  io->plugin_abi_minor = ZHOST_ABI_MINOR;
  io->plugin_min_host_minor = ZHOST_ABI_MINOR;
  io->descriptor = &k_descriptor;
  io->api = &k_api;
  return NULL;
}
