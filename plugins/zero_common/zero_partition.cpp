// plugins/zero_common/zero_partition.cpp: ZeRO stages 1 and 2 (see the header for the design).
#include "plugins/zero_common/zero_partition.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "zhost/kit/dlpack_views.hpp"
#include "zhost/kit/format.hpp"
#include "zhost/kit/grad_numerics.hpp"
#include "zhost/kit/optimizer.hpp"
#include "zhost/kit/state_io.hpp"
#include "zhost/zero/plugin_calls.hpp"
#include "zhost/zero/step_prologue.hpp"

namespace zhost::zero {

using kit::dl_view;
using kit::tensor_view;
using sdk::PluginError;

ZeroPartition::ZeroPartition(const sdk::Host& host, const ZeroOptions& options) : host_(host), options_(options) {}

ZeroPartition::~ZeroPartition() = default;

void ZeroPartition::setup(const zhost_partition_setup& setup) {
  const zhost_group_info_args world = host_.group_info();
  rank_ = world.rank;
  world_size_ = world.size;

  std::vector<int64_t> numels;
  for (size_t i = 0; i < setup.num_params; ++i) {
    Param p{setup.params[i].name, tensor_view(setup.params[i].tensor)};
    if (!p.model.is_contiguous())
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                        kit::format("stage{}: parameter {} is not contiguous", options_.stage, p.name));
    numels.push_back(p.model.numel());
    params_.push_back(std::move(p));
  }
  if (params_.empty()) throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "the model has no parameters to partition");
  compute_dtype_ = params_.front().model.scalar_type();
  const at::TensorOptions on_device = params_.front().model.options();
  layout_ = FlatLayout(numels, world_size_);
  const int64_t partition = layout_.partition_size();

  // This rank's master partition (fp32, or bf16: Note [bf16 masters without offload] in zhost/kit/optimizer.hpp),
  // from the (identically initialised) parameters; padding stays 0. With a tier it only passes through here, in
  // fp32, on its way to host memory: it is built there.
  tier_ = OptimizerTier::find(host_);
  optimizer_spec_ = kit::optimizer_spec_from_abi(setup.optimizer);
  kit::require_elementwise(optimizer_spec_, kit::format("zero.stage = {}", options_.stage));
  state_names_ = kit::checkpoint_state_names(optimizer_spec_);
  const at::ScalarType master_dtype = zero::master_dtype(host_, tier_, optimizer_spec_);
  master_ = at::zeros({partition}, (tier_.active() ? at::TensorOptions() : on_device).dtype(master_dtype));
  const int64_t begin = rank_ * partition;
  for (const Segment& s : layout_.segments(begin, begin + partition))
    master_.narrow(0, s.flat_offset - begin, s.length)
        .copy_(params_[s.param].model.reshape({-1}).narrow(0, s.param_offset, s.length));
  check_delayed_update_setup(options_.delayed, tier_, setup.optimizer);
  attach_optimizer_tier(setup);
  if (tier_.active()) {
    updated_ = at::empty({partition}, on_device.dtype(compute_dtype_));
    copies_ = HostCopies::find(host_, on_device.device());
    if (staged()) staged_step_ = StagedStep(tier_, copies_, options_.step_chunk, compute_dtype_);
    if (options_.delayed.enabled) {  // gradients go to its accumulator; the tier's is the step's
      // Unstaged, the step in flight writes updated_ itself; staged, pinned host memory copied over at the boundary.
      std::vector<at::Tensor> outputs;
      if (!staged()) outputs.push_back(updated_);
      delayed_ = std::make_unique<DelayedTierStep>(
          tier_, copies_, options_.delayed, layout_.total(), compute_dtype_, std::vector<at::Tensor>{grad_partition_},
          std::move(outputs), [this](const std::vector<at::Tensor>& weights) { apply_weights(weights[0]); });
      grad_partition_ = delayed_->accumulator(0);
    }
  } else {
    optimizer_ = kit::make_optimizer(optimizer_spec_);
    optimizer_->allocate_state(state_, master_);
    if (options_.stage == 2) ensure_grad_partition();
  }

  ReducerOptions reducing;
  reducing.owner = kit::format("stage{}", options_.stage);
  for (const Param& p : params_) reducing.param_names.push_back(p.name);
  reducing.in_flight_elements = options_.overlap_comm ? options_.reduce_bucket_size : 0;
  reducing.ignore_unused_parameters = options_.ignore_unused_parameters;
  // Note [Transient communication buffers]: staging given back after each reduction; this rank's partition (or
  // the tier's accumulator, zeros after setup and after every step by the tier ABI) receives its first sums in
  // place (Note [Sums written in place]).
  reducing.keep_buffers = false;
  reducing.write_first_sums = true;
  reducer_ = GradientReducer(host_, flat_ranges(layout_, rank_, options_.reduce_bucket_size), rank_, world_size_,
                             on_device.dtype(compute_dtype_), std::move(reducing), copies_,
                             [this](int) { return ensure_grad_partition(); });
  gather_chunk_ = std::clamp<int64_t>(options_.allgather_bucket_size / world_size_, 1, partition);
  std::string offload;
  if (tier_.active()) {
    offload = kit::format("; optimizer offloaded to tier '{}'", tier_.name());
    if (delayed_) offload += delayed_update_summary(options_.delayed);
  } else if (master_dtype != at::kFloat) {
    offload = kBf16MastersSummary;
  }
  host_.info(
      kit::format("stage {}: {} parameters padded to {} = {} partitions of {} elements; this rank owns "
                  "flat [{}, {}); gradient buckets of up to {} elements in flat order (reduce-scatter{}), parameter "
                  "all-gather in chunks "
                  "of {} elements per rank{}",
                  options_.stage, layout_.total(), layout_.padded(), world_size_, partition, begin, begin + partition,
                  reducer_.largest_range(), options_.overlap_comm ? ", in flight while backward goes on" : "",
                  gather_chunk_, offload));
}

