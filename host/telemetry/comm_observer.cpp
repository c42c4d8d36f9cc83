// host/telemetry/comm_observer.cpp: trace events and comms_logger figures of collectives (Note [Collective
// figures]).
#include "host/telemetry/comm_observer.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "host/telemetry/trace.hpp"

namespace zhost::engine {

double bus_factor(comm::CollectiveKind kind, int n) {
  const double share = n > 0 ? static_cast<double>(n - 1) / n : 0;
  switch (kind) {
    case comm::CollectiveKind::kAllReduce:
      return 2 * share;
    case comm::CollectiveKind::kAllGather:
    case comm::CollectiveKind::kReduceScatter:
    case comm::CollectiveKind::kAllToAll:
      return share;
    case comm::CollectiveKind::kBroadcast:
      return 1;
    case comm::CollectiveKind::kBarrier:
      return 0;
  }
  return 0;
}

CollectiveRecord CommObserver::begin(comm::CollectiveKind kind, uint64_t message_bytes, comm::Traffic traffic,
                                     int group_size) {
  CollectiveRecord record{kind, message_bytes, traffic, group_size, TraceWriter::now_ns(), -1};
  if (trace_) record.lane = trace_->acquire_lane();
  return record;
}

void CommObserver::end(const CollectiveRecord& r) {
  const uint64_t end_ns = TraceWriter::now_ns();
  const double seconds = std::max<double>(static_cast<double>(end_ns - r.begin_ns), 1.0) / 1e9;
  const double algbw = static_cast<double>(r.message_bytes) / seconds / 1e9;  // GB/s
  const double busbw = algbw * bus_factor(r.kind, r.group_size);
  if (trace_) {
    trace_->complete("collective", comm::to_string(r.kind), r.begin_ns, end_ns,
                     fmt::format(R"({{"bytes": {}, "sent": {}, "received": {}, "ranks": {}, "algbw_GBps": {:.4f}, )"
                                 R"("busbw_GBps": {:.4f}}})",
                                 r.message_bytes, r.traffic.sent, r.traffic.received, r.group_size, algbw, busbw),
                     r.lane);
    trace_->release_lane(r.lane);
  }
  if (!stats_) return;
  if (log_ops_)
    spdlog::info("comm op: {} | time (ms): {:.3f} | msg size: {} | algbw (Gbps): {:.3f} | busbw (Gbps): {:.3f}",
                 comm::to_string(r.kind), seconds * 1e3, r.message_bytes, algbw * 8, busbw * 8);
  std::lock_guard<std::mutex> lock(mutex_);
  OpStats& s = stats_by_op_[{static_cast<int>(r.kind), r.message_bytes}];
  ++s.count;
  s.total_s += seconds;
  s.algbw_sum += algbw;
  s.busbw_sum += busbw;
}

std::string CommObserver::summary_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& [key, s] : stats_by_op_) {
    const double n = static_cast<double>(s.count);
    ops.push_back({{"op", comm::to_string(static_cast<comm::CollectiveKind>(key.first))},
                   {"message_bytes", key.second},
                   {"count", s.count},
                   {"total_latency_ms", s.total_s * 1e3},
                   {"avg_latency_ms", s.total_s * 1e3 / n},
                   {"algbw_avg_GBps", s.algbw_sum / n},
                   {"busbw_avg_GBps", s.busbw_sum / n}});
  }
  return ops.dump(1);
}

std::string CommObserver::summary_table() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string table = fmt::format("{:<16}{:>16}{:>8}{:>20}{:>18}{:>16}{:>18}\n", "Comm. Op", "Message Size", "Count",
                                  "Total Latency(ms)", "Avg Latency(ms)", "tput_avg (Gbps)", "busbw_avg (Gbps)");
  for (const auto& [key, s] : stats_by_op_) {
    const double n = static_cast<double>(s.count);
    table += fmt::format("{:<16}{:>16}{:>8}{:>20.3f}{:>18.3f}{:>16.3f}{:>18.3f}\n",
                         comm::to_string(static_cast<comm::CollectiveKind>(key.first)), key.second, s.count,
                         s.total_s * 1e3, s.total_s * 1e3 / n, s.algbw_sum / n * 8, s.busbw_sum / n * 8);
  }
  return table;
}

}  // namespace zhost::engine
