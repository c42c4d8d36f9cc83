// plugins/stage3/fetch_units.cpp: fetch units, shards and sub-groups (see the
// header).
#include "plugins/stage3/fetch_units.hpp"

#include <algorithm>
#include <stdexcept>

namespace zhost::stage3 {

FetchUnits::FetchUnits(const std::vector<int64_t>& numels, const std::vector<int32_t>& owner_block, int32_t num_blocks,
                       int world_size, int64_t persistence_threshold, int64_t sub_group_size)
    : unit_of_(numels.size(), -1), offset_of_(numels.size(), 0) {
  if (world_size < 1 || numels.size() != owner_block.size()) throw std::invalid_argument("FetchUnits: bad arguments");
  std::vector<int> unit_of_block(static_cast<size_t>(num_blocks), -1);
  FetchUnit persistent;
  persistent.persistent = true;
  auto place = [&](FetchUnit& unit, int index, uint32_t id) {
    unit.params.push_back(id);
    unit.offsets.push_back(unit.numel);
    unit_of_[id] = index;
    offset_of_[id] = unit.numel;
    unit.numel += numels[id];
  };
  // Units in block order: the order in which forward first needs them.
  std::vector<std::vector<uint32_t>> owned(static_cast<size_t>(num_blocks));
  std::vector<uint32_t> persistent_ids;
  for (uint32_t id = 0; id < numels.size(); ++id) {
    if (owner_block[id] < 0 || owner_block[id] >= num_blocks) throw std::invalid_argument("FetchUnits: bad block");
    (numels[id] <= persistence_threshold ? persistent_ids : owned[static_cast<size_t>(owner_block[id])]).push_back(id);
  }
  for (int32_t b = 0; b < num_blocks; ++b) {
    if (owned[static_cast<size_t>(b)].empty()) continue;
    FetchUnit unit;
    unit.block = b;
    const int index = static_cast<int>(units_.size());
    for (uint32_t id : owned[static_cast<size_t>(b)]) place(unit, index, id);
    units_.push_back(std::move(unit));
  }
  if (!persistent_ids.empty()) {
    persistent_unit_ = static_cast<int>(units_.size());
    for (uint32_t id : persistent_ids) place(persistent, persistent_unit_, id);
    units_.push_back(std::move(persistent));
  }
  for (FetchUnit& unit : units_) {
    unit.world_size = world_size;
    unit.shard = std::max<int64_t>(1, (unit.numel + world_size - 1) / world_size);
    for (int64_t start : unit.offsets)
      if (start < unit.padded() && (unit.segment_starts.empty() || start > unit.segment_starts.back()))
        unit.segment_starts.push_back(start);
  }
  // Sub-groups: consecutive units while their shards fit in sub_group_size.
  for (size_t u = 0; u < units_.size(); ++u) {
    FetchUnit& unit = units_[u];
    if (sub_groups_.empty() || sub_groups_.back().numel + unit.shard > sub_group_size) sub_groups_.emplace_back();
    SubGroup& group = sub_groups_.back();
    unit.sub_group = static_cast<int>(sub_groups_.size()) - 1;
    unit.sub_group_offset = group.numel;
    group.units.push_back(static_cast<int>(u));
    group.numel += unit.shard;
  }
}

std::vector<int> FetchUnits::units_read(const std::vector<uint32_t>& block_params) const {
  std::vector<int> units;
  for (uint32_t id : block_params) units.push_back(unit_of_.at(id));
  std::sort(units.begin(), units.end());
  units.erase(std::unique(units.begin(), units.end()), units.end());
  return units;
}

int64_t FetchUnits::shard_elements() const {
  int64_t total = 0;
  for (const FetchUnit& unit : units_) total += unit.shard;
  return total;
}

int64_t FetchUnits::largest_shard() const {
  int64_t largest = 0;
  for (const FetchUnit& unit : units_) largest = std::max(largest, unit.shard);
  return largest;
}

}  // namespace zhost::stage3
