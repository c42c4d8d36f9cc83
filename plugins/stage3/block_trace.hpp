// plugins/stage3/block_trace.hpp: the order in which a micro-batch runs its
// blocks, as ZeRO stage 3's coordinator records it in the first micro-batch and
// relies on afterwards: to prefetch the units the next blocks need, and to keep
// a unit that is needed again soon (stage3_max_reuse_distance).
//
// An event is "forward of block b" (pre_forward) or "backward of block b"
// (pre_backward). A micro-batch that departs from the recorded trace is
// followed on demand (no prefetch) and becomes the new trace; the plugin checks
// separately that every rank walked the same events (see stage3_partition.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zhost::stage3 {

struct BlockEvent {
  bool backward = false;
  int32_t block = 0;
  bool operator==(const BlockEvent& other) const { return backward == other.backward && block == other.block; }
  bool operator!=(const BlockEvent& other) const { return !(*this == other); }
};

class BlockTrace {
 public:
  // units_of_block[b]: the fetch units block b reads; unit_numel[u]: elements
  // gathered for unit u.
  BlockTrace(std::vector<std::vector<int>> units_of_block, std::vector<int64_t> unit_numel);

  // A micro-batch begins: events are matched against the recorded trace from
  // its start.
  void begin_micro_batch();
  // Records the next event; returns true while the micro-batch follows the
  // recorded trace (and a trace exists), false from the first departure on (or
  // while recording the first one).
  bool advance(const BlockEvent& event);
  // The micro-batch ended: adopts its events as the trace when there was none
  // or it departed. Returns true when an existing trace was replaced (the order
  // changed).
  bool end_micro_batch();

  bool following() const { return following_; }
  const std::vector<BlockEvent>& recorded() const { return trace_; }
  const std::vector<BlockEvent>& current() const { return events_; }
  // A hash of the current micro-batch's events, to compare across ranks.
  uint64_t current_hash() const;

  // While following: true when unit u is read by an event within the rest of
  // this micro-batch after at most `max_distance` elements of other units have
  // been read (DeepSpeed's reuse distance).
  bool reused_within(int unit, int64_t max_distance) const;
  // While following: the units the upcoming events read, in the order they are
  // first needed.
  std::vector<int> upcoming_units() const;

 private:
  std::vector<std::vector<int>> units_of_block_;
  std::vector<int64_t> unit_numel_;
  std::vector<BlockEvent> trace_;   // recorded
  std::vector<BlockEvent> events_;  // this micro-batch's so far
  bool following_ = false;
};

}  // namespace zhost::stage3
