// plugins/zero_common/gradient_reducer.cpp: flat-range bucketed reduce-scatter of gradients (see the header,
// Note [Flat-range buckets]).
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
      overlap_(overlap),
      copies_(copies),
      target_(std::move(target)) {
  // The ranges: whole parameters in flat order, up to capacity_ elements each (a larger parameter alone).
  const int64_t split = layout.partition_size();
  const int64_t my_begin = rank * split, my_end = my_begin + split;
  const uint32_t params = layout.num_params();
  for (uint32_t p = 0; p < params; ++p) {
    const int64_t begin = layout.param_offset(p), end = begin + layout.param_numel(p);
    if (ranges_.empty() || end - ranges_.back().begin > capacity_) {
      Range r;
      r.begin = begin;
      r.first = p;
      ranges_.push_back(r);
    }
    ranges_.back().end = end;
    ranges_.back().last = p;
    range_of_.push_back(static_cast<int>(ranges_.size()) - 1);
  }
  added_.assign(params, 0);
  for (Range& r : ranges_) {
    r.missing = static_cast<int>(r.last - r.first) + 1;
    r.mine_begin = std::clamp(r.begin, my_begin, my_end);
    r.mine_end = std::clamp(r.end, my_begin, my_end);
    r.counts.assign(static_cast<size_t>(layout.world_size()), 0);
    for (int owner = 0; owner < layout.world_size(); ++owner)
      r.counts[static_cast<size_t>(owner)] =
          std::max<int64_t>(0, std::min(r.end, (owner + 1) * split) - std::max(r.begin, owner * split));
    largest_range_ = std::max(largest_range_, r.end - r.begin);
    largest_share_ = std::max(largest_share_, r.mine_end - r.mine_begin);
  }
  next_launch_ = static_cast<int>(ranges_.size()) - 1;
}

GradientReducer::~GradientReducer() {
  for (auto& buffer : buffers_) abandon(host_, buffer->work);
}

// A free buffer for `range` (a new one when none is free). A staged copy still reading its `received` is
// drained here, so nothing of its last use is pending while the range fills and reduces.
int GradientReducer::take_buffer(int range) {
  for (size_t i = 0; i < buffers_.size(); ++i) {
    Buffer& b = *buffers_[i];
    if (b.range >= 0 || b.work) continue;
    drain(b);
    b.range = range;
    return static_cast<int>(i);
  }
  auto b = std::make_unique<Buffer>();
  b->staging = at::empty({largest_range_}, options_);
  if (layout_->world_size() > 1 || staged()) b->received = at::empty({std::max<int64_t>(1, largest_share_)}, options_);
  b->range = range;
  buffers_.push_back(std::move(b));
  return static_cast<int>(buffers_.size()) - 1;
}

void GradientReducer::add(uint32_t param, const at::Tensor& grad) {
  Range& range = ranges_[static_cast<size_t>(range_of_[param])];
  if (range.buffer < 0) range.buffer = take_buffer(range_of_[param]);
  Buffer& buffer = *buffers_[static_cast<size_t>(range.buffer)];
  buffer.staging.narrow(0, layout_->param_offset(param) - range.begin, layout_->param_numel(param))
      .copy_(grad.reshape({-1}));
  added_[param] = 1;
  --range.missing;
  launch_ready();
}

// Launches the ranges, in descending flat order, while the next one has all its gradients.
void GradientReducer::launch_ready() {
  while (next_launch_ >= 0 && ranges_[static_cast<size_t>(next_launch_)].missing == 0) {
    launch(ranges_[static_cast<size_t>(next_launch_)]);
    --next_launch_;
  }
}

