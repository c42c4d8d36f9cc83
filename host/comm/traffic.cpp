// host/comm/traffic.cpp: the per-rank byte formulas of traffic.hpp and counter arithmetic.
#include "host/comm/traffic.hpp"

#include <algorithm>
#include <numeric>

#include "host/core/error.hpp"

namespace zhost::comm {

const char* to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kAllToAll:
      return "all_to_all";
    case CollectiveKind::kBarrier:
      return "barrier";
  }
  return "unknown collective";
}

namespace {

uint64_t sum(const std::vector<uint64_t>& values) { return std::accumulate(values.begin(), values.end(), uint64_t{0}); }

uint64_t bytes_from_others(const std::vector<uint64_t>& per_rank, int rank) {
  ZHOST_ASSERT(rank >= 0 && static_cast<size_t>(rank) < per_rank.size());
  return sum(per_rank) - per_rank[rank];
}

// Checks `remote` against the group (Note [Inter-node traffic]): empty, or one entry per rank, mine false.
void check_remote(const RemotePeers& remote, int world_size, int rank) {
  ZHOST_ASSERT(remote.empty() || (static_cast<int>(remote.size()) == world_size && !remote[rank]));
}

uint64_t remote_count(const RemotePeers& remote) {
  return static_cast<uint64_t>(std::count(remote.begin(), remote.end(), true));
}

uint64_t bytes_from_remote(const std::vector<uint64_t>& per_rank, const RemotePeers& remote) {
  uint64_t total = 0;
  for (size_t j = 0; j < remote.size(); ++j)
    if (remote[j]) total += per_rank[j];
  return total;
}

}  // namespace

Traffic all_reduce_traffic(uint64_t bytes, int world_size, const RemotePeers& remote) {
  ZHOST_ASSERT(world_size >= 1);
  ZHOST_ASSERT(remote.empty() || static_cast<int>(remote.size()) == world_size);
  const auto w = static_cast<uint64_t>(world_size);
  const uint64_t moved = 2 * bytes * (w - 1) / w;
  const uint64_t across = 2 * bytes * remote_count(remote) / w;
  return {moved, moved, across, across};
}

Traffic reduce_scatter_traffic(const std::vector<uint64_t>& chunk_bytes, int rank, const RemotePeers& remote) {
  const auto size = static_cast<int>(chunk_bytes.size());
  check_remote(remote, size, rank);
  const uint64_t others = chunk_bytes.size() - 1;
  return {bytes_from_others(chunk_bytes, rank), others * chunk_bytes[rank], bytes_from_remote(chunk_bytes, remote),
          remote_count(remote) * chunk_bytes[rank]};
}

Traffic all_gather_traffic(const std::vector<uint64_t>& chunk_bytes, int rank, const RemotePeers& remote) {
  const Traffic mirrored = reduce_scatter_traffic(chunk_bytes, rank, remote);
  return {mirrored.received, mirrored.sent, mirrored.received_inter_node, mirrored.sent_inter_node};
}

Traffic broadcast_traffic(uint64_t bytes, int world_size, int rank, int root, const RemotePeers& remote) {
  check_remote(remote, world_size, rank);
  if (world_size == 1) return {};
  if (rank == root) return {bytes, 0, remote_count(remote) > 0 ? bytes : 0, 0};
  const bool root_remote = !remote.empty() && remote[root];
  return {0, bytes, 0, root_remote ? bytes : 0};
}

Traffic all_to_all_traffic(const std::vector<uint64_t>& send_bytes, const std::vector<uint64_t>& recv_bytes, int rank,
                           const RemotePeers& remote) {
  ZHOST_ASSERT(send_bytes.size() == recv_bytes.size());
  check_remote(remote, static_cast<int>(send_bytes.size()), rank);
  return {bytes_from_others(send_bytes, rank), bytes_from_others(recv_bytes, rank),
          bytes_from_remote(send_bytes, remote), bytes_from_remote(recv_bytes, remote)};
}

void KindCounters::add(const Traffic& traffic) {
  ++calls;
  bytes_sent += traffic.sent;
  bytes_received += traffic.received;
  bytes_sent_inter_node += traffic.sent_inter_node;
  bytes_received_inter_node += traffic.received_inter_node;
}

KindCounters& KindCounters::operator+=(const KindCounters& other) {
  calls += other.calls;
  bytes_sent += other.bytes_sent;
  bytes_received += other.bytes_received;
  bytes_sent_inter_node += other.bytes_sent_inter_node;
  bytes_received_inter_node += other.bytes_received_inter_node;
  return *this;
}

KindCounters CommCounters::total() const {
  KindCounters all;
  for (const KindCounters& kind : by_kind) all += kind;
  return all;
}

CommCounters CommCounters::operator-(const CommCounters& earlier) const {
  CommCounters diff;
  for (int k = 0; k < kCollectiveKinds; ++k) {
    const KindCounters &now = by_kind[k], &then = earlier.by_kind[k];
    KindCounters& d = diff.by_kind[k];
    d.calls = now.calls - then.calls;
    d.bytes_sent = now.bytes_sent - then.bytes_sent;
    d.bytes_received = now.bytes_received - then.bytes_received;
    d.bytes_sent_inter_node = now.bytes_sent_inter_node - then.bytes_sent_inter_node;
    d.bytes_received_inter_node = now.bytes_received_inter_node - then.bytes_received_inter_node;
  }
  return diff;
}

CommCounters& CommCounters::operator+=(const CommCounters& other) {
  for (int k = 0; k < kCollectiveKinds; ++k) by_kind[k] += other.by_kind[k];
  return *this;
}

}  // namespace zhost::comm
