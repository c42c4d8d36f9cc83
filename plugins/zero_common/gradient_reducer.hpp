// plugins/zero_common/gradient_reducer.hpp: the one bucketed gradient reduction of ZeRO stages 1 and 2.
//
// Note [Flat-range buckets]: a bucket is a fixed range of the flat layout: whole parameters, consecutive in
// flat order, up to reduce_bucket_size elements (a larger parameter is a range of its own); the ranges are
// cut once, at setup. A gradient is copied to its flat place inside its range's staging buffer as it
// arrives; flat order is owner order, so a full range is reduce-scattered as it lies, with per-rank counts
// (its overlap with each rank's partition), and this rank's sums, one contiguous run, are added into its
// target: a tensor of the partition's length. Every element is summed over the ranks in rank order
// whatever the ranges (Note [One summation order]), so the bits are those of stage 0. Ranges are launched
// in one fixed order (descending flat offset, the order autograd mostly delivers them in), so every rank
// issues the same collectives whatever order its gradients arrive in; a range whose parameters are all in
// waits for the ranges before it. A parameter that received no gradient (zero.ignore_unused_parameters)
// contributes zeros. Staging buffers are kept in a small pool: a range takes one when its first gradient
// arrives and gives it back once reduced, so at most the ranges being filled and the one reducing hold one.
// With `overlap` a launched range reduces while backward fills the next; without it, each completes at
// once. On one rank (unstaged) a range is added into the target directly: no collective, the same bits.
//
// Staged (a device with memory of its own, and a target in host memory, e.g. an offload tier's
// accumulator): each range's received elements start for the host by copy while backward goes on, and are
// added into the target when the copy is drained (the buffer's next use, or finish()).
//
//   add(p, grad)  copy into p's range; a range complete in launch order is launched (and, without overlap,
//                 completed)
//   finish()      launch every range left (missing gradients as zeros), complete every reduction, drain
//                 every copy: the target holds the micro-batch's sums
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "plugins/zero_common/flat_layout.hpp"
#include "plugins/zero_common/plugin_calls.hpp"

namespace zhost::zero {

class GradientReducer {
 public:
  // Returns the tensor this rank's reduced elements are added into ([partition_size], compute dtype; host
  // memory when staged). Asked at each completion, so that a stage may create it only when needed.
  using Target = std::function<at::Tensor()>;

  GradientReducer() = default;
  // `bucket_options`: device and compute dtype of the buckets. `copies`: staged when copies.separate().
  GradientReducer(const sdk::Host& host, const FlatLayout& layout, int rank, at::TensorOptions bucket_options,
                  int64_t bucket_elements, bool overlap, HostCopies copies, Target target);
  ~GradientReducer();
  GradientReducer(GradientReducer&&) = default;
  GradientReducer& operator=(GradientReducer&&) = default;

  void add(uint32_t param, const at::Tensor& grad);
  void finish();
  int64_t bucket_elements() const { return capacity_; }
  // Bytes of the staging buffers (communication buffers, not model state).
  uint64_t buffer_bytes() const;

 private:
  struct Range {
    int64_t begin = 0, end = 0;            // flat [begin, end): whole parameters
    uint32_t first = 0, last = 0;          // its parameters, [first, last]
    int64_t mine_begin = 0, mine_end = 0;  // the part of it in this rank's partition (flat)
    std::vector<int64_t> counts;           // its elements in each rank's partition
    int missing = 0;                       // parameters not added yet this micro-batch
    int buffer = -1;                       // its staging buffer while it fills and reduces
  };
  struct Buffer {
    at::Tensor staging;   // [largest range] a range's gradients at their flat places; sent
    at::Tensor received;  // [largest share] this rank's sums of it
    int range = -1;       // the range it serves, -1 when free
    zhost_work* work = nullptr;
    // What an in-flight collective borrows (views and their DLPack descriptions), kept until complete().
    at::Tensor send_view, recv_view;
    DLTensor send_dl{}, recv_dl{};
    // Staged copies to a target in host memory:
    at::Tensor to_host;             // pinned host memory the copy writes
    HostCopies::Copy to_host_copy;  // in flight until drained
    int64_t to_host_at = 0;         // where the copied elements go in the target
    int64_t to_host_n = 0;
  };

  bool staged() const { return copies_.separate(); }
  int take_buffer(int range);
  void launch_ready();
  void launch(Range& range);
  void complete_oldest();
  void add_into_target(int64_t at, const at::Tensor& values);
  void drain(Buffer& buffer);

  sdk::Host host_{nullptr, nullptr};
  const FlatLayout* layout_ = nullptr;
  int rank_ = 0;
  at::TensorOptions options_;
  int64_t capacity_ = 0;
  bool overlap_ = false;
  HostCopies copies_;
  Target target_;
  std::vector<Range> ranges_;   // in flat order
  std::vector<int> range_of_;   // per parameter
  std::vector<uint8_t> added_;  // per parameter: its gradient is in its range's buffer this micro-batch
  int64_t largest_range_ = 0, largest_share_ = 0;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  int next_launch_ = -1;        // the next range to launch (they go in descending order)
  std::vector<int> in_flight_;  // buffers whose reduction is launched, oldest first
};

}  // namespace zhost::zero
