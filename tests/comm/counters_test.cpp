// tests/comm/counters_test.cpp: the byte counters follow the formulas documented in host/comm/traffic.hpp,
// written out here by hand, per kind and per step; ZeRO's volumes come out as 2Ψ(w-1)/w and 3Ψ(w-1)/w.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "tests/comm/multi_rank.hpp"

namespace zhost::comm::testing {
namespace {

void check_kind(const CommCounters& counters, CollectiveKind kind, uint64_t calls, uint64_t sent, uint64_t received) {
  const KindCounters& got = counters[kind];
  SCENARIO_CHECK(got.calls == calls && got.bytes_sent == sent && got.bytes_received == received,
                 "{}: calls {} sent {} received {}, expected {} {} {}", to_string(kind), got.calls, got.bytes_sent,
                 got.bytes_received, calls, sent, received);
}

const bool counters_registered = register_scenario("counters", [](RankContext& ctx) {
  const uint64_t w = ctx.world_size, r = ctx.rank, f = sizeof(float);
  const std::vector<int64_t> counts = ctx.world_size == 2 ? std::vector<int64_t>{5, 2} : std::vector<int64_t>{5, 2, 4};
  const uint64_t total = ctx.world_size == 2 ? 7 : 11, mine = counts[r];

  ctx.comm.begin_step(1);
  ctx.comm.all_reduce(at::ones({10}));
  at::Tensor shard = at::empty({3});
  ctx.comm.reduce_scatter(at::ones({3 * ctx.world_size}), shard);
  at::Tensor shard_v = at::empty({counts[r]});
  ctx.comm.reduce_scatter_v(at::ones({static_cast<int64_t>(total)}), shard_v, counts);
  ctx.comm.all_gather(at::ones({3}), at::empty({3 * ctx.world_size}));
  ctx.comm.all_gather_v(at::ones({counts[r]}), at::empty({static_cast<int64_t>(total)}), counts);
  ctx.comm.broadcast(at::ones({5}), 0);
  std::vector<int64_t> send_counts(ctx.world_size), recv_counts(ctx.world_size);
  for (int peer = 0; peer < ctx.world_size; ++peer) {
    send_counts[peer] = 1 + peer + 2 * ctx.rank;
    recv_counts[peer] = 1 + ctx.rank + 2 * peer;
  }
  at::Tensor a2a_out = at::empty({std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0})});
  ctx.comm.all_to_all(at::ones({std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0})}), a2a_out,
                      send_counts, recv_counts);
  ctx.comm.barrier();
  const CommCounters step = ctx.comm.end_step();

  check_kind(step, CollectiveKind::kAllReduce, 1, 2 * 10 * f * (w - 1) / w, 2 * 10 * f * (w - 1) / w);
  check_kind(step, CollectiveKind::kReduceScatter, 2, (w - 1) * 3 * f + (total - mine) * f,
             (w - 1) * 3 * f + (w - 1) * mine * f);
  check_kind(step, CollectiveKind::kAllGather, 2, (w - 1) * 3 * f + (w - 1) * mine * f,
             (w - 1) * 3 * f + (total - mine) * f);
  check_kind(step, CollectiveKind::kBroadcast, 1, r == 0 ? 5 * f : 0, r == 0 ? 0 : 5 * f);
  uint64_t a2a_sent = 0, a2a_received = 0;
  for (int peer = 0; peer < ctx.world_size; ++peer) {
    if (peer == ctx.rank) continue;
    a2a_sent += send_counts[peer] * f;
    a2a_received += recv_counts[peer] * f;
  }
  check_kind(step, CollectiveKind::kAllToAll, 1, a2a_sent, a2a_received);
  check_kind(step, CollectiveKind::kBarrier, 1, 0, 0);
  const CommCounters since_start = ctx.comm.counters();
  SCENARIO_CHECK(since_start.total().bytes_sent == step.total().bytes_sent, "cumulative = the only step");

  // ZeRO volumes per rank for Ψ bytes of parameters (Ψ a multiple of w): 2Ψ(w-1)/w for plain data
  // parallelism and stages 1-2, 3Ψ(w-1)/w for stage 3.
  const int64_t numel = 12 * ctx.world_size;
  const uint64_t psi = numel * f;
  ctx.comm.begin_step(2);
  ctx.comm.all_reduce(at::ones({numel}));
  SCENARIO_CHECK(ctx.comm.step_counters().total().bytes_sent == 2 * psi * (w - 1) / w, "stage 0");
  ctx.comm.begin_step(3);
  at::Tensor partition = at::empty({12});
  ctx.comm.reduce_scatter(at::ones({numel}), partition);
  ctx.comm.all_gather(partition, at::empty({numel}));
  SCENARIO_CHECK(ctx.comm.step_counters().total().bytes_sent == 2 * psi * (w - 1) / w, "stage 1-2");
  ctx.comm.begin_step(4);
  ctx.comm.all_gather(partition, at::empty({numel}));
  ctx.comm.all_gather(partition, at::empty({numel}));
  ctx.comm.reduce_scatter(at::ones({numel}), partition);
  const KindCounters stage3 = ctx.comm.end_step().total();
  SCENARIO_CHECK(stage3.bytes_sent == 3 * psi * (w - 1) / w && stage3.bytes_received == stage3.bytes_sent, "stage 3");
  SCENARIO_CHECK(ctx.comm.current_step() == -1, "outside a step after end_step");
});

