// zhost/zero/gradient_reducer.hpp: the one gradient reduction of the ZeRO stages 0, 1, 2 and 3.
//
// A stage describes its reductions once, at setup, as ranges (ReductionRange): the parameters whose
// gradients one reduce-scatter sums, where each lies in the buffer sent, and how many sums each rank
// receives. Stages 0, 1 and 2 cut the flat layout (flat_ranges below, Note [Flat-range buckets]; stage 0
// stages them in place in its own flat buffer, `flat_staging`); stage 3 has one range per fetch unit, split
// equally over the ranks (its shards). The reducer then does the rest, the same way for every stage:
//   - a gradient is copied to its place in its range's staging buffer as it arrives; a gradient handed
//     twice in one micro-batch is an error, one that never arrives is an error or zeros
//     (zero.ignore_unused_parameters);
//   - a range whose gradients are all in is reduce-scattered as it lies, asynchronously; reductions stay in
//     flight while backward goes on up to a window of sent elements (0: each completes at once);
//   - this rank's sums are added into the range's target (a stage's gradient partition, a sub-group's
//     gradient, or an offload tier's fp32 accumulator). Staged (a device with memory of its own and a target
//     in host memory), they go to the host by copy while backward goes on and are added when the copy is
//     drained (at the buffer's next use or at finish());
//   - staging buffers come from a pool: a range takes one when its first gradient arrives and gives it back
//     once reduced (the pool is kept between micro-batches, or its memory given back at finish()).
// Every element is summed over the ranks in rank order whatever the ranges (Note [One summation order]), so
// the bits do not depend on the stage.
//
// Launch order: with `fixed_order` (stages 0, 1 and 2) ranges are launched in descending range order, the
// order autograd mostly delivers them in, and a complete range waits for the ranges before it: every rank
// issues the same collectives whatever order its gradients arrive in. Without it (stage 3) a range is
// launched as soon as it is complete, and the stage checks that the ranks agree (`before_launch`).
//
//   begin_micro_batch(first, boundary)   which micro-batch of the step this is
//   accumulate(p, grad)                  flat staging only: add into p's place, reduce nothing (Note [Gradients
//                                        accumulated where they are reduced])
//   add(p, grad)                         copy (or add, after accumulate) into p's range; launch what is ready
//   finish()                             launch every range left (missing gradients as zeros), complete every
//                                        reduction, drain every copy: the targets hold the micro-batch's sums
//
// Note [Flat-range buckets]: for stages 0, 1 and 2 a range is a fixed range of the flat layout: whole
// parameters, consecutive in flat order, up to reduce_bucket_size elements (a larger parameter is a range of
// its own), cut once at setup. Flat order is owner order, so a range is reduce-scattered as it lies with
// per-rank counts (its overlap with each rank's partition), and this rank's sums, one contiguous run, go to
// their place in its partition: no regrouping copy, one bucket-sized buffer per range in flight.
//
// Note [Gradients accumulated where they are reduced]: a stage that reduces once per step (stages 0 and 1) and
// takes the gradients (ZHOST_PLUGIN_FLAG_TAKES_GRADIENTS) accumulates the micro-batches at their places in its
// flat staging: accumulate() copies the first gradient of the step there and adds later ones (x + y, as autograd
// adds into .grad: the same bits), and the boundary's add() adds its own, so the flat buffer is the rank's one
// full-size copy of the gradients. At finish() a parameter that accumulated in earlier micro-batches but sent
// nothing in the boundary one (a block LayerDrop skipped) is reduced from its place, like any other.
//
// Note [Sums written in place]: a reduce-scatter's output is this rank's sums, which are added into the
// target. When the stage keeps its targets at zero at the start of every step (a gradient partition or split
// zeroed by the step, an offload tier's accumulator after its step: the stage says so with write_first_sums),
// each range's first sums of a step are received straight into it:
// no receive buffer of the range's count and no add pass (x + 0 is x, so the bits are the same; a -0.0 sum
// stays -0.0 where the add made it +0.0). Later micro-batches, a staged target (host memory, reached by copy)
// or a target of another dtype go through the buffer and the add as before.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "zhost/zero/flat_layout.hpp"
#include "zhost/zero/plugin_calls.hpp"

