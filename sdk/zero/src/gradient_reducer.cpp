// sdk/zero/src/gradient_reducer.cpp: bucketed reduce-scatter of gradients over ranges the stage
// describes (see the header, Note [Flat-range buckets]).
#include "zhost/zero/gradient_reducer.hpp"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <utility>

#include "zhost/kit/dlpack_views.hpp"
#include "zhost/kit/format.hpp"
#include "zhost/kit/host_pages.hpp"

namespace zhost::zero {

using kit::dl_view;
using sdk::PluginError;

std::vector<ReductionRange> flat_ranges(const FlatLayout& layout, int rank, int64_t bucket_elements) {
  const int64_t capacity = std::max<int64_t>(1, std::min(bucket_elements, layout.total()));
  const int64_t split = layout.partition_size();
  std::vector<ReductionRange> ranges;
  int64_t begin = 0;  // of the last range, in flat space
  for (uint32_t p = 0; p < layout.num_params(); ++p) {
    const int64_t offset = layout.param_offset(p), numel = layout.param_numel(p);
    if (ranges.empty() || offset + numel - begin > capacity) {
      ranges.emplace_back();
      begin = offset;
    }
    ReductionRange& r = ranges.back();
    r.params.push_back(p);
    r.offsets.push_back(offset - begin);
    r.lengths.push_back(numel);
    r.numel = offset + numel - begin;
  }
  begin = 0;
  for (ReductionRange& r : ranges) {
    const int64_t end = begin + r.numel;
    r.counts.assign(static_cast<size_t>(layout.world_size()), 0);
    for (int owner = 0; owner < layout.world_size(); ++owner)
      r.counts[static_cast<size_t>(owner)] =
          std::max<int64_t>(0, std::min(end, (owner + 1) * split) - std::max(begin, owner * split));
    r.target_offset = std::clamp(begin, rank * split, (rank + 1) * split) - rank * split;
    r.flat_offset = begin;
    begin = end;
  }
  return ranges;
}

GradientReducer::GradientReducer(const sdk::Host& host, std::vector<ReductionRange> ranges, int rank, int world_size,
                                 at::TensorOptions bucket_options, ReducerOptions options, HostCopies copies,
                                 Target target)
    : host_(host),
      ranges_(std::move(ranges)),
      world_size_(world_size),
      rank_(rank),
      options_(bucket_options),
      config_(std::move(options)),
      copies_(copies),
      target_(std::move(target)) {
  const size_t params = config_.param_names.size();
  range_of_.assign(params, -1);
  index_in_.assign(params, 0);
  added_.assign(params, 0);
  summed_.assign(ranges_.size(), 0);
  accumulated_.assign(params, 0);
  for (size_t r = 0; r < ranges_.size(); ++r) {
    ReductionRange& range = ranges_[r];
    counts_given_.push_back(!range.counts.empty());
    if (range.counts.empty()) range.counts.assign(static_cast<size_t>(world_size_), range.numel / world_size_);
    for (size_t i = 0; i < range.params.size(); ++i) {
      range_of_.at(range.params[i]) = static_cast<int>(r);
      index_in_[range.params[i]] = static_cast<int>(i);
    }
    largest_range_ = std::max(largest_range_, range.numel);
  }
  progress_.resize(ranges_.size());
  for (size_t r = 0; r < ranges_.size(); ++r) progress_[r].missing = static_cast<int>(ranges_[r].params.size());
  next_launch_ = static_cast<int>(ranges_.size()) - 1;
}

GradientReducer::~GradientReducer() {
  for (auto& buffer : buffers_) abandon(host_, buffer->work);
}

void GradientReducer::begin_micro_batch(bool first, bool boundary) {
  first_ = first;
  boundary_ = boundary;
  if (first) {  // a new step: nothing accumulated, every target zero again (Note [Sums written in place])
    std::fill(accumulated_.begin(), accumulated_.end(), 0);
    std::fill(summed_.begin(), summed_.end(), 0);
  }
}

void GradientReducer::set_flat_staging(const at::Tensor& flat) { config_.flat_staging = flat; }

// The parameter's place in the flat staging.
at::Tensor GradientReducer::flat_place(uint32_t param) const {
  const int r = range_of_.at(param);
  const ReductionRange& range = ranges_[static_cast<size_t>(r)];
  const size_t i = static_cast<size_t>(index_in_[param]);
  return config_.flat_staging.narrow(0, range.flat_offset + range.offsets[i], range.lengths[i]);
}

// Note [Gradients accumulated where they are reduced].
void GradientReducer::accumulate(uint32_t param, const at::Tensor& grad) {
  if (!config_.flat_staging.defined() || range_of_.at(param) < 0)
    throw PluginError(ZHOST_ERR_INTERNAL, kit::format("{}: accumulate() needs a flat staging that holds parameter {}",
                                                      config_.owner, config_.param_names.at(param)));
  at::Tensor place = flat_place(param);
  if (accumulated_[param])
    place.add_(grad.reshape({-1}));
  else
    place.copy_(grad.reshape({-1}));
  accumulated_[param] = 1;
}

// A free buffer for `range`: with flat_staging any free one, viewing the range's flat place; else the smallest
// free one it fits, one whose memory finish() gave back, or a new one (sized to any range when buffers are
// kept). A staged copy still reading its `received` is drained here, so nothing of its last use is pending
// while the range fills and reduces.
int GradientReducer::take_buffer(int range) {
  const ReductionRange& r = ranges_[static_cast<size_t>(range)];
  const bool flat = config_.flat_staging.defined();
  int any = -1, fit = -1, emptied = -1;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const Buffer& b = *buffers_[i];
    if (b.range >= 0 || b.work) continue;
    any = static_cast<int>(i);
    if (!b.staging.defined())
      emptied = any;
    else if (b.staging.numel() >= r.numel &&
             (fit < 0 || b.staging.numel() < buffers_[static_cast<size_t>(fit)]->staging.numel()))
      fit = any;
  }
  int chosen = flat ? any : (fit >= 0 ? fit : emptied);
  if (chosen < 0) {
    buffers_.push_back(std::make_unique<Buffer>());
    chosen = static_cast<int>(buffers_.size()) - 1;
  }
  Buffer& buffer = *buffers_[static_cast<size_t>(chosen)];
  if (flat)
    buffer.staging = config_.flat_staging.narrow(0, r.flat_offset, r.numel);
  else if (!buffer.staging.defined())
    buffer.staging = at::empty({config_.keep_buffers ? largest_range_ : r.numel}, options_);
  drain(buffer);
  buffer.range = range;
  zero_padding(range, buffer);
  return chosen;
}