// Starts the range's reduce-scatter (one rank, unstaged: adds it into the target at once). With overlap, the
// reduction launched before it is completed first, so at most one is in flight while backward goes on.
void GradientReducer::launch(Range& range) {
  Buffer& buffer = *buffers_[static_cast<size_t>(range.buffer)];
  const at::Tensor sent = buffer.staging.narrow(0, 0, range.end - range.begin);
  if (layout_->world_size() == 1 && !staged()) {  // the sum over one rank is its own gradients: the same bits
    add_into_target(range.begin, sent);
    buffer.range = -1;
    range.buffer = -1;
    return;
  }
  const int64_t mine = range.mine_end - range.mine_begin;
  buffer.send_view = sent;
  buffer.recv_view = buffer.received.narrow(0, 0, mine);
  buffer.send_dl = dl_view(buffer.send_view);
  buffer.recv_dl = dl_view(buffer.recv_view);
  zhost_collective_args args = collective_args(ZHOST_INTENT_GRAD_REDUCE);
  args.flags = ZHOST_COLLECTIVE_ASYNC;
  args.send = &buffer.send_dl;
  args.recv = &buffer.recv_dl;
  args.recv_counts = range.counts.data();
  host_.check(host_.collectives().reduce_scatter(host_.context(), &args));
  buffer.work = args.work;
  in_flight_.push_back(range.buffer);
  range.buffer = -1;
  while (in_flight_.size() > (overlap_ ? 1u : 0u)) complete_oldest();
}

// Waits for the oldest reduction in flight and adds this rank's sums into the target (staged: starts their
// copy); its buffer is free again.
void GradientReducer::complete_oldest() {
  Buffer& buffer = *buffers_[static_cast<size_t>(in_flight_.front())];
  in_flight_.erase(in_flight_.begin());
  wait_for(host_, buffer.work);
  const Range& range = ranges_[static_cast<size_t>(buffer.range)];
  const int64_t at = range.mine_begin - rank_ * layout_->partition_size();
  if (staged()) {
    const int64_t n = buffer.recv_view.numel();
    if (n > 0) {
      if (!buffer.to_host.defined() || buffer.to_host.numel() < n)
        buffer.to_host = copies_.host_empty(std::max<int64_t>(n, largest_share_), options_.dtype().toScalarType());
      buffer.to_host_at = at;
      buffer.to_host_n = n;
      buffer.to_host_copy = copies_.start(buffer.recv_view, buffer.to_host.narrow(0, 0, n));
    }
  } else if (buffer.recv_view.numel() > 0) {
    add_into_target(at, buffer.recv_view);
  }
  buffer.send_view = buffer.recv_view = at::Tensor();
  buffer.range = -1;
}

void GradientReducer::add_into_target(int64_t at, const at::Tensor& values) {
  if (values.numel() == 0) return;
  target_().narrow(0, at, values.numel()).add_(values);
}

// Waits for the buffer's copy to the host and adds the elements into the target.
void GradientReducer::drain(Buffer& buffer) {
  if (!buffer.to_host_copy.pending()) return;
  buffer.to_host_copy.wait();
  add_into_target(buffer.to_host_at, buffer.to_host.narrow(0, 0, buffer.to_host_n));
}

void GradientReducer::finish() {
  // Ranges still missing gradients (parameters unused by this loss): their gaps reduce as zeros.
  for (int r = next_launch_; r >= 0; --r) {
    Range& range = ranges_[static_cast<size_t>(r)];
    if (range.missing == 0) continue;
    if (range.buffer < 0) range.buffer = take_buffer(r);
    at::Tensor& staging = buffers_[static_cast<size_t>(range.buffer)]->staging;
    for (uint32_t p = range.first; p <= range.last; ++p)
      if (!added_[p]) staging.narrow(0, layout_->param_offset(p) - range.begin, layout_->param_numel(p)).zero_();
    range.missing = 0;
  }
  launch_ready();
  while (!in_flight_.empty()) complete_oldest();
  for (auto& buffer : buffers_) drain(*buffer);
  for (Range& range : ranges_) range.missing = static_cast<int>(range.last - range.first) + 1;
  std::fill(added_.begin(), added_.end(), 0);
  next_launch_ = static_cast<int>(ranges_.size()) - 1;
}

uint64_t GradientReducer::buffer_bytes() const {
  uint64_t bytes = 0;
  for (const auto& buffer : buffers_) {
    bytes += buffer->staging.nbytes();
    if (buffer->received.defined()) bytes += buffer->received.nbytes();  // to_host: the host counts pinned memory
  }
  return bytes;
}

}  // namespace zhost::zero
