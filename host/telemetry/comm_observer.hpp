// host/telemetry/comm_observer.hpp: what the job sees of the collectives plugins issue through the ABI
// (collectives_adapter.cpp): a trace event per collective (Note [Trace file]) and DeepSpeed's comms_logger
// figures.
//
// Note [Collective figures]
// For a collective of message size S bytes on n ranks that took t seconds from its start to its completion
// (for an asynchronous one: until the plugin's wait returned, so the time a plugin let it run in the
// background counts), as DeepSpeed's comms logger defines them:
//   message size S:  all_reduce / broadcast: the tensor; all_gather: the gathered output; reduce_scatter:
//                    the input before scattering; all_to_all: the input
//   algbw = S / t
//   busbw = algbw * 2(n-1)/n (all_reduce), * (n-1)/n (all_gather, reduce_scatter, all_to_all), * 1 (broadcast)
// The per-rank bytes "sent" and "received" are traffic.hpp's, the same that feed the step counters
// (metrics.jsonl comm_bytes_sent / comm_bytes_received): over a step the trace's sum equals them.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "host/comm/traffic.hpp"

namespace zhost::engine {

class TraceWriter;

struct CollectiveRecord {
  comm::CollectiveKind kind = comm::CollectiveKind::kBarrier;
  uint64_t message_bytes = 0;
  comm::Traffic traffic;
  int group_size = 1;
  uint64_t begin_ns = 0;
  int lane = -1;  // trace track while in flight
};

class CommObserver {
 public:
  // `trace` (may be null) outlives the observer; `log_ops`: comms_logger.verbose, one log line per op.
  CommObserver(TraceWriter* trace, bool stats, bool log_ops) : trace_(trace), stats_(stats), log_ops_(log_ops) {}
  bool active() const { return trace_ || stats_; }

  CollectiveRecord begin(comm::CollectiveKind kind, uint64_t message_bytes, comm::Traffic traffic, int group_size);
  void end(const CollectiveRecord& record);

  // comms_logger's summary: per op and message size, count, latency, algbw, busbw. As a JSON array and as
  // DeepSpeed's table.
  std::string summary_json() const;
  std::string summary_table() const;

 private:
  struct OpStats {
    uint64_t count = 0;
    double total_s = 0, algbw_sum = 0, busbw_sum = 0;  // GB/s sums, averaged in the summary
  };
  TraceWriter* trace_;
  bool stats_, log_ops_;
  mutable std::mutex mutex_;
  std::map<std::pair<int, uint64_t>, OpStats> stats_by_op_;  // (kind, message bytes)
};

// busbw / algbw for `kind` on `n` ranks (Note [Collective figures]).
double bus_factor(comm::CollectiveKind kind, int n);

}  // namespace zhost::engine