// The padding after the range's last parameter is sent as zeros.
void GradientReducer::zero_padding(int range, Buffer& buffer) {
  const ReductionRange& r = ranges_[static_cast<size_t>(range)];
  const int64_t covered = r.offsets.back() + r.lengths.back();
  if (covered < r.numel) buffer.staging.narrow(0, covered, r.numel - covered).zero_();
}

void GradientReducer::add(uint32_t param, const at::Tensor& grad) {
  const int r = range_of_.at(param);
  if (added_[param])
    throw PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                      kit::format("{}: parameter {} produced a gradient twice in one backward; ZeRO reduces each "
                                  "gradient once per micro-batch",
                                  config_.owner, config_.param_names[param]));
  added_[param] = 1;
  Progress& progress = progress_[static_cast<size_t>(r)];
  if (progress.buffer < 0) progress.buffer = take_buffer(r);
  const ReductionRange& range = ranges_[static_cast<size_t>(r)];
  const size_t i = static_cast<size_t>(index_in_[param]);
  at::Tensor place =
      buffers_[static_cast<size_t>(progress.buffer)]->staging.narrow(0, range.offsets[i], range.lengths[i]);
  if (accumulated_[param])  // earlier micro-batches' sum is at this place (flat staging)
    place.add_(grad.reshape({-1}));
  else
    place.copy_(grad.reshape({-1}));
  if (--progress.missing == 0) launch_ready(r);
}