namespace zhost::zero {

// One reduce-scatter of gradients.
struct ReductionRange {
  std::vector<uint32_t> params;  // the parameters it sums, each whole
  std::vector<int64_t> offsets;  // offsets[i]: where params[i] starts in the buffer sent
  std::vector<int64_t> lengths;  // lengths[i]: params[i]'s elements; they lie back to back from offsets[0]
  int64_t numel = 0;             // the buffer sent; elements past the last parameter are zero padding
  std::vector<int64_t> counts;   // the sums each rank receives, in rank order (sum: numel); empty: an equal split
  int64_t target_offset = 0;     // where this rank's sums go in the range's target
  int64_t flat_offset = 0;       // flat_ranges: where it starts in the flat layout (for flat_staging)
  int32_t block = -1;            // the block the collective is about (collective_args)
  std::vector<int64_t> segment_starts;  // ZHOST_EXT_SEGMENTS on its reduce-scatter; none when empty
};

// Note [Flat-range buckets]: the ranges of stages 0, 1 and 2 for `rank`, with targets in its partition.
std::vector<ReductionRange> flat_ranges(const FlatLayout& layout, int rank, int64_t bucket_elements);

struct ReducerOptions {
  std::string owner;  // "stage2": how error messages start
  // Per parameter id, for error messages; also how many parameters there are (every id a range names).
  std::vector<std::string> param_names;
  bool fixed_order = true;               // see "Launch order" above
  int64_t in_flight_elements = 0;        // sent elements left in flight while backward goes on
  bool ignore_unused_parameters = true;  // a gradient that never arrives reduces as zeros (else: an error)
  bool local_sum_on_one_rank = true;     // one rank, unstaged: add into the target, no collective
  // Optional, with flat_ranges: the stage's own flat gradient buffer ([padded], compute dtype), which the
  // ranges are staged in at their flat places instead of pool buffers, and accumulate() adds into (stage 0
  // keeps it and gathers the reduced gradients back into it at the step; stage 1 hands a new one in with
  // set_flat_staging() each step and releases it after the boundary's finish()).
  at::Tensor flat_staging;
  // Keep the staging buffers between micro-batches, each sized to any range; else each fits its first range
  // and finish() gives their device memory back (their pinned host buffers stay).
  bool keep_buffers = true;
  // The targets are a tier's accumulator that may give its pages back after a step: prefaulted for writing
  // before the step's first add (kit::prefault_for_write).
  bool prefault_targets = false;
  // Note [Sums written in place]: the stage's targets are zero whenever a step's first micro-batch begins
  // (begin_micro_batch with first), so each range's first sums of the step, in the staging dtype, are received
  // straight into the target instead of into a buffer and added.
  bool write_first_sums = false;
  std::function<void(int range)> before_launch;  // optional: just before a range's reduce-scatter starts
  // Optional: on the step's last micro-batch, once a range's sums are in its target.
  std::function<void(int range)> finished;
};

class GradientReducer {
 public:
  // Returns the tensor range `range`'s sums are added into at its target_offset (compute dtype; host memory
  // when staged). Asked at each completion, so that a stage may create it only when needed.
  using Target = std::function<at::Tensor(int range)>;

  GradientReducer() = default;
  // `bucket_options`: device and compute dtype of the staging buffers. `copies`: staged when
  // copies.separate().
  GradientReducer(const sdk::Host& host, std::vector<ReductionRange> ranges, int rank, int world_size,
                  at::TensorOptions bucket_options, ReducerOptions options, HostCopies copies, Target target);
  ~GradientReducer();  // never leaves a reduction in flight
  GradientReducer(GradientReducer&&) = default;
  GradientReducer& operator=(GradientReducer&&) = default;

  void begin_micro_batch(bool first, bool boundary);
  void accumulate(uint32_t param, const at::Tensor& grad);
  void add(uint32_t param, const at::Tensor& grad);
  void finish();
  // The flat staging (ReducerOptions::flat_staging) for the next micro-batches; an undefined tensor releases it
  // (no accumulation may be pending then).
  void set_flat_staging(const at::Tensor& flat);
  const std::vector<ReductionRange>& ranges() const { return ranges_; }
  int64_t largest_range() const { return largest_range_; }
  // Bytes of the staging and receive buffers (communication buffers, not model state): those held now, or,
  // when more, those held at the end of the last micro-batch's reductions (the most held at once: buffers
  // are only taken during a micro-batch, and given back at its finish() unless kept).
  uint64_t buffer_bytes() const;

 private:
  uint64_t held_now() const;
  struct Buffer {
    at::Tensor staging;   // [>= its range] a range's gradients at their places; sent (a view of flat_staging)
    at::Tensor received;  // [>= its range's count here] this rank's sums of it
    int range = -1;       // the range it serves, -1 when free
    zhost_work* work = nullptr;
    // What an in-flight collective borrows (views, their DLPack descriptions, its extension), kept until
    // complete().
    at::Tensor send_view, recv_view;
    DLTensor send_dl{}, recv_dl{};
    zhost_segments_ext segments{};
    // Staged copies to a target in host memory:
    at::Tensor to_host;             // pinned host memory the copy writes
    HostCopies::Copy to_host_copy;  // in flight until drained
    int to_host_range = -1;         // whose sums it carries
    bool into_target = false;       // the collective in flight receives straight into the target
  };
  struct Progress {   // per range, this micro-batch
    int missing = 0;  // parameters not added yet
    int buffer = -1;  // its staging buffer while it fills and reduces
    bool launched = false;
  };

  bool staged() const { return copies_.separate(); }
  int64_t received_here(const ReductionRange& range) const { return range.counts[static_cast<size_t>(rank_)]; }
  int take_buffer(int range);
  at::Tensor flat_place(uint32_t param) const;
  void zero_padding(int range, Buffer& buffer);
  void launch_ready(int completed);
  void launch(int range);
  void complete_oldest();
  void add_into_target(int range, const at::Tensor& values);
  void drain(Buffer& buffer);

  sdk::Host host_{nullptr, nullptr};
  std::vector<ReductionRange> ranges_;
  int world_size_ = 1, rank_ = 0;
  at::TensorOptions options_;
  ReducerOptions config_;
  HostCopies copies_;
  Target target_;
  std::vector<uint8_t> counts_given_;  // per range: it came with counts (sent as recv_counts)
  std::vector<Progress> progress_;
  std::vector<int> range_of_;         // per parameter, -1 for one no range sums
  std::vector<int> index_in_;         // per parameter: its index in its range's params
  std::vector<uint8_t> added_;        // per parameter: its gradient is in its range's buffer this micro-batch
  std::vector<uint8_t> summed_;       // per range, with write_first_sums: sums went into its target this step
  std::vector<uint8_t> accumulated_;  // per parameter: its flat place holds this step's gradient (accumulate)
  int64_t largest_range_ = 0;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  int next_launch_ = -1;        // fixed order: the next range to launch (they go in descending order)
  std::vector<int> in_flight_;  // buffers whose reduction is launched, oldest first
  int64_t in_flight_elements_ = 0;
  uint64_t held_at_finish_ = 0;  // buffer bytes held when the last finish() completed its reductions
  bool first_ = true, boundary_ = true;
};

}  // namespace zhost::zero