// The tier named by zero.offload_optimizer.device, if any, takes the master partition and the optimizer;
// its fp32 gradient accumulator becomes this rank's gradient partition.
void ZeroPartition::attach_optimizer_tier(const zhost_partition_setup& setup) {
  if (!tier_.active()) return;
  grad_partition_ = tier_.add_group(0, setup.optimizer, master_);
  master_ = at::Tensor();  // the tier holds it now
}

void ZeroPartition::begin_micro_batch(const zhost_micro_batch_args& args) {
  boundary_ = args.is_boundary != 0;
  reducer_.begin_micro_batch(args.micro_step == 0, boundary_);
}

// The host frees the gradient after this call. Stage 1: Note [Stage 1 accumulates in its flat staging].
void ZeroPartition::grad_ready(uint32_t id, const DLTensor& grad_view) {
  const at::Tensor grad = tensor_view(grad_view);
  if (options_.stage == 1 && !flat_grads_.defined()) {
    flat_grads_ = at::empty({layout_.padded()}, grad.options());
    reducer_.set_flat_staging(flat_grads_);
  }
  if (reduces_now())
    reducer_.add(id, grad);
  else
    reducer_.accumulate(id, grad);
}

void ZeroPartition::backward_end() {
  if (!reduces_now()) return;
  reducer_.finish();
  if (flat_grads_.defined()) {  // stage 1: reduced; given back before the step gathers
    reducer_.set_flat_staging(at::Tensor());
    flat_grads_ = at::Tensor();
  }
}

at::Tensor ZeroPartition::ensure_grad_partition() {
  if (!grad_partition_.defined())
    grad_partition_ = at::zeros({layout_.partition_size()}, params_.front().model.options().dtype(compute_dtype_));
  return grad_partition_;
}

