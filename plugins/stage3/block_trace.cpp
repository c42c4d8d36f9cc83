// plugins/stage3/block_trace.cpp: recording and following the block order (see
// the header).
#include "plugins/stage3/block_trace.hpp"

#include <algorithm>
#include <utility>

namespace zhost::stage3 {

BlockTrace::BlockTrace(std::vector<std::vector<int>> units_of_block, std::vector<int64_t> unit_numel)
    : units_of_block_(std::move(units_of_block)), unit_numel_(std::move(unit_numel)) {}

void BlockTrace::begin_micro_batch() {
  events_.clear();
  following_ = !trace_.empty();
}

bool BlockTrace::advance(const BlockEvent& event) {
  if (following_ && (events_.size() >= trace_.size() || trace_[events_.size()] != event)) following_ = false;
  events_.push_back(event);
  return following_;
}

bool BlockTrace::end_micro_batch() {
  const bool had_trace = !trace_.empty();
  const bool departed = !following_ || events_.size() != trace_.size();
  if (departed) trace_ = events_;
  following_ = false;
  return had_trace && departed;
}

uint64_t BlockTrace::current_hash() const {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over (direction, block) pairs
  for (const BlockEvent& e : events_) {
    const uint64_t value = (static_cast<uint64_t>(e.backward) << 32) | static_cast<uint32_t>(e.block);
    for (int byte = 0; byte < 8; ++byte) hash = (hash ^ ((value >> (8 * byte)) & 0xFF)) * 1099511628211ull;
  }
  return hash ^ events_.size();
}

bool BlockTrace::reused_within(int unit, int64_t max_distance) const {
  if (!following_) return false;
  int64_t distance = 0;
  std::vector<char> counted(unit_numel_.size(), 0);
  for (size_t i = events_.size(); i < trace_.size(); ++i) {
    const auto& units = units_of_block_[static_cast<size_t>(trace_[i].block)];
    if (std::find(units.begin(), units.end(), unit) != units.end()) return distance <= max_distance;
    for (int u : units)
      if (!counted[static_cast<size_t>(u)]) {
        counted[static_cast<size_t>(u)] = 1;
        distance += unit_numel_[static_cast<size_t>(u)];
      }
    if (distance > max_distance) return false;
  }
  return false;
}

std::vector<int> BlockTrace::upcoming_units() const {
  std::vector<int> order;
  if (!following_) return order;
  std::vector<char> seen(unit_numel_.size(), 0);
  for (size_t i = events_.size(); i < trace_.size(); ++i)
    for (int u : units_of_block_[static_cast<size_t>(trace_[i].block)])
      if (!seen[static_cast<size_t>(u)]) {
        seen[static_cast<size_t>(u)] = 1;
        order.push_back(u);
      }
  return order;
}

}  // namespace zhost::stage3
