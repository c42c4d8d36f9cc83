// plugins/zero_common/zero_partition.cpp: ZeRO stages 1 and 2 (see the header for the design).
#include "plugins/zero_common/zero_partition.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>

#include "plugins/zero_common/plugin_calls.hpp"
#include "zhost/kit/dlpack_views.hpp"
#include "zhost/kit/format.hpp"
#include "zhost/kit/grad_numerics.hpp"
#include "zhost/kit/optimizer.hpp"

namespace zhost::zero {

using kit::dl_view;
using kit::tensor_view;
using sdk::PluginError;

ZeroPartition::ZeroPartition(const sdk::Host& host, const ZeroOptions& options) : host_(host), options_(options) {}

ZeroPartition::~ZeroPartition() {
  for (auto& bucket : buckets_) abandon(host_, bucket.work);
}

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
  master_ = at::zeros({partition}, (tier_.active() ? at::TensorOptions() : on_device).dtype(at::kFloat));
  const int64_t begin = rank_ * partition;
  for (const Segment& s : layout_.segments(begin, begin + partition))
    master_.narrow(0, s.flat_offset - begin, s.length)
        .copy_(params_[s.param].model.reshape({-1}).narrow(0, s.param_offset, s.length));
  attach_optimizer_tier(setup);
  if (tier_.active()) {
    updated_ = at::empty({partition}, on_device.dtype(compute_dtype_));
    copies_ = HostCopies::find(host_, on_device.device());
    if (staged()) staged_step_ = StagedStep(tier_, copies_, options_.step_chunk, compute_dtype_);
  } else {
    optimizer_ = kit::make_optimizer(kit::optimizer_spec_from_abi(setup.optimizer));
    optimizer_->allocate_state(state_, master_);
    if (options_.stage == 2) ensure_grad_partition();
  }

  bucket_capacity_ = std::max<int64_t>(1, std::min(options_.reduce_bucket_size, layout_.total()));
  buckets_.resize(options_.overlap_comm ? 2 : 1);
  gather_chunk_ = std::clamp<int64_t>(options_.allgather_bucket_size / world_size_, 1, partition);
  gather_buffer_ = at::empty({gather_chunk_ * world_size_}, on_device.dtype(compute_dtype_));
  if (compute_dtype_ != at::kFloat && !tier_.active())  // the fp32 master is cast chunk by chunk to send
    gather_send_ = at::empty({gather_chunk_}, on_device.dtype(compute_dtype_));
  arrived_.assign(params_.size(), 0);
  host_.info(
      kit::format("stage {}: {} parameters padded to {} = {} partitions of {} elements; this rank owns "
                  "flat [{}, {}); gradient buckets of {} elements ({}{}), parameter all-gather in chunks of {} "
                  "elements per rank{}",
                  options_.stage, layout_.total(), layout_.padded(), world_size_, partition, begin, begin + partition,
                  bucket_capacity_, options_.reduce_scatter ? "reduce-scatter" : "all-reduce",
                  options_.overlap_comm ? ", two overlapping with backward" : "", gather_chunk_,
                  tier_.active() ? kit::format("; optimizer offloaded to tier '{}'", tier_.name()) : ""));
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
  std::fill(arrived_.begin(), arrived_.end(), 0);
}

ZeroPartition::Bucket& ZeroPartition::bucket_with_room(int64_t elements) {
  Bucket* bucket = &buckets_[current_];
  if (bucket->used > 0 && bucket->used + elements > bucket->staging.numel()) {
    launch(*bucket);
    if (!options_.overlap_comm) complete(*bucket);
    current_ = (current_ + 1) % buckets_.size();
    bucket = &buckets_[current_];
    complete(*bucket);  // with two buckets: the one launched before the last must be done to be refilled
  }
  const int64_t capacity = std::max(bucket_capacity_, elements);  // one oversized gradient gets its own bucket
  if (!bucket->staging.defined() || bucket->staging.numel() < capacity) {
    drain(*bucket);  // a staged copy may still read the old `send`
    const at::TensorOptions options = params_.front().model.options().dtype(compute_dtype_);
    bucket->staging = at::empty({capacity}, options);
    bucket->send = at::empty({capacity}, options);
  }
  return *bucket;
}

void ZeroPartition::grad_ready(uint32_t id, const DLTensor& grad_view) {
  if (!reduces_now()) return;  // stage 1 outside the boundary: the host accumulates .grad
  if (arrived_[id])
    throw PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                      kit::format("stage{}: parameter {} produced a gradient twice in one backward; ZeRO reduces each "
                                  "gradient once per micro-batch",
                                  options_.stage, params_[id].name));
  arrived_[id] = 1;
  at::Tensor grad = tensor_view(grad_view).reshape({-1});
  const int64_t n = grad.numel();
  Bucket& bucket = bucket_with_room(n);
  bucket.staging.narrow(0, bucket.used, n).copy_(grad);
  for (const Segment& s : layout_.split_by_owner(id))
    bucket.pieces.push_back(
        Piece{layout_.owner_of(s.flat_offset), bucket.used + s.param_offset, s.flat_offset, s.length});
  bucket.used += n;
}