class CountersTest : public ::testing::TestWithParam<int> {};

TEST_P(CountersTest, BytesFollowTheDocumentedFormulas) {
  const ScenarioRun run = run_scenario("counters", GetParam());
  EXPECT_EQ(run.result.exit_code, 0) << run.all_output();
}

INSTANTIATE_TEST_SUITE_P(Ranks, CountersTest, ::testing::Values(2, 3), ::testing::PrintToStringParamName());

TEST(TrafficTest, FormulasOfTheHeader) {
  EXPECT_EQ(all_reduce_traffic(100, 4).sent, 150u);
  EXPECT_EQ(reduce_scatter_traffic({10, 20, 30}, 1).sent, 40u);
  EXPECT_EQ(reduce_scatter_traffic({10, 20, 30}, 1).received, 40u);
  EXPECT_EQ(all_gather_traffic({10, 20, 30}, 0).sent, 20u);
  EXPECT_EQ(all_gather_traffic({10, 20, 30}, 0).received, 50u);
  EXPECT_EQ(broadcast_traffic(8, 2, 1, 0).received, 8u);
  EXPECT_EQ(broadcast_traffic(8, 1, 0, 0).sent, 0u);
  EXPECT_EQ(all_to_all_traffic({1, 2, 3}, {4, 5, 6}, 2).sent, 3u);
}

// Note [Inter-node traffic], written out by hand. Layout 2x2: ranks 0, 1 on one node, 2, 3 on the other.
RemotePeers remote_on_2x2(int rank) {
  RemotePeers remote(4);
  for (int peer = 0; peer < 4; ++peer) remote[peer] = (peer / 2) != (rank / 2);
  return remote;
}

TEST(TrafficTest, WithoutRemotePeersNothingIsInterNode) {
  for (const Traffic& t :
       {all_reduce_traffic(100, 4), reduce_scatter_traffic({10, 20, 30}, 1), all_gather_traffic({10, 20, 30}, 0),
        broadcast_traffic(8, 2, 0, 0), all_to_all_traffic({1, 2, 3}, {4, 5, 6}, 2),
        all_reduce_traffic(100, 4, RemotePeers(4, false))}) {
    EXPECT_EQ(t.sent_inter_node, 0u);
    EXPECT_EQ(t.received_inter_node, 0u);
  }
}

TEST(TrafficTest, AllGatherAndReduceScatterCountRemoteChunks) {
  // Uneven chunks on 2x2; rank 1: remote peers 2 and 3.
  const std::vector<uint64_t> chunks{10, 20, 30, 40};
  const Traffic gather = all_gather_traffic(chunks, 1, remote_on_2x2(1));
  EXPECT_EQ(gather.sent, 3 * 20u);
  EXPECT_EQ(gather.sent_inter_node, 2 * 20u);  // my chunk to ranks 2 and 3
  EXPECT_EQ(gather.received, 10u + 30 + 40);
  EXPECT_EQ(gather.received_inter_node, 30u + 40);  // the chunks of ranks 2 and 3
  const Traffic reduce = reduce_scatter_traffic(chunks, 1, remote_on_2x2(1));
  EXPECT_EQ(reduce.sent, 10u + 30 + 40);
  EXPECT_EQ(reduce.sent_inter_node, 30u + 40);  // the pieces of rank 2's and 3's shards
  EXPECT_EQ(reduce.received, 3 * 20u);
  EXPECT_EQ(reduce.received_inter_node, 2 * 20u);
  // Rank 3: remote peers 0 and 1.
  const Traffic gather3 = all_gather_traffic(chunks, 3, remote_on_2x2(3));
  EXPECT_EQ(gather3.sent_inter_node, 2 * 40u);
  EXPECT_EQ(gather3.received_inter_node, 10u + 20);
  // Every peer remote (4 nodes of one rank): inter-node = total.
  const RemotePeers all_remote{true, false, true, true};
  const Traffic spread = all_gather_traffic(chunks, 1, all_remote);
  EXPECT_EQ(spread.sent_inter_node, spread.sent);
  EXPECT_EQ(spread.received_inter_node, spread.received);
}

