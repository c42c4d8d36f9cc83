// plugins/zero_common/gradient_reducer.hpp: the one bucketed gradient reduction of ZeRO stages 1 and 2.
//
// Gradients arrive in autograd's ready order (the same on every rank) and are copied into a bucket of up to
// reduce_bucket_size elements; a parameter larger than the bucket gets a bucket of its own. A full bucket is
// regrouped by owner rank (the flat layout's partition each piece falls in) and reduce-scattered with
// per-rank counts, so each rank receives the sums of its partition's elements (Note [One summation order]:
// the same bits whatever the bucket size, the stage or the rank count), and adds them into its target: a
// tensor of the partition's length. With `overlap` two buckets alternate: one reduces while backward
// fills the other. On one rank (unstaged) a full bucket is added into the target at once: no regrouping, no
// collective, the same bits.
//
// Staged (a device with memory of its own, and a target in host memory, e.g. an offload tier's
// accumulator): each bucket's received elements start for the host by copy while backward goes on, and are
// added into the target when the copy is drained (the bucket's next reduction, or finish()).
//
//   add(p, grad)  copy into the current bucket; a full bucket is launched (and, without overlap, completed)
//   finish()      launch the last bucket, complete every reduction, drain every copy: the target holds the
//                 micro-batch's sums
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
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
  // Bytes of the buckets and staging buffers (communication buffers, not model state).
  uint64_t buffer_bytes() const;

 private:
  struct Piece {        // part of a parameter's gradient inside a bucket
    int owner;          // the rank whose partition it belongs to
    int64_t staged_at;  // offset in the bucket's staging buffer
    int64_t flat_offset;
    int64_t length;
  };
  struct Bucket {
    at::Tensor staging;  // gradients in arrival order; once launched, receives this rank's reduced elements
    at::Tensor send;     // the same elements grouped by owner rank
    std::vector<Piece> pieces;
    int64_t used = 0;
    zhost_work* work = nullptr;
    // What an in-flight collective borrows (views and their DLPack descriptions), kept until complete().
    at::Tensor send_view, recv_view;
    DLTensor send_dl{}, recv_dl{};
    std::vector<int64_t> counts;
    // Staged copies to a target in host memory:
    at::Tensor reduced;                 // receives this rank's reduced elements (staging is refilled at once)
    at::Tensor to_host;                 // pinned host memory the copy writes
    HostCopies::Copy to_host_copy;      // in flight until drained
    std::vector<Piece> to_host_pieces;  // where the copied elements go in the target, in order
  };

  bool staged() const { return copies_.separate(); }
  Bucket& bucket_with_room(int64_t elements);
  void launch(Bucket& bucket);
  void complete(Bucket& bucket);
  void stage_to_host(Bucket& bucket, const at::Tensor& mine);
  void drain(Bucket& bucket);
  void add_into_target(const std::vector<Piece>& pieces, const at::Tensor& values);

  sdk::Host host_{nullptr, nullptr};
  const FlatLayout* layout_ = nullptr;
  int rank_ = 0;
  at::TensorOptions options_;
  int64_t capacity_ = 0;
  HostCopies copies_;
  Target target_;
  std::vector<Bucket> buckets_;  // 1, or 2 with overlap
  size_t current_ = 0;
};

}  // namespace zhost::zero
