// sdk/zero/src/flat_layout.cpp: flat-space arithmetic of ZeRO stages 0, 1 and 2 (see the header).
#include "zhost/zero/flat_layout.hpp"

#include <algorithm>
#include <stdexcept>

namespace zhost::zero {

FlatLayout::FlatLayout(const std::vector<int64_t>& numels, int world_size) : world_size_(world_size) {
  if (world_size < 1) throw std::invalid_argument("FlatLayout: world size must be >= 1");
  for (int64_t n : numels) offsets_.push_back(offsets_.back() + n);
  total_ = offsets_.back();
  partition_size_ = std::max<int64_t>(1, (total_ + world_size - 1) / world_size);
}

std::vector<Segment> FlatLayout::segments(int64_t begin, int64_t end) const {
  std::vector<Segment> out;
  end = std::min(end, total_);
  if (begin >= end) return out;
  // The parameter holding `begin`: the last one starting at or before it.
  auto it = std::upper_bound(offsets_.begin(), offsets_.end() - 1, begin);
  auto param = static_cast<uint32_t>(it - offsets_.begin() - 1);
  for (int64_t flat = begin; flat < end; ++param) {
    const int64_t stop = std::min(end, offsets_[param + 1]);
    if (stop > flat) out.push_back(Segment{param, flat - offsets_[param], flat, stop - flat});
    flat = std::max(flat, stop);
  }
  return out;
}

std::vector<Segment> FlatLayout::split_by_owner(uint32_t param) const {
  std::vector<Segment> out;
  for (int64_t flat = offsets_[param]; flat < offsets_[param + 1];) {
    const int64_t stop = std::min(offsets_[param + 1], (owner_of(flat) + 1) * partition_size_);
    out.push_back(Segment{param, flat - offsets_[param], flat, stop - flat});
    flat = stop;
  }
  return out;
}

}  // namespace zhost::zero
