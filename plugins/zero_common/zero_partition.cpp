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
namespace {

// extrapolated = now + k (now - before), cast to its dtype, and before = now: one pass over the partition, as
// it shares the cores with the next step's forward and backward.
template <typename Out>
void extrapolate_into(const float* now, float* before, Out* extrapolated, float k, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float w = now[i];
    extrapolated[i] = static_cast<Out>(w + k * (w - before[i]));
    before[i] = w;
  }
}

void extrapolate(const at::Tensor& now, const at::Tensor& before, const at::Tensor& extrapolated, float k) {
  const int64_t n = now.numel();
  switch (extrapolated.scalar_type()) {
    case at::kFloat:
      return extrapolate_into(now.data_ptr<float>(), before.data_ptr<float>(), extrapolated.data_ptr<float>(), k, n);
    case at::kBFloat16:
      return extrapolate_into(now.data_ptr<float>(), before.data_ptr<float>(), extrapolated.data_ptr<at::BFloat16>(), k,
                              n);
    case at::kHalf:
      return extrapolate_into(now.data_ptr<float>(), before.data_ptr<float>(), extrapolated.data_ptr<at::Half>(), k, n);
    default:
      throw sdk::PluginError(ZHOST_ERR_INTERNAL, "delayed update: no extrapolation into this compute dtype");
  }
}

}  // namespace

using kit::dl_view;
using kit::tensor_view;
using sdk::PluginError;

ZeroPartition::ZeroPartition(const sdk::Host& host, const ZeroOptions& options) : host_(host), options_(options) {}

ZeroPartition::~ZeroPartition() = default;

void ZeroPartition::setup(const zhost_partition_setup& setup) {
  const zhost_collectives& collectives = host_.collectives();
  rank_ = collectives.rank(host_.context(), nullptr);
  world_size_ = collectives.world_size(host_.context(), nullptr);

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

  // This rank's fp32 master partition, from the (identically initialised) parameters; padding stays 0. With
  // a tier it only passes through here on its way to host memory: it is built there.
  tier_ = OptimizerTier::find(host_);
  state_names_ = kit::checkpoint_state_names(kit::optimizer_spec_from_abi(setup.optimizer));
  master_ = at::zeros({partition}, (tier_.active() ? at::TensorOptions() : on_device).dtype(at::kFloat));
  const int64_t begin = rank_ * partition;
  for (const Segment& s : layout_.segments(begin, begin + partition))
    master_.narrow(0, s.flat_offset - begin, s.length)
        .copy_(params_[s.param].model.reshape({-1}).narrow(0, s.param_offset, s.length));
  if (options_.delayed_update && !tier_.active())
    throw PluginError(ZHOST_ERR_CONFIG,
                      "zero.offload_optimizer.delayed_update = true needs a tier that runs the optimizer; set "
                      "zero.offload_optimizer.device = \"cpu\" or \"nvme\"");
  attach_optimizer_tier(setup);
  if (tier_.active()) {
    updated_ = at::empty({partition}, on_device.dtype(compute_dtype_));
    copies_ = HostCopies::find(host_, on_device.device());
    if (staged()) staged_step_ = StagedStep(tier_, copies_, options_.step_chunk, compute_dtype_);
    if (options_.delayed_update) {  // the stage's own accumulator; the tier's is the step's (Note [Delayed ...])
      tier_accumulator_ = std::exchange(grad_partition_, at::zeros({partition}, at::kFloat));
      if (staged()) updated_host_ = copies_.host_empty(partition, compute_dtype_);
      if (extrapolates()) allocate_extrapolation(partition);
      tier_bytes_ = tier_.bytes();
    }
  } else {
    optimizer_ = kit::make_optimizer(kit::optimizer_spec_from_abi(setup.optimizer));
    optimizer_->allocate_state(state_, master_);
    if (options_.stage == 2) ensure_grad_partition();
  }

  ReducerOptions reducing;
  reducing.owner = kit::format("stage{}", options_.stage);
  for (const Param& p : params_) reducing.param_names.push_back(p.name);
  reducing.in_flight_elements = options_.overlap_comm ? options_.reduce_bucket_size : 0;
  reducing.ignore_unused_parameters = options_.ignore_unused_parameters;
  reducer_ = GradientReducer(host_, flat_ranges(layout_, rank_, options_.reduce_bucket_size), rank_, world_size_,
                             on_device.dtype(compute_dtype_), std::move(reducing), copies_,
                             [this](int) { return ensure_grad_partition(); });
  gather_chunk_ = std::clamp<int64_t>(options_.allgather_bucket_size / world_size_, 1, partition);
  gather_buffer_ = at::empty({gather_chunk_ * world_size_}, on_device.dtype(compute_dtype_));
  if (compute_dtype_ != at::kFloat && !tier_.active())  // the fp32 master is cast chunk by chunk to send
    gather_send_ = at::empty({gather_chunk_}, on_device.dtype(compute_dtype_));
  std::string offload;
  if (tier_.active()) {
    offload = kit::format("; optimizer offloaded to tier '{}'", tier_.name());
    if (options_.delayed_update)
      offload += kit::format(", delayed parameter update from step {}", options_.delayed_update_start);
    if (options_.delayed_update && extrapolates())
      offload += kit::format(", weights extrapolated by {}", options_.delayed_update_extrapolation);
  }
  host_.info(kit::format(
      "stage {}: {} parameters padded to {} = {} partitions of {} elements; this rank owns "
      "flat [{}, {}); gradient buckets of up to {} elements in flat order (reduce-scatter{}), parameter "
      "all-gather in chunks "
      "of {} elements per rank{}",
      options_.stage, layout_.total(), layout_.padded(), world_size_, partition, begin, begin + partition,
      reducer_.largest_range(), options_.overlap_comm ? ", in flight while backward goes on" : "", gather_chunk_,
      offload));
}

