// sdk/zero/src/plugin_calls.cpp: collectives and the optimizer's offload tier (see the header).
#include "zhost/zero/plugin_calls.hpp"

#include <ATen/ops/empty.h>

#include <algorithm>

#include "zhost/kit/dlpack_views.hpp"
#include "zhost/kit/format.hpp"

namespace zhost::zero {

using kit::dl_view;

zhost_collective_args collective_args(zhost_collective_intent intent, int32_t block) {
  zhost_collective_args args{};
  args.struct_size = sizeof(args);
  args.op = ZHOST_REDUCE_SUM;
  args.intent = intent;
  args.block = block;
  return args;
}

void all_reduce(const sdk::Host& host, at::Tensor& value, zhost_reduce_op op) {
  DLTensor view = dl_view(value);
  zhost_collective_args args = collective_args(ZHOST_INTENT_GENERIC);
  args.op = op;
  args.recv = &view;
  host.check(host.collectives().all_reduce(host.context(), &args));
}

void wait_for(const sdk::Host& host, zhost_work*& work) {
  if (!work) return;
  zhost_work* in_flight = work;
  work = nullptr;
  host.check(host.wait_work(in_flight));
}

void abandon(const sdk::Host& host, zhost_work*& work) noexcept {
  if (!work) return;
  if (zhost_status* status = host.wait_work(work)) host.services()->status_destroy(status);
  work = nullptr;
}

OptimizerTier OptimizerTier::find(const sdk::Host& host) {
  OptimizerTier tier(host);
  zhost_tier_ref& ref = tier.ref_;
  ref.struct_size = sizeof(ref);
  ref.role = ZHOST_TIER_FOR_OPTIMIZER;
  host.check(host.services()->tier_for(host.context(), &ref));
  if (!ref.instance) return tier;
  if (!ref.optimizer)
    throw sdk::PluginError(ZHOST_ERR_UNSUPPORTED,
                           kit::format("offload tier '{}' stores buffers but cannot run the optimizer; use "
                                       "zero.offload_optimizer.device = \"cpu\"",
                                       ref.name));
  return tier;
}

at::Tensor OptimizerTier::add_group(uint64_t key, const zhost_optimizer_desc& optimizer,
                                    const at::Tensor& master) const {
  const at::Tensor on_host = master.is_cpu() ? master : master.to(at::kCPU);  // tiers read host memory
  DLTensor initial = dl_view(on_host);
  zhost_tier_optimizer_setup setup{};
  setup.struct_size = sizeof(setup);
  setup.key = key;
  setup.optimizer = &optimizer;
  setup.initial_master = &initial;
  host_.check(ref_.optimizer->setup(ref_.instance, &setup));
  zhost_tier_grad_args grad{};
  grad.struct_size = sizeof(grad);
  grad.key = key;
  host_.check(ref_.optimizer->grad(ref_.instance, &grad));
  return kit::tensor_view(grad.grad);
}

zhost_tier_step_args OptimizerTier::step_args(uint64_t key, const kit::StepScalars& scalars) const {
  zhost_tier_step_args args{};
  args.struct_size = sizeof(args);
  args.key = key;
  args.step = scalars.step;
  args.lr = scalars.lr;
  args.grad_scale = scalars.grad_scale;
  args.beta1 = scalars.beta1;
  args.beta2 = scalars.beta2;
  return args;
}

void OptimizerTier::step(uint64_t key, const kit::StepScalars& scalars, const at::Tensor& params_out) const {
  zhost_tier_step_args args = step_args(key, scalars);
  DLTensor out = dl_view(params_out);
  args.params_out = &out;
  const ScopedSpan span(host_, "tier_step");
  host_.check(ref_.optimizer->step(ref_.instance, &args));
}

bool OptimizerTier::steps_ranges() const { return ref_.optimizer->step_range != nullptr; }

void OptimizerTier::step_range(uint64_t key, int64_t offset, const kit::StepScalars& scalars,
                               const at::Tensor& params_out) const {
  zhost_tier_step_args args = step_args(key, scalars);
  DLTensor out = dl_view(params_out);
  args.params_out = &out;
  args.offset = offset;
  const ScopedSpan span(host_, "tier_step");
  host_.check(ref_.optimizer->step_range(ref_.instance, &args));
}

bool OptimizerTier::grad_done(uint64_t key, int64_t offset, int64_t numel) const {
  // The two come as a pair: a tier that could move gradients but not zero them is told nothing, so its
  // accumulators stay in host memory and a skipped step zeroes them there.
  if (!ref_.optimizer->grad_done || !ref_.optimizer->grad_zero) return false;
  zhost_tier_grad_done_args args{};
  args.struct_size = sizeof(args);
  args.key = key;
  args.offset = offset;
  args.numel = numel;
  host_.check(ref_.optimizer->grad_done(ref_.instance, &args));
  return args.moved != 0;
}

void OptimizerTier::grad_zero(uint64_t key) const {
  zhost_tier_key_args args{};
  args.struct_size = sizeof(args);
  args.key = key;
  host_.check(ref_.optimizer->grad_zero(ref_.instance, &args));
}

void StagedStep::step(uint64_t key, const kit::StepScalars& scalars, const at::Tensor& device) {
  const int64_t numel = device.numel();
  const int64_t chunk = tier_.steps_ranges() ? chunk_ : numel;
  for (int64_t offset = 0; offset < numel; offset += chunk) {
    const int64_t count = std::min(chunk, numel - offset);
    Slot& slot = slots_[next_];
    next_ = 1 - next_;
    slot.copy.wait();  // the buffer's previous chunk has reached the device
    if (!slot.buffer.defined() || slot.buffer.numel() < count) slot.buffer = copies_.host_empty(count, dtype_);
    const at::Tensor piece = slot.buffer.narrow(0, 0, count);
    if (count == numel)
      tier_.step(key, scalars, piece);
    else
      tier_.step_range(key, offset, scalars, piece);
    slot.copy = copies_.start(piece, device.narrow(0, offset, count));
  }
}

void StagedStep::finish() {
  for (Slot& slot : slots_) slot.copy.wait();
}

void declare_gradient_keys(sdk::DescriptorBuilder& builder) {
  builder.reads_keys({"zero.reduce_bucket_size"})
      .config_bool("zero.overlap_comm", false,
                   "reduce gradients while backward runs, up to zero.reduce_bucket_size elements in flight (stage 1: "
                   "on the boundary micro-batch)")
      .config_bool("zero.reduce_scatter", true,
                   "DeepSpeed: false all-reduces gradient buckets; zhost always reduce-scatters (the same sums)")
      .config_bool("zero.ignore_unused_parameters", true,
                   "treat a parameter without gradient as zero (false: stop with an error)")
      .config_int("zero.offload_optimizer.step_chunk_size", kDefaultStepChunk,
                  "elements the offloaded optimizer steps at a time on a device job; each chunk's updated weights "
                  "are copied to the device while the next chunk steps",
                  1, 1e15);
}

void read_gradient_keys(sdk::DescriptorBuilder& builder) {
  builder.reads_keys({"zero.reduce_bucket_size", "zero.overlap_comm", "zero.reduce_scatter",
                      "zero.ignore_unused_parameters", "zero.offload_optimizer.step_chunk_size"});
}

void note_reduce_scatter_key(const sdk::Host& host) {
  if (!host.config_bool("zero.reduce_scatter"))
    host.warn(
        "zero.reduce_scatter = false has no effect: zhost reduces gradients with reduce-scatter, which gives each "
        "rank the same sums an all-reduce would (Note [One summation order]) and moves half the bytes");
}

uint64_t OptimizerTier::bytes() const {
  zhost_tier_memory memory{};
  memory.struct_size = sizeof(memory);
  host_.check(ref_.optimizer->memory(ref_.instance, &memory));
  return memory.host_bytes + memory.storage_bytes;
}

void OptimizerTier::check_checkpointable(const char* action) const {
  if (ref_.optimizer->read_state && ref_.optimizer->write_state) return;
  throw sdk::PluginError(ZHOST_ERR_UNSUPPORTED,
                         kit::format("cannot {} a checkpoint: tier '{}' holds the optimizer and cannot hand out its "
                                     "states (no read_state in its optimizer table)",
                                     action, name()));
}

void OptimizerTier::copy_state(uint64_t key, const std::string& state, int64_t offset, const at::Tensor& data,
                               bool into_group) const {
  check_checkpointable(into_group ? "load" : "save");
  DLTensor view = dl_view(data);
  zhost_tier_state_args args{};
  args.struct_size = sizeof(args);
  args.key = key;
  args.state = state.c_str();
  args.offset = offset;
  args.data = &view;
  host_.check(into_group ? ref_.optimizer->write_state(ref_.instance, &args)
                         : ref_.optimizer->read_state(ref_.instance, &args));
}

HostCopies::Copy& HostCopies::Copy::operator=(Copy&& other) noexcept {
  if (this != &other) {
    Copy old(std::move(*this));
    host_ = other.host_;
    copy_ = std::exchange(other.copy_, nullptr);
  }
  return *this;
}

HostCopies::Copy::~Copy() {
  if (!copy_) return;
  if (zhost_status* status = host_.copy_wait(copy_)) host_.services()->status_destroy(status);
}

void HostCopies::Copy::order_compute_after() const {
  if (copy_) host_.copy_order_compute_after(copy_);
}

void HostCopies::Copy::wait() {
  if (!copy_) return;
  zhost_copy* copy = std::exchange(copy_, nullptr);
  const ScopedSpan span(host_, "copy_wait");
  host_.check(host_.copy_wait(copy));
}

HostCopies HostCopies::find(const sdk::Host& host, const at::Device& device) {
  HostCopies copies;
  const zhost_copy_services* services = host.copies();
  if (!services) {
    if (device.is_cpu()) return copies;  // no training job (a test host): nothing to stage
    throw sdk::PluginError(ZHOST_ERR_UNSUPPORTED, "offloading from a device needs the host's copy services");
  }
  copies.host_ = host;
  copies.separate_ = services->device_memory_is_separate(host.context()) != 0;
  copies.pinned_ = !device.is_cpu();
  return copies;
}

at::Tensor HostCopies::host_empty(int64_t numel, at::ScalarType dtype) const {
  return at::empty({numel}, at::TensorOptions().dtype(dtype).pinned_memory(pinned_));
}

HostCopies::Copy HostCopies::start(const at::Tensor& src, const at::Tensor& dst) const {
  DLTensor src_dl = dl_view(src), dst_dl = dl_view(dst);
  return Copy(host_, host_.copy_start(src_dl, dst_dl));
}

at::ScalarType master_dtype(const sdk::Host& host, const OptimizerTier& tier, const kit::OptimizerSpec& optimizer) {
  if (tier.active() || !host.config_bool("bf16.master_weights_and_grads")) return at::kFloat;
  if (!kit::steps_bf16(optimizer))
    throw sdk::PluginError(ZHOST_ERR_CONFIG,
                           kit::format("bf16.master_weights_and_grads = true is built for Adam and AdamW, and the "
                                       "optimizer is {}; use one of them, or remove it",
                                       kit::optimizer_kind_name(optimizer.kind)));
  return at::kBFloat16;
}

void read_master_keys(sdk::DescriptorBuilder& builder) {
  builder.reads_keys({"bf16.master_weights_and_grads", "bf16.optimizer_states"});
}

}  // namespace zhost::zero
