// host/comm/traffic.hpp: how many bytes each collective moves in and out of one rank, and the counters
// that add them up per collective kind (for telemetry and for the ZeRO communication-volume tests).
//
// Definition (independent of the algorithm the backend happens to run): the bytes a bandwidth-optimal
// algorithm must send from and deliver to this rank, leaving out data that stays on the rank. With w
// ranks, chunk sizes c_j (bytes) and c_me this rank's chunk:
//   reduce_scatter(_v): sent = sum(c_j) - c_me     received = (w-1) * c_me
//   all_gather(_v):     sent = (w-1) * c_me         received = sum(c_j) - c_me
//   all_reduce (N bytes, = reduce-scatter + all-gather): sent = received = floor(2 * N * (w-1) / w)
//   broadcast (N bytes): the root sends N, every other rank receives N (nothing in a group of one)
//   all_to_all:         sent = bytes sent to other ranks, received = bytes received from other ranks
//   barrier:            0
// So for Ψ bytes of parameters, plain data parallelism (all_reduce) and ZeRO stages 1-2 (reduce_scatter +
// all_gather) both move 2Ψ(w-1)/w per rank, and stage 3 (two all_gathers + a reduce_scatter) 3Ψ(w-1)/w:
// the 2Ψ and 3Ψ of the ZeRO paper with its (w-1)/w factor kept exact.
//
// Note [Inter-node traffic]
// The inter-node part (sent_inter_node, received_inter_node) is the share of those bytes exchanged with
// peers on another node (Comm::node_of_rank), by the same per-peer accounting. `remote[j]` says whether
// group rank j is on another node than this rank (never this rank itself); r = the number of remote peers:
//   reduce_scatter(_v): sent = sum(c_j, j remote)   received = r * c_me
//   all_gather(_v):     sent = r * c_me             received = sum(c_j, j remote)
//   all_reduce:         sent = received = floor(2 * N * r / w): the reduce-scatter and all-gather of
//                       equal N/w chunks exchange 2N/w with each peer each way; with r = w-1 it is the
//                       total, and it never exceeds it
//   broadcast:          a non-root receives N when the root is remote; the root sends N when any peer is
//                       remote (it sends the message off its node once: a bandwidth-optimal broadcast
//                       relays it within each node)
//   all_to_all:         the bytes sent to / received from remote peers, exactly
//   barrier:            0
// On a 2x2 layout (nodes {0,1} and {2,3}) an all-gather of equal chunks c receives 3c, 2c of them across
// nodes. Without `remote` (or with no remote peer) the inter-node part is 0.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace zhost::comm {

enum class CollectiveKind : int { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kAllToAll, kBarrier };
inline constexpr int kCollectiveKinds = 6;

// "all_reduce", "reduce_scatter", ...
const char* to_string(CollectiveKind kind);

// This rank's bytes for one collective; the inter-node parts are included in sent and received.
struct Traffic {
  uint64_t sent = 0;
  uint64_t received = 0;
  uint64_t sent_inter_node = 0;
  uint64_t received_inter_node = 0;
};

// `remote`: by group rank, whether that rank is on another node than this one (Note [Inter-node traffic]);
// empty: none is. Otherwise it has one entry per rank of the group, and remote[rank] is false.
using RemotePeers = std::vector<bool>;

Traffic all_reduce_traffic(uint64_t bytes, int world_size, const RemotePeers& remote = {});
// chunk_bytes[j]: the bytes of rank j's chunk (its output shard for reduce_scatter, its input for all_gather).
Traffic reduce_scatter_traffic(const std::vector<uint64_t>& chunk_bytes, int rank, const RemotePeers& remote = {});
Traffic all_gather_traffic(const std::vector<uint64_t>& chunk_bytes, int rank, const RemotePeers& remote = {});
Traffic broadcast_traffic(uint64_t bytes, int world_size, int rank, int root, const RemotePeers& remote = {});
// send_bytes[j] / recv_bytes[j]: what this rank sends to / receives from rank j.
Traffic all_to_all_traffic(const std::vector<uint64_t>& send_bytes, const std::vector<uint64_t>& recv_bytes, int rank,
                           const RemotePeers& remote = {});

// Sums of Traffic per collective kind; the inter-node fields follow Note [Inter-node traffic].
struct KindCounters {
  uint64_t calls = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t bytes_sent_inter_node = 0;
  uint64_t bytes_received_inter_node = 0;

  void add(const Traffic& traffic);
  KindCounters& operator+=(const KindCounters& other);
};

// A snapshot of a group's counters; subtract two snapshots to get what happened in between.
struct CommCounters {
  std::array<KindCounters, kCollectiveKinds> by_kind{};

  const KindCounters& operator[](CollectiveKind kind) const { return by_kind[static_cast<int>(kind)]; }
  KindCounters& operator[](CollectiveKind kind) { return by_kind[static_cast<int>(kind)]; }
  KindCounters total() const;
  CommCounters operator-(const CommCounters& earlier) const;
  CommCounters& operator+=(const CommCounters& other);
};

}  // namespace zhost::comm