// Fixed order: launches the ranges, in descending order, while the next one has all its gradients.
// Otherwise: launches the range just completed.
void GradientReducer::launch_ready(int completed) {
  if (!config_.fixed_order) return launch(completed);
  while (next_launch_ >= 0 && progress_[static_cast<size_t>(next_launch_)].missing == 0) launch(next_launch_--);
}

// Starts the range's reduce-scatter (one rank, unstaged: adds it into the target at once). Reductions launched
// before it are completed first while the window would overflow; with no window it completes at once.
void GradientReducer::launch(int r) {
  const ReductionRange& range = ranges_[static_cast<size_t>(r)];
  Progress& progress = progress_[static_cast<size_t>(r)];
  progress.launched = true;
  const int b = std::exchange(progress.buffer, -1);
  Buffer& buffer = *buffers_[static_cast<size_t>(b)];
  const at::Tensor sent = buffer.staging.narrow(0, 0, range.numel);
  if (world_size_ == 1 && !staged() && config_.local_sum_on_one_rank) {  // the sum over one rank: the same bits
    add_into_target(r, sent);
    buffer.range = -1;
    return;
  }
  while (!in_flight_.empty() && in_flight_elements_ + range.numel > config_.in_flight_elements) complete_oldest();
  if (config_.before_launch) config_.before_launch(r);
  const int64_t mine = received_here(range);
  buffer.into_target = false;
  if (config_.write_first_sums && !staged() && !summed_[static_cast<size_t>(r)]) {
    at::Tensor target = target_(r);  // Note [Sums written in place]
    if (target.scalar_type() == options_.dtype().toScalarType() && target.is_contiguous()) {
      buffer.recv_view = target.narrow(0, range.target_offset, mine);
      buffer.into_target = true;
    }
  }
  if (!buffer.into_target) {
    if (!buffer.received.defined() || buffer.received.numel() < mine)
      buffer.received = at::empty({std::max<int64_t>(1, mine)}, options_);
    buffer.recv_view = buffer.received.narrow(0, 0, mine);
  }
  buffer.send_view = sent;
  buffer.send_dl = dl_view(buffer.send_view);
  buffer.recv_dl = dl_view(buffer.recv_view);
  zhost_collective_args args = collective_args(ZHOST_INTENT_GRAD_REDUCE, range.block);
  args.flags = ZHOST_COLLECTIVE_ASYNC;
  args.send = &buffer.send_dl;
  args.recv = &buffer.recv_dl;
  if (counts_given_[static_cast<size_t>(r)]) args.recv_counts = range.counts.data();
  if (!range.segment_starts.empty()) {
    buffer.segments = {{sizeof(zhost_segments_ext), ZHOST_EXT_SEGMENTS, nullptr},
                       range.segment_starts.data(),
                       range.segment_starts.size()};
    args.ext = &buffer.segments.header;
  }
  host_.check(host_.collectives().reduce_scatter(host_.context(), &args));
  buffer.work = args.work;
  in_flight_.push_back(b);
  in_flight_elements_ += range.numel;
  if (config_.in_flight_elements == 0) complete_oldest();
}

// Waits for the oldest reduction in flight and adds this rank's sums into the target (staged: starts their
// copy); its buffer is free again.
void GradientReducer::complete_oldest() {
  Buffer& buffer = *buffers_[static_cast<size_t>(in_flight_.front())];
  in_flight_.erase(in_flight_.begin());
  wait_for(host_, buffer.work);
  const int r = buffer.range;
  in_flight_elements_ -= ranges_[static_cast<size_t>(r)].numel;
  const int64_t n = buffer.recv_view.numel();
  if (buffer.into_target) {  // the sums are in place already
    summed_[static_cast<size_t>(r)] = 1;
    if (boundary_ && config_.finished) config_.finished(r);
  } else if (staged() && n > 0) {
    if (!buffer.to_host.defined() || buffer.to_host.numel() < n)
      buffer.to_host = copies_.host_empty(n, options_.dtype().toScalarType());
    buffer.to_host_range = r;
    buffer.to_host_copy = copies_.start(buffer.recv_view, buffer.to_host.narrow(0, 0, n));
  } else {
    add_into_target(r, buffer.recv_view);
  }
  buffer.send_view = buffer.recv_view = at::Tensor();
  buffer.range = -1;
}