void ZeroPartition::step(zhost_step_args& args) {
  ensure_grad_partition();  // no gradient may have reached this rank's partition: then all zero
  // Note [Step prologue]: the tier's accumulator is in host memory, the collectives' scalars on the device.
  const StepDecision decision =
      step_prologue(host_, {grad_partition_}, world_size_, params_.front().model.device(), args);
  // Note [Delayed parameter update]: the update in flight is applied at this boundary even when this step
  // overflows.
  if (delayed_) {  // its accumulator is zeroed at every boundary
    delayed_->step(args, decision, zero::step_scalars(args, decision, optimizer_spec_),
                   [this](const kit::StepScalars& scalars) { step_tier(scalars); });
    return;
  }
  if (decision.overflow) {  // skipped alike on every rank; the gradients are dropped
    release_gradients();
    return;
  }
  const kit::StepScalars scalars = zero::step_scalars(args, decision, optimizer_spec_);
  if (tier_.active()) return step_tier(scalars);  // the tier's step zeroes its accumulator
  // A 16-bit partition steps an fp32 master from an fp32 copy; a bf16 master steps from it directly.
  const at::Tensor grad =
      grad_partition_.scalar_type() == master_.scalar_type() ? grad_partition_ : grad_partition_.to(at::kFloat);
  optimizer_->step(master_, grad, state_, scalars);
  gather_updated_partitions(master_);
  release_gradients();
}

// The tier's optimizer step, synchronously: it applies the factor in its one pass, zeroes its accumulator and
// writes the updated partition, which is all-gathered at once.
void ZeroPartition::step_tier(const kit::StepScalars& scalars) {
  if (staged()) {  // chunk by chunk, each chunk's copy to the device running while the next steps
    staged_step_.step(0, scalars, updated_);
    staged_step_.finish();
  } else {
    tier_.step(0, scalars, updated_);
  }
  gather_updated_partitions(updated_);
}

// The delayed update's weights (host memory) into every rank's parameters: staged, by copy to the device first.
void ZeroPartition::apply_weights(const at::Tensor& weights) {
  if (staged()) copies_.start(weights, updated_).wait();
  gather_updated_partitions(staged() ? updated_ : weights);
}

// After a step (or a skipped one): stage 2 and a tier's accumulator keep their buffer, zeroed; stage 1
// frees its partition until the next boundary.
void ZeroPartition::release_gradients() {
  if (options_.stage == 2 || tier_.active())
    grad_partition_.zero_();
  else
    grad_partition_ = at::Tensor();
}

// The all-gather's buffers while it runs: the receive chunk of every rank, and a send chunk when the partition
// that steps is not in the compute dtype (an fp32 master in 16-bit training).
uint64_t ZeroPartition::gather_bytes() const {
  const uint64_t element = c10::elementSize(compute_dtype_);
  const bool cast = !tier_.active() && compute_dtype_ != master_.scalar_type();
  return element * static_cast<uint64_t>(gather_chunk_) * ((world_size_ > 1 ? world_size_ : 0) + (cast ? 1 : 0));
}

// Every rank's updated partition into every rank's parameters: chunk c of each partition per all-gather. Its
// buffers live for the call (Note [Transient communication buffers]).
void ZeroPartition::gather_updated_partitions(const at::Tensor& updated) {
  const int64_t partition = layout_.partition_size();
  const at::TensorOptions options = params_.front().model.options().dtype(compute_dtype_);
  at::Tensor gather_buffer, gather_send;  // [N * chunk], [chunk] (the fp32 master cast to a 16-bit dtype)
  if (world_size_ > 1) gather_buffer = at::empty({gather_chunk_ * world_size_}, options);
  if (updated.scalar_type() != compute_dtype_) gather_send = at::empty({gather_chunk_}, options);
  for (int64_t start = 0; start < partition; start += gather_chunk_) {
    const int64_t length = std::min(gather_chunk_, partition - start);
    at::Tensor send = updated.narrow(0, start, length);
    if (send.scalar_type() != compute_dtype_) send = gather_send.narrow(0, 0, length).copy_(send);
    at::Tensor recv = send;  // one rank: its partition is everything, and gathering it would only copy it
    if (world_size_ > 1) {
      recv = gather_buffer.narrow(0, 0, length * world_size_);
      DLTensor send_dl = dl_view(send), recv_dl = dl_view(recv);
      zhost_collective_args args = collective_args(ZHOST_INTENT_PARAM_SYNC);
      args.send = &send_dl;
      args.recv = &recv_dl;
      host_.check(host_.collectives().all_gather(host_.context(), &args));
    }
    for (int owner = 0; owner < world_size_; ++owner) {
      const int64_t flat = owner * partition + start;
      for (const Segment& s : layout_.segments(flat, flat + length))
        params_[s.param]
            .model.view({-1})
            .narrow(0, s.param_offset, s.length)
            .copy_(recv.narrow(0, owner * length + (s.flat_offset - flat), s.length));
    }
  }
}