// Groups the bucket's pieces by owner rank and starts their reduction.
void ZeroPartition::launch(Bucket& bucket) {
  if (bucket.used == 0) return;
  bucket.to_host_copy.order_compute_after();  // a staged copy of the last reduction reads what is rewritten here
  std::stable_sort(bucket.pieces.begin(), bucket.pieces.end(),
                   [](const Piece& a, const Piece& b) { return a.owner < b.owner; });
  bucket.counts.assign(world_size_, 0);
  int64_t at = 0;
  for (const Piece& p : bucket.pieces) {
    bucket.send.narrow(0, at, p.length).copy_(bucket.staging.narrow(0, p.staged_at, p.length));
    bucket.counts[p.owner] += p.length;
    at += p.length;
  }
  zhost_collective_args args = collective_args(ZHOST_INTENT_GRAD_REDUCE);
  args.flags = ZHOST_COLLECTIVE_ASYNC;
  bucket.send_view = bucket.send.narrow(0, 0, bucket.used);
  bucket.send_dl = dl_view(bucket.send_view);
  if (options_.reduce_scatter) {
    // The staging buffer is free once its elements are regrouped in `send`: it receives, unless a staged
    // copy to the host will read the result while backward refills the staging buffer.
    const int64_t mine = bucket.counts[rank_];
    if (staged() && (!bucket.reduced.defined() || bucket.reduced.numel() < mine)) {
      drain(bucket);
      bucket.reduced = at::empty({std::max(mine, bucket_capacity_ / world_size_)}, bucket.staging.options());
    }
    bucket.recv_view = (staged() ? bucket.reduced : bucket.staging).narrow(0, 0, mine);
    bucket.recv_dl = dl_view(bucket.recv_view);
    args.send = &bucket.send_dl;
    args.recv = &bucket.recv_dl;
    args.recv_counts = bucket.counts.data();
    host_.check(host_.collectives().reduce_scatter(host_.context(), &args));
  } else {  // DeepSpeed's reduce_scatter = false: all-reduce the whole bucket, keep this rank's part
    args.recv = &bucket.send_dl;
    host_.check(host_.collectives().all_reduce(host_.context(), &args));
  }
  bucket.work = args.work;
}

// Waits for the bucket's reduction and adds this rank's reduced elements into its gradient partition.
void ZeroPartition::complete(Bucket& bucket) {
  if (!bucket.work) return;
  wait_for(host_, bucket.work);
  at::Tensor mine = bucket.send_view;  // all-reduce: this rank's elements follow the lower ranks' ones
  int64_t at = 0;
  if (options_.reduce_scatter) {
    mine = bucket.recv_view;
  } else {
    for (int r = 0; r < rank_; ++r) at += bucket.counts[r];
  }
  ensure_grad_partition();  // stage 1: the partition's gradients exist from the boundary to step()
  if (staged()) {
    stage_to_host(bucket, mine.narrow(0, at, bucket.counts[rank_]));
  } else {
    const int64_t begin = rank_ * layout_.partition_size();
    for (const Piece& p : bucket.pieces) {
      if (p.owner != rank_) continue;
      grad_partition_.narrow(0, p.flat_offset - begin, p.length).add_(mine.narrow(0, at, p.length));
      at += p.length;
    }
  }
  bucket.pieces.clear();
  bucket.used = 0;
  bucket.send_view = bucket.recv_view = at::Tensor();
}

// Staged: this rank's reduced elements (`mine`, on the device) start for the host; the previous copy of
// this bucket is drained first.
void ZeroPartition::stage_to_host(Bucket& bucket, const at::Tensor& mine) {
  drain(bucket);
  const int64_t n = mine.numel();
  if (n == 0) return;
  if (!bucket.to_host.defined() || bucket.to_host.numel() < n) bucket.to_host = copies_.host_empty(n, compute_dtype_);
  for (const Piece& p : bucket.pieces)
    if (p.owner == rank_) bucket.to_host_pieces.push_back(p);
  bucket.to_host_copy = copies_.start(mine, bucket.to_host.narrow(0, 0, n));
}

