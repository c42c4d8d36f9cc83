// zhost/zero/flat_layout.hpp: how ZeRO stages 0, 1 and 2 lay the parameters out in one flat space.
//
// The parameters, in registration order, are concatenated into a flat space of T elements, padded to
// P = N * S so that it splits into N equal partitions of S elements; rank k owns flat [k*S, (k+1)*S) (its
// fp32 master copy, optimizer state and, in stage 2, gradient). A parameter may straddle partitions.
//
//   flat:      | p0 | p1 ........ | p2 | ... | pad |
//   partition: |  rank 0  |  rank 1  | ... | rank N-1 |
#pragma once

#include <cstdint>
#include <vector>

namespace zhost::zero {

// A run of elements that belongs to one parameter: elements [param_offset, param_offset+length) of parameter
// `param` sit at flat [flat_offset, flat_offset+length).
struct Segment {
  uint32_t param;
  int64_t param_offset;
  int64_t flat_offset;
  int64_t length;
};

class FlatLayout {
 public:
  FlatLayout() = default;
  // numels[i]: elements of parameter i.
  FlatLayout(const std::vector<int64_t>& numels, int world_size);

  int world_size() const { return world_size_; }
  uint32_t num_params() const { return static_cast<uint32_t>(offsets_.size() - 1); }
  int64_t total() const { return total_; }                          // T
  int64_t partition_size() const { return partition_size_; }        // S
  int64_t padded() const { return partition_size_ * world_size_; }  // P
  int64_t param_offset(uint32_t param) const { return offsets_[param]; }
  int64_t param_numel(uint32_t param) const { return offsets_[param + 1] - offsets_[param]; }
  int owner_of(int64_t flat) const { return static_cast<int>(flat / partition_size_); }

  // The segments of parameter data inside flat [begin, end), in flat order (padding has none).
  std::vector<Segment> segments(int64_t begin, int64_t end) const;
  // Parameter `param` split at partition boundaries: one segment per owning rank, in rank order.
  std::vector<Segment> split_by_owner(uint32_t param) const;

 private:
  std::vector<int64_t> offsets_{0};  // offsets_[i]: flat start of parameter i; offsets_.back() == T
  int world_size_ = 1;
  int64_t total_ = 0;
  int64_t partition_size_ = 0;
};

}  // namespace zhost::zero