void ZeroPartition::memory(zhost_model_state_bytes& out) const {
  // The most held at once in a step (Note [Transient communication buffers]): the reduction's or the gather's.
  out.buffers = std::max(reducer_.buffer_bytes(), gather_bytes());
  // Stage 1: the flat buffer it accumulates in, held through every step's backward.
  if (options_.stage == 1) out.grads = static_cast<uint64_t>(layout_.padded()) * c10::elementSize(compute_dtype_);
  if (tier_.active()) {  // master, states and gradient partition are the tier's
    out.offloaded = delayed_ ? delayed_->tier_bytes() : tier_.bytes();  // a busy tier is not called
    out.buffers += updated_.nbytes() + (delayed_ ? delayed_->buffer_bytes() : 0);
    return;
  }
  out.master = master_.nbytes();
  out.optimizer = static_cast<uint64_t>(state_.bytes());
  if (options_.stage == 2) out.grads = grad_partition_.nbytes();
}

// Checkpoints (docs/checkpoints.md): this rank's partition of the masters and optimizer states, parameter by
// parameter: its own tensors, or read from the tier that holds them. Loading fills the partition from whatever
// ranks saved it, then all-gathers the parameters.
void ZeroPartition::save_state(const zhost_state_io& io) {
  if (delayed_) delayed_->drain();  // Note [Delayed parameter update]: a checkpoint holds the last step's states
  const int64_t begin = rank_ * layout_.partition_size();
  const std::vector<Segment> segments = layout_.segments(begin, begin + layout_.partition_size());
  if (tier_.active()) {
    for (const std::string& name : state_names_)
      for (const Segment& s : segments) {
        const at::Tensor values = at::empty({s.length}, at::kFloat);
        tier_.read_state(0, name, s.flat_offset - begin, values);
        host_.check(kit::put_state(io, s.param, name, s.param_offset, values));
      }
    return;
  }
  for (const auto& [name, values] : kit::flat_states(master_, state_))
    for (const Segment& s : segments)
      host_.check(kit::put_state(io, s.param, name, s.param_offset, values.narrow(0, s.flat_offset - begin, s.length)));
}

void ZeroPartition::load_state(const zhost_state_io& io) {
  if (delayed_) {
    delayed_->drain();
    delayed_->states_replaced();
  }
  const int64_t begin = rank_ * layout_.partition_size();
  const std::vector<Segment> segments = layout_.segments(begin, begin + layout_.partition_size());
  if (tier_.active()) {
    for (const std::string& name : state_names_)
      for (const Segment& s : segments) {
        const at::Tensor values = at::empty({s.length}, at::kFloat);
        host_.check(kit::get_state(io, s.param, name, s.param_offset, values));
        tier_.write_state(0, name, s.flat_offset - begin, values);
      }
    const at::Tensor master = at::empty({layout_.partition_size()}, at::kFloat);
    tier_.read_state(0, kit::kMasterState, 0, master);  // the padding too: the tier keeps it at 0
    updated_.copy_(master);
    gather_updated_partitions(updated_);
    return;
  }
  for (const auto& [name, values] : kit::flat_states(master_, state_))
    for (const Segment& s : segments)
      host_.check(kit::get_state(io, s.param, name, s.param_offset, values.narrow(0, s.flat_offset - begin, s.length)));
  gather_updated_partitions(master_);
}

}  // namespace zhost::zero