// Waits for the bucket's copy to the host and adds the elements into the tier's accumulator.
void ZeroPartition::drain(Bucket& bucket) {
  if (!bucket.to_host_copy.pending()) return;
  bucket.to_host_copy.wait();
  const int64_t begin = rank_ * layout_.partition_size();
  int64_t at = 0;
  for (const Piece& p : bucket.to_host_pieces) {
    grad_partition_.narrow(0, p.flat_offset - begin, p.length).add_(bucket.to_host.narrow(0, at, p.length));
    at += p.length;
  }
  bucket.to_host_pieces.clear();
}

void ZeroPartition::check_all_gradients_arrived() {
  if (options_.ignore_unused_parameters) return;
  for (size_t i = 0; i < arrived_.size(); ++i)
    if (!arrived_[i])
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                        kit::format("stage{}: parameter {} received no gradient in this backward (unused by the loss); "
                                    "set zero.ignore_unused_parameters = true to treat it as zero",
                                    options_.stage, params_[i].name));
}

void ZeroPartition::backward_end() {
  if (!reduces_now()) return;
  check_all_gradients_arrived();
  Bucket& last = buckets_[current_];
  launch(last);
  for (auto& bucket : buckets_) complete(bucket);
  for (auto& bucket : buckets_) drain(bucket);
  current_ = 0;
}

void ZeroPartition::ensure_grad_partition() {
  if (!grad_partition_.defined())
    grad_partition_ = at::zeros({layout_.partition_size()}, params_.front().model.options().dtype(compute_dtype_));
}

void ZeroPartition::step(zhost_step_args& args) {
  ensure_grad_partition();  // no gradient may have reached this rank's partition: then all zero
  const bool offloaded = tier_.active();
  at::Tensor grad = grad_partition_.scalar_type() == at::kFloat ? grad_partition_ : grad_partition_.to(at::kFloat);
  // The partition holds sums over ranks of scaled gradients: average and unscale in one multiply. A tier
  // folds it into its optimizer pass instead (the norm scales by the same factor).
  const double unscale = 1.0 / (world_size_ * args.loss_scale);
  if (!offloaded) kit::scale_in_place({grad}, unscale);
  // On the training device: a tier's accumulator is in host memory, and NCCL reduces device tensors only.
  at::Tensor squares = kit::squared_norm({grad}).reshape({1}).to(params_.front().model.device());
  all_reduce_sum(host_, squares);  // inf/nan anywhere reaches every rank: all skip the step alike
  const double norm = std::sqrt(squares.item<double>()) * (offloaded ? unscale : 1.0);
  args.grad_norm = norm;
  args.overflow = std::isfinite(norm) ? 0 : 1;
  if (args.overflow) {  // skipped alike on every rank; the gradients are dropped
    release_gradients();
    return;
  }
  const double coefficient = kit::clip_coefficient(norm, args.clip_norm);
  if (offloaded) {   // the tier applies unscale and clipping in its one pass, and zeroes its accumulator
    if (staged()) {  // chunk by chunk, each chunk's copy to the device running while the next steps
      staged_step_.step(0, args.applied_steps + 1, args.lr, unscale * coefficient, updated_);
      staged_step_.finish();
    } else {
      tier_.step(0, args.applied_steps + 1, args.lr, unscale * coefficient, updated_);
    }
    gather_updated_partitions(updated_);
    return;
  }
  if (coefficient < 1) kit::scale_in_place({grad}, coefficient);
  optimizer_->step(master_, grad, state_, args.applied_steps + 1, args.lr);
  gather_updated_partitions(master_);
  release_gradients();
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
    at::Tensor recv = gather_buffer_.narrow(0, 0, length * world_size_);
    DLTensor send_dl = dl_view(send), recv_dl = dl_view(recv);
    zhost_collective_args args = collective_args(ZHOST_INTENT_PARAM_SYNC);
    args.send = &send_dl;
    args.recv = &recv_dl;
    host_.check(host_.collectives().all_gather(host_.context(), &args));
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
  const uint64_t element = c10::elementSize(compute_dtype_);
  out.buffers =
      (buckets_.size() * 2 * static_cast<uint64_t>(bucket_capacity_) + static_cast<uint64_t>(gather_buffer_.numel())) *
          element +
      (gather_send_.defined() ? gather_send_.nbytes() : 0);
  if (tier_.active()) {  // master, states and gradient partition are the tier's
    out.offloaded = tier_.bytes();
    out.buffers += updated_.nbytes();
    for (const Bucket& bucket : buckets_) out.buffers += bucket.reduced.defined() ? bucket.reduced.nbytes() : 0;
    return;
  }
  out.master = master_.nbytes();
  out.optimizer = static_cast<uint64_t>(state_.bytes());
  out.grads = options_.stage == 2 ? grad_partition_.nbytes() : 0;  // stage 1: the host's .grad holds them
}

}  // namespace zhost::zero
