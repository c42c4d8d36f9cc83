// host/comm/traffic.cpp: the per-rank byte formulas of traffic.hpp and counter arithmetic.
#include "host/comm/traffic.hpp"

#include <numeric>

#include "host/core/error.hpp"

namespace zhost::comm {

const char* to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "unknown collective";
}

namespace {

uint64_t sum(const std::vector<uint64_t>& values) { return std::accumulate(values.begin(), values.end(), uint64_t{0}); }

uint64_t bytes_from_others(const std::vector<uint64_t>& per_rank, int rank) {
  ZHOST_ASSERT(rank >= 0 && static_cast<size_t>(rank) < per_rank.size());
  return sum(per_rank) - per_rank[rank];
}

}  // namespace

Traffic all_reduce_traffic(uint64_t bytes, int world_size) {
  ZHOST_ASSERT(world_size >= 1);
  const uint64_t moved = 2 * bytes * static_cast<uint64_t>(world_size - 1) / static_cast<uint64_t>(world_size);
  return {moved, moved};
}

Traffic reduce_scatter_traffic(const std::vector<uint64_t>& chunk_bytes, int rank) {
  const uint64_t others = chunk_bytes.size() - 1;
  return {bytes_from_others(chunk_bytes, rank), others * chunk_bytes[rank]};
}

Traffic all_gather_traffic(const std::vector<uint64_t>& chunk_bytes, int rank) {
  const Traffic mirrored = reduce_scatter_traffic(chunk_bytes, rank);
  return {mirrored.received, mirrored.sent};
}

Traffic broadcast_traffic(uint64_t bytes, int world_size, int rank, int root) {
  if (world_size == 1) return {};
  return rank == root ? Traffic{bytes, 0} : Traffic{0, bytes};
}

Traffic all_to_all_traffic(const std::vector<uint64_t>& send_bytes, const std::vector<uint64_t>& recv_bytes,
                           int rank) {
  return {bytes_from_others(send_bytes, rank), bytes_from_others(recv_bytes, rank)};
}

KindCounters CommCounters::total() const {
  KindCounters all;
  for (const KindCounters& kind : by_kind) {
    all.calls += kind.calls;
    all.bytes_sent += kind.bytes_sent;
    all.bytes_received += kind.bytes_received;
  }
  return all;
}

CommCounters CommCounters::operator-(const CommCounters& earlier) const {
  CommCounters diff;
  for (int k = 0; k < kCollectiveKinds; ++k) {
    diff.by_kind[k].calls = by_kind[k].calls - earlier.by_kind[k].calls;
    diff.by_kind[k].bytes_sent = by_kind[k].bytes_sent - earlier.by_kind[k].bytes_sent;
    diff.by_kind[k].bytes_received = by_kind[k].bytes_received - earlier.by_kind[k].bytes_received;
  }
  return diff;
}

}  // namespace zhost::comm
