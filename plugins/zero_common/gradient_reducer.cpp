// plugins/zero_common/gradient_reducer.cpp: bucketed reduce-scatter of gradients (see the header).
#include "plugins/zero_common/gradient_reducer.hpp"

#include <ATen/ops/empty.h>

#include <algorithm>

#include "zhost/kit/dlpack_views.hpp"

namespace zhost::zero {

using kit::dl_view;

GradientReducer::GradientReducer(const sdk::Host& host, const FlatLayout& layout, int rank,
                                 at::TensorOptions bucket_options, int64_t bucket_elements, bool overlap,
                                 HostCopies copies, Target target)
    : host_(host),
      layout_(&layout),
      rank_(rank),
      options_(bucket_options),
      capacity_(std::max<int64_t>(1, std::min(bucket_elements, layout.total()))),
      copies_(copies),
      target_(std::move(target)),
      buckets_(overlap ? 2 : 1) {}

GradientReducer::~GradientReducer() {
  for (auto& bucket : buckets_) abandon(host_, bucket.work);
}

GradientReducer::Bucket& GradientReducer::bucket_with_room(int64_t elements) {
  Bucket* bucket = &buckets_[current_];
  if (bucket->used > 0 && bucket->used + elements > bucket->staging.numel()) {
    launch(*bucket);
    if (buckets_.size() == 1) complete(*bucket);
    current_ = (current_ + 1) % buckets_.size();
    bucket = &buckets_[current_];
    complete(*bucket);  // with two buckets: the one launched before the last must be done to be refilled
  }
  const int64_t capacity = std::max(capacity_, elements);  // one oversized gradient gets its own bucket
  if (!bucket->staging.defined() || bucket->staging.numel() < capacity) {
    drain(*bucket);  // a staged copy may still read the old `send`
    bucket->staging = at::empty({capacity}, options_);
    bucket->send = at::empty({capacity}, options_);
  }
  return *bucket;
}

void GradientReducer::add(uint32_t param, const at::Tensor& grad) {
  const at::Tensor flat = grad.reshape({-1});
  const int64_t n = flat.numel();
  Bucket& bucket = bucket_with_room(n);
  bucket.staging.narrow(0, bucket.used, n).copy_(flat);
  for (const Segment& s : layout_->split_by_owner(param))
    bucket.pieces.push_back(
        Piece{layout_->owner_of(s.flat_offset), bucket.used + s.param_offset, s.flat_offset, s.length});
  bucket.used += n;
}

// Groups the bucket's pieces by owner rank and starts their reduce-scatter.
void GradientReducer::launch(Bucket& bucket) {
  if (bucket.used == 0) return;
  if (layout_->world_size() == 1 && !staged()) {  // the sum over one rank is its own gradients: the same bits
    add_into_target(bucket.pieces, bucket.staging.narrow(0, 0, bucket.used));
    bucket.pieces.clear();
    bucket.used = 0;
    return;
  }
  bucket.to_host_copy.order_compute_after();  // a staged copy of the last reduction reads what is rewritten here
  std::stable_sort(bucket.pieces.begin(), bucket.pieces.end(),
                   [](const Piece& a, const Piece& b) { return a.owner < b.owner; });
  bucket.counts.assign(layout_->world_size(), 0);
  int64_t at = 0;
  for (const Piece& p : bucket.pieces) {
    bucket.send.narrow(0, at, p.length).copy_(bucket.staging.narrow(0, p.staged_at, p.length));
    bucket.counts[p.owner] += p.length;
    at += p.length;
  }
  // The staging buffer is free once its elements are regrouped in `send`: it receives, unless a staged copy
  // to the host will read the result while backward refills the staging buffer.
  const int64_t mine = bucket.counts[rank_];
  if (staged() && (!bucket.reduced.defined() || bucket.reduced.numel() < mine)) {
    drain(bucket);
    bucket.reduced = at::empty({std::max(mine, capacity_ / layout_->world_size())}, options_);
  }
  bucket.send_view = bucket.send.narrow(0, 0, bucket.used);
  bucket.recv_view = (staged() ? bucket.reduced : bucket.staging).narrow(0, 0, mine);
  bucket.send_dl = dl_view(bucket.send_view);
  bucket.recv_dl = dl_view(bucket.recv_view);
  zhost_collective_args args = collective_args(ZHOST_INTENT_GRAD_REDUCE);
  args.flags = ZHOST_COLLECTIVE_ASYNC;
  args.send = &bucket.send_dl;
  args.recv = &bucket.recv_dl;
  args.recv_counts = bucket.counts.data();
  host_.check(host_.collectives().reduce_scatter(host_.context(), &args));
  bucket.work = args.work;
}

// Waits for the bucket's reduction and adds this rank's reduced elements into the target.
void GradientReducer::complete(Bucket& bucket) {
  if (!bucket.work) return;
  wait_for(host_, bucket.work);
  if (staged()) {
    stage_to_host(bucket, bucket.recv_view);
  } else {
    add_into_target(bucket.pieces, bucket.recv_view);
  }
  bucket.pieces.clear();
  bucket.used = 0;
  bucket.send_view = bucket.recv_view = at::Tensor();
}

// Adds `values` (this rank's reduced elements, in bucket order) into the target at the pieces' offsets.
void GradientReducer::add_into_target(const std::vector<Piece>& pieces, const at::Tensor& values) {
  at::Tensor target = target_();
  const int64_t begin = rank_ * layout_->partition_size();
  int64_t at = 0;
  for (const Piece& p : pieces) {
    if (p.owner != rank_) continue;
    target.narrow(0, p.flat_offset - begin, p.length).add_(values.narrow(0, at, p.length));
    at += p.length;
  }
}

// Staged: this rank's reduced elements (`mine`, on the device) start for the host; the previous copy of
// this bucket is drained first.
void GradientReducer::stage_to_host(Bucket& bucket, const at::Tensor& mine) {
  drain(bucket);
  const int64_t n = mine.numel();
  if (n == 0) return;
  if (!bucket.to_host.defined() || bucket.to_host.numel() < n)
    bucket.to_host = copies_.host_empty(n, options_.dtype().toScalarType());
  for (const Piece& p : bucket.pieces)
    if (p.owner == rank_) bucket.to_host_pieces.push_back(p);
  bucket.to_host_copy = copies_.start(mine, bucket.to_host.narrow(0, 0, n));
}

// Waits for the bucket's copy to the host and adds the elements into the target.
void GradientReducer::drain(Bucket& bucket) {
  if (!bucket.to_host_copy.pending()) return;
  bucket.to_host_copy.wait();
  add_into_target(bucket.to_host_pieces, bucket.to_host);
  bucket.to_host_pieces.clear();
}

void GradientReducer::finish() {
  launch(buckets_[current_]);
  for (auto& bucket : buckets_) complete(bucket);
  for (auto& bucket : buckets_) drain(bucket);
  current_ = 0;
}

uint64_t GradientReducer::buffer_bytes() const {
  const uint64_t element = c10::elementSize(options_.dtype().toScalarType());
  uint64_t bytes = buckets_.size() * 2 * static_cast<uint64_t>(capacity_) * element;
  for (const Bucket& bucket : buckets_) bytes += bucket.reduced.defined() ? bucket.reduced.nbytes() : 0;
  return bytes;
}

}  // namespace zhost::zero