// Note [Delayed parameter update], extrapolation: the tier's master is read where the step's own output is not
// the fp32 master (16-bit jobs: every delayed step) and where no step has left it here (the first delayed step,
// after a load), so the tier must give its states back; asked once here, so that a tier that cannot stops the
// job at setup.
void ZeroPartition::allocate_extrapolation(int64_t partition) {
  master_before_ = at::empty({partition}, at::kFloat);
  try {
    tier_.read_state(0, kit::kMasterState, 0, master_before_);
  } catch (const PluginError& e) {
    throw PluginError(ZHOST_ERR_CONFIG,
                      kit::format("zero.offload_optimizer.delayed_update_extrapolation needs the tier to read its "
                                  "master weights back ({}); set it to 0 or use a tier that can",
                                  e.what()));
  }
  if (compute_dtype_ != at::kFloat) master_after_ = at::empty({partition}, at::kFloat);
  extrapolated_ = staged() ? copies_.host_empty(partition, compute_dtype_) : at::empty({partition}, compute_dtype_);
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

void ZeroPartition::grad_ready(uint32_t id, const DLTensor& grad_view) {
  if (!reduces_now()) return;  // stage 1 outside the boundary: the host accumulates .grad
  reducer_.add(id, tensor_view(grad_view));
}

void ZeroPartition::backward_end() {
  if (reduces_now()) reducer_.finish();
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
  if (options_.delayed_update) return step_delayed(args, decision.grad_scale, decision.overflow);
  if (decision.overflow) {  // skipped alike on every rank; the gradients are dropped
    release_gradients();
    return;
  }
  if (tier_.active()) return step_tier(args.applied_steps + 1, args.lr, decision.grad_scale);
  const at::Tensor grad =
      grad_partition_.scalar_type() == at::kFloat ? grad_partition_ : grad_partition_.to(at::kFloat);
  optimizer_->step(master_, grad, state_, args.applied_steps + 1, args.lr, decision.grad_scale);
  gather_updated_partitions(master_);
  release_gradients();
}

// The tier's optimizer step, synchronously: it applies the factor in its one pass, zeroes its accumulator and
// writes the updated partition, which is all-gathered at once.
void ZeroPartition::step_tier(int64_t step, double lr, double grad_scale) {
  if (staged()) {  // chunk by chunk, each chunk's copy to the device running while the next steps
    staged_step_.step(0, step, lr, grad_scale, updated_);
    staged_step_.finish();
  } else {
    tier_.step(0, step, lr, grad_scale, updated_);
  }
  gather_updated_partitions(updated_);
}

// Note [Delayed parameter update]: the previous step's weights are applied, then this step's gradients move
// into the tier's (zeroed) accumulator; before the start step the tier steps at once, from it on its step
// starts in the background, and on the job's last step it is applied at once.
void ZeroPartition::step_delayed(const zhost_step_args& args, double grad_scale, bool overflow) {
  apply_delayed_update(Apply::kBoundary);
  if (overflow) {  // dropped, as without the delay; nothing starts
    grad_partition_.zero_();
    return;
  }
  tier_accumulator_.copy_(grad_partition_);
  grad_partition_.zero_();
  const int64_t step = args.applied_steps + 1;
  const double lr = args.lr;
  if (args.step < options_.delayed_update_start) {  // not delayed yet: as without the delay
    master_before_current_ = false;
    step_tier(step, lr, grad_scale);
    tier_bytes_ = tier_.bytes();
    return;
  }
  step_in_background(step, lr, grad_scale);
  if (zhost_ext_find(args.ext, ZHOST_EXT_LAST_STEP)) apply_delayed_update(Apply::kExact);
}

// The tier's step on the background thread; with extrapolation it also writes E_t = W_t + k (W_t - W_{t-1}),
// computed in fp32, into extrapolated_ (Note [Delayed parameter update]). W_{t-1} is kept from the step before
// (master_before_); W_t is the step's own output in fp32 jobs, else read from the tier.
void ZeroPartition::step_in_background(int64_t step, double lr, double grad_scale) {
  const at::Tensor out = staged() ? updated_host_ : updated_;
  delayed_.start([this, step, lr, grad_scale, out] {
    if (extrapolates() && !master_before_current_) tier_.read_state(0, kit::kMasterState, 0, master_before_);
    tier_.step(0, step, lr, grad_scale, out);
    if (!extrapolates()) return;
    at::Tensor master = out;  // W_t
    if (compute_dtype_ != at::kFloat) {
      tier_.read_state(0, kit::kMasterState, 0, master_after_);
      master = master_after_;
    }
    extrapolate(master, master_before_, extrapolated_, static_cast<float>(options_.delayed_update_extrapolation));
    master_before_current_ = true;
  });
}

// Waits for the optimizer step in flight, if any, and all-gathers its updated partitions (from the device
// copy of the host buffer when staged): at a boundary the extrapolated ones if so set, else the optimizer's
// own, also when the parameters still hold an extrapolation of a step already waited for (a skipped step
// since). Called at step boundaries and before anything reads the states.
void ZeroPartition::apply_delayed_update(Apply how) {
  const bool waited = delayed_.wait();
  if (waited) tier_bytes_ = tier_.bytes();
  const bool extrapolated = how == Apply::kBoundary && extrapolates();
  if (!waited && !(how == Apply::kExact && extrapolated_applied_)) return;
  const at::Tensor source = extrapolated ? extrapolated_ : staged() ? updated_host_ : updated_;
  if (staged()) copies_.start(source, updated_).wait();
  gather_updated_partitions(staged() ? updated_ : source);
  extrapolated_applied_ = extrapolated;
}

// After a step (or a skipped one): stage 2 and a tier's accumulator keep their buffer, zeroed; stage 1
// frees its partition until the next boundary.
void ZeroPartition::release_gradients() {
  if (options_.stage == 2 || tier_.active())
    grad_partition_.zero_();
  else
    grad_partition_ = at::Tensor();
}

// Every rank's updated partition into every rank's parameters: chunk c of each partition per all-gather.
void ZeroPartition::gather_updated_partitions(const at::Tensor& updated) {
  const int64_t partition = layout_.partition_size();
  for (int64_t start = 0; start < partition; start += gather_chunk_) {
    const int64_t length = std::min(gather_chunk_, partition - start);
    at::Tensor send = updated.narrow(0, start, length);
    if (send.scalar_type() != compute_dtype_) send = gather_send_.narrow(0, 0, length).copy_(send);
    at::Tensor recv = send;  // one rank: its partition is everything, and gathering it would only copy it
    if (world_size_ > 1) {
      recv = gather_buffer_.narrow(0, 0, length * world_size_);
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
  out.buffers =
      reducer_.buffer_bytes() + gather_buffer_.nbytes() + (gather_send_.defined() ? gather_send_.nbytes() : 0);
  if (tier_.active()) {  // master, states and gradient partition are the tier's
    out.offloaded = options_.delayed_update ? tier_bytes_ : tier_.bytes();
    out.buffers += updated_.nbytes();
    if (options_.delayed_update) {  // the stage's own accumulator, the staged step's host copy, extrapolation's
      out.buffers += grad_partition_.nbytes() + (updated_host_.defined() ? updated_host_.nbytes() : 0);
      if (extrapolates())
        out.buffers +=
            master_before_.nbytes() + (master_after_.defined() ? master_after_.nbytes() : 0) + extrapolated_.nbytes();
    }
    return;
  }
  out.master = master_.nbytes();
  out.optimizer = static_cast<uint64_t>(state_.bytes());
  out.grads = options_.stage == 2 ? grad_partition_.nbytes() : 0;  // stage 1: the host's .grad holds them
}

// Checkpoints (docs/checkpoints.md): this rank's partition of the masters and optimizer states, parameter by
// parameter: its own tensors, or read from the tier that holds them. Loading fills the partition from whatever
// ranks saved it, then all-gathers the parameters.
void ZeroPartition::save_state(const zhost_state_io& io) {
  apply_delayed_update(Apply::kExact);  // Note [Delayed parameter update]: a checkpoint holds the last step's states
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
  apply_delayed_update(Apply::kExact);
  master_before_current_ = false;  // the tier's master changes under it
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
