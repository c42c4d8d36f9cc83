// plugins/stage3/unit_residency.cpp: checked residency transitions of a fetch unit (see the header).
#include "plugins/stage3/unit_residency.hpp"

#include <string>

#include "zhost/cpp/error.hpp"

namespace zhost::stage3 {

const char* residency_name(Residency residency) {
  switch (residency) {
    case Residency::kReleased:
      return "released";
    case Residency::kGathering:
      return "gathering";
    case Residency::kLive:
      return "live";
  }
  return "unknown";
}

void UnitResidency::begin_gather() { move(Residency::kReleased, Residency::kLive, Residency::kGathering); }

void UnitResidency::end_gather() { move(Residency::kGathering, Residency::kGathering, Residency::kLive); }

void UnitResidency::release() { move(Residency::kLive, Residency::kLive, Residency::kReleased); }

void UnitResidency::move(Residency from, Residency also_from, Residency next) {
  if (state_ != from && state_ != also_from)
    throw sdk::PluginError(ZHOST_ERR_INTERNAL, "stage3: fetch unit " + std::to_string(unit_) + " cannot become " +
                                                   residency_name(next) + " while " + residency_name(state_) +
                                                   " (a bug in stage 3's gather bookkeeping)");
  state_ = next;
}

}  // namespace zhost::stage3