TEST(TrafficTest, AllReduceIsTwoNOverWPerRemotePeer) {
  // 2x2, N = 100: 2N/w = 50 per peer each way; 3 peers: 150 in all, 2 remote: 100.
  const Traffic t = all_reduce_traffic(100, 4, remote_on_2x2(0));
  EXPECT_EQ(t.sent, 150u);
  EXPECT_EQ(t.sent_inter_node, 100u);
  EXPECT_EQ(t.received_inter_node, 100u);
  // The floor: w = 3, N = 10, one remote peer: floor(20/3) = 6 of floor(40/3) = 13; never above the total,
  // and the total when every peer is remote.
  const Traffic three = all_reduce_traffic(10, 3, {false, true, false});
  EXPECT_EQ(three.sent, 13u);
  EXPECT_EQ(three.sent_inter_node, 6u);
  for (uint64_t bytes : {1u, 7u, 10u, 4097u}) {
    for (int w = 2; w <= 5; ++w) {
      RemotePeers all(static_cast<size_t>(w), true);
      all[0] = false;
      const Traffic t_all = all_reduce_traffic(bytes, w, all);
      EXPECT_EQ(t_all.sent_inter_node, t_all.sent) << bytes << " bytes, " << w << " ranks";
      RemotePeers one(static_cast<size_t>(w), false);
      one[1] = true;
      EXPECT_LE(all_reduce_traffic(bytes, w, one).sent_inter_node, t_all.sent);
    }
  }
}

TEST(TrafficTest, BroadcastCrossesOnceWhenTheRootIsRemote) {
  // 2x2, root 0: rank 1 shares its node (nothing across), ranks 2 and 3 receive N across; the root sends
  // N, across since peers are remote.
  EXPECT_EQ(broadcast_traffic(8, 4, 1, 0, remote_on_2x2(1)).received_inter_node, 0u);
  EXPECT_EQ(broadcast_traffic(8, 4, 2, 0, remote_on_2x2(2)).received_inter_node, 8u);
  const Traffic root = broadcast_traffic(8, 4, 0, 0, remote_on_2x2(0));
  EXPECT_EQ(root.sent, 8u);
  EXPECT_EQ(root.sent_inter_node, 8u);
  EXPECT_EQ(root.received_inter_node, 0u);
  // A root whose peers all share its node sends nothing across.
  EXPECT_EQ(broadcast_traffic(8, 2, 0, 0, {false, false}).sent_inter_node, 0u);
}

TEST(TrafficTest, AllToAllCountsRemotePeersExactly) {
  const Traffic t = all_to_all_traffic({1, 2, 3, 4}, {5, 6, 7, 8}, 2, remote_on_2x2(2));
  EXPECT_EQ(t.sent, 1u + 2 + 4);
  EXPECT_EQ(t.sent_inter_node, 1u + 2);
  EXPECT_EQ(t.received, 5u + 6 + 8);
  EXPECT_EQ(t.received_inter_node, 5u + 6);
}

TEST(TrafficTest, CountersAddAndSubtractTheInterNodeParts) {
  CommCounters a;
  a[CollectiveKind::kAllGather].add(all_gather_traffic({10, 20, 30, 40}, 1, remote_on_2x2(1)));
  a[CollectiveKind::kAllReduce].add(all_reduce_traffic(100, 4, remote_on_2x2(1)));
  const KindCounters total = a.total();
  EXPECT_EQ(total.calls, 2u);
  EXPECT_EQ(total.bytes_sent, 60u + 150);
  EXPECT_EQ(total.bytes_sent_inter_node, 40u + 100);
  EXPECT_EQ(total.bytes_received_inter_node, 70u + 100);
  CommCounters b = a;
  b += a;
  const CommCounters diff = b - a;
  EXPECT_EQ(diff.total().bytes_sent_inter_node, total.bytes_sent_inter_node);
  EXPECT_EQ(diff.total().bytes_received_inter_node, total.bytes_received_inter_node);
  EXPECT_EQ(diff.total().calls, 2u);
}

}  // namespace
}  // namespace zhost::comm::testing
