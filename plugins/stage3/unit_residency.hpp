// plugins/stage3/unit_residency.hpp: the residency of one fetch unit's gathered storage, as a state machine
// whose transitions are checked (design: stage3_partition.hpp).
//
// clang-format off
//   Released --begin_gather--> Gathering --end_gather--> Live --release--> Released
//                                  ^                        |
//                                  +-----begin_gather-------+   (gathered again in place: the persistent
//                                                                unit after a step or a checkpoint load)
// clang-format on
//
//   Released   no storage: the unit's parameters are not materialised
//   Gathering  materialised; the all-gather of the N shards into it is in flight
//   Live       the parameters hold their full values
//
// Any other move is a bug in stage 3's bookkeeping: it throws ZHOST_ERR_INTERNAL naming the unit and both states.
#pragma once

#include <cstdint>

namespace zhost::stage3 {

enum class Residency { kReleased, kGathering, kLive };

const char* residency_name(Residency residency);  // "released", "gathering", "live"

class UnitResidency {
 public:
  UnitResidency() = default;
  explicit UnitResidency(int unit) : unit_(unit) {}

  Residency state() const { return state_; }
  bool released() const { return state_ == Residency::kReleased; }
  bool gathering() const { return state_ == Residency::kGathering; }
  bool live() const { return state_ == Residency::kLive; }

  void begin_gather();  // Released or Live -> Gathering
  void end_gather();    // Gathering -> Live
  void release();       // Live -> Released

 private:
  // Moves to `next` when the current state is `from` or `also_from`; throws otherwise.
  void move(Residency from, Residency also_from, Residency next);

  int unit_ = -1;  // for the message
  Residency state_ = Residency::kReleased;
};

}  // namespace zhost::stage3