// Adds this rank's sums of range `r` into its target; on the step's last micro-batch the range is finished.
void GradientReducer::add_into_target(int r, const at::Tensor& values) {
  const int64_t n = values.numel();
  if (n > 0) {
    at::Tensor into = target_(r).narrow(0, ranges_[static_cast<size_t>(r)].target_offset, n);
    if (config_.prefault_targets && first_) kit::prefault_for_write(into);
    into.add_(values);
    summed_[static_cast<size_t>(r)] = 1;
  }
  if (boundary_ && config_.finished) config_.finished(r);
}

// Waits for the buffer's copy to the host and adds the elements into the target.
void GradientReducer::drain(Buffer& buffer) {
  if (!buffer.to_host_copy.pending()) return;
  buffer.to_host_copy.wait();
  const int r = buffer.to_host_range;
  add_into_target(r, buffer.to_host.narrow(0, 0, received_here(ranges_[static_cast<size_t>(r)])));
}

void GradientReducer::finish() {
  // Parameters unused by this loss: an error, or zeros at their places; or reduced from their places when they
  // accumulated in earlier micro-batches.
  for (size_t p = 0; p < added_.size(); ++p) {
    if (added_[p] || range_of_[p] < 0) continue;
    if (!config_.ignore_unused_parameters && !accumulated_[p])
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                        kit::format("{}: parameter {} received no gradient in this backward (unused by the loss); "
                                    "set zero.ignore_unused_parameters = true to treat it as zero",
                                    config_.owner, config_.param_names[p]));
    const int r = range_of_[p];
    Progress& progress = progress_[static_cast<size_t>(r)];
    if (progress.buffer < 0) progress.buffer = take_buffer(r);
    const ReductionRange& range = ranges_[static_cast<size_t>(r)];
    const size_t i = static_cast<size_t>(index_in_[p]);
    if (!accumulated_[p])  // else its place holds the earlier micro-batches' sum, reduced as it is
      buffers_[static_cast<size_t>(progress.buffer)]->staging.narrow(0, range.offsets[i], range.lengths[i]).zero_();
    --progress.missing;
  }
  if (config_.fixed_order) {
    launch_ready(-1);
  } else {  // in range order, alike on every rank
    for (size_t r = 0; r < ranges_.size(); ++r)
      if (!progress_[r].launched) launch(static_cast<int>(r));
  }
  while (!in_flight_.empty()) complete_oldest();
  for (auto& buffer : buffers_) drain(*buffer);
  for (size_t r = 0; r < ranges_.size(); ++r)
    progress_[r] = Progress{static_cast<int>(ranges_[r].params.size()), -1, false};
  std::fill(added_.begin(), added_.end(), 0);
  next_launch_ = static_cast<int>(ranges_.size()) - 1;
  held_at_finish_ = held_now();
  if (!config_.keep_buffers)  // device memory back; the pinned host buffers stay (costly to allocate)
    for (auto& buffer : buffers_) buffer->staging = buffer->received = at::Tensor();
}

uint64_t GradientReducer::buffer_bytes() const { return std::max(held_now(), held_at_finish_); }

uint64_t GradientReducer::held_now() const {
  uint64_t bytes = 0;
  for (const auto& buffer : buffers_) {
    if (buffer->staging.defined() && !config_.flat_staging.defined()) bytes += buffer->staging.nbytes();
    if (buffer->received.defined()) bytes += buffer->received.nbytes();  // to_host: the host counts pinned memory
  }
  return bytes;
}

}  // namespace zhost::zero
