// plugins/stage3/fetch_units.hpp: how ZeRO stage 3 groups and partitions the
// parameters.
//
// A fetch unit is what one all-gather materialises: the parameters a block
// owns, flattened in registration order into U elements and padded to N * S (S
// = ceil(U / N)), so that rank k keeps the shard [k*S, (k+1)*S) of the unit and
// the all-gather of N shards lands, contiguous, in the storage the unit's
// parameters view (no copy after the gather). Every parameter is thus spread
// over the ranks with the rest of its block: each rank holds 1/N of every
// block's parameters, the last rank the padding.
//
// clang-format off
//   unit b (block b):  | p3 | p4 ....... | p5 | pad |   (U elements, padded to N*S)
//   shards:            | rank 0 | rank 1 | ... | N-1 |
// clang-format on
//
// Parameters of at most persistence_threshold elements (norm weights, biases)
// go to one extra unit, the persistent one, gathered after every step and never
// released (DeepSpeed's stage3_param_persistence_threshold): fetching them per
// block would cost more in latency than they save in memory. Their optimizer
// states are partitioned like the rest.
//
// Sub-groups (DeepSpeed's sub_group_size): consecutive units whose shards
// together stay within sub_group_size elements share one fp32 master, gradient
// and optimizer-state buffer, and the optimizer steps one sub-group at a time;
// it is also the unit an offload tier moves. A unit larger than sub_group_size
// is a sub-group of its own; so, with sub_group_size = 0, is every unit (DeepSpeed
// reads 0 the same way: each parameter closes its sub-group).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "zhost/host.h"

namespace zhost::stage3 {

struct FetchUnit {
  std::vector<uint32_t> params;                          // parameter ids, registration order
  std::vector<int64_t> offsets;                          // offsets[i]: where params[i] starts in the unit's flat space
  int64_t numel = 0;                                     // U: elements of its parameters
  int64_t shard = 0;                                     // S: elements per rank
  int64_t padded() const { return shard * world_size; }  // N * S: the gathered storage
  int world_size = 1;
  bool persistent = false;
  int32_t block = -1;  // the owning block (-1 for the persistent unit)
  int sub_group = 0;
  int64_t sub_group_offset = 0;  // where this unit's shard starts in its sub-group's buffers

  // Where its non-empty parameters start in its gathered storage, ascending from 0: the tensors that
  // ZHOST_EXT_SEGMENTS names on its gathers and reductions, so that a quantizing transform keeps blocks within
  // one parameter.
  std::vector<int64_t> segment_starts;
  // That extension, pointing into segment_starts: the caller keeps it until the collective completes.
  zhost_segments_ext segments() const {
    return {{sizeof(zhost_segments_ext), ZHOST_EXT_SEGMENTS, nullptr}, segment_starts.data(), segment_starts.size()};
  }
};

struct SubGroup {
  std::vector<int> units;
  int64_t numel = 0;  // sum of the units' shards
};

class FetchUnits {
 public:
  FetchUnits() = default;
  // numels[i], owner_block[i]: elements and owning block of parameter i;
  // `num_blocks` blocks.
  FetchUnits(const std::vector<int64_t>& numels, const std::vector<int32_t>& owner_block, int32_t num_blocks,
             int world_size, int64_t persistence_threshold, int64_t sub_group_size);

  const std::vector<FetchUnit>& units() const { return units_; }
  const std::vector<SubGroup>& sub_groups() const { return sub_groups_; }
  int unit_of(uint32_t param) const { return unit_of_[param]; }
  int64_t offset_of(uint32_t param) const { return offset_of_[param]; }  // in its unit's flat space
  // Units block b reads, ascending (its own, the persistent one, and tied
  // parameters' owners). `block_params` lists the parameter ids block b reads.
  std::vector<int> units_read(const std::vector<uint32_t>& block_params) const;
  int persistent_unit() const { return persistent_unit_; }  // -1 when no parameter is persistent
  int64_t shard_elements() const;                           // sum of S over units: this rank's share
  int64_t largest_shard() const;                            // max of S over units

 private:
  std::vector<FetchUnit> units_;
  std::vector<SubGroup> sub_groups_;
  std::vector<int> unit_of_;
  std::vector<int64_t> offset_of_;
  int persistent_unit_ = -1;
};

// Calls visit(param, param_offset, shard_offset, length) for each run of rank `rank`'s shard of `unit` that
// belongs to one parameter: elements [param_offset, param_offset + length) of parameter `param` are elements
// [shard_offset, shard_offset + length) of the shard. `numels`: elements per parameter id. Padding is skipped.
template <typename Visit>
void for_each_shard_run(const FetchUnit& unit, int rank, const std::vector<int64_t>& numels, Visit&& visit) {
  const int64_t begin = rank * unit.shard, end = begin + unit.shard;
  for (size_t i = 0; i < unit.params.size(); ++i) {
    const int64_t p_begin = unit.offsets[i], p_end = p_begin + numels[unit.params[i]];
    const int64_t lo = std::max(begin, p_begin), hi = std::min(end, p_end);
    if (lo < hi) visit(unit.params[i], lo - p_begin, lo - begin, hi - lo);
  }
}

}  // namespace zhost::stage3
