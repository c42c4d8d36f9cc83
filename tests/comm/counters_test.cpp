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
  // One launcher, one node: nothing crosses nodes.
  SCENARIO_CHECK(ctx.comm.num_nodes() == 1 && ctx.comm.node_of_rank() == std::vector<int>(w, 0), "one node");
  SCENARIO_CHECK(step.total().bytes_sent_inter_node == 0 && step.total().bytes_received_inter_node == 0,
                 "inter-node bytes on one node");

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

// Four ranks on two simulated nodes (ranks 0, 1 and 2, 3): the layout every rank sees, and the inter-node
// bytes of each kind by Note [Inter-node traffic], written out by hand; a sub-group's collectives count in
// the job's step counters, also after the sub-group is gone.
const bool nodes_registered = register_scenario("nodes_2x2", [](RankContext& ctx) {
  const int r = ctx.rank;
  const uint64_t f = sizeof(float);
  SCENARIO_CHECK(ctx.comm.num_nodes() == 2, "num_nodes {}", ctx.comm.num_nodes());
  SCENARIO_CHECK(ctx.comm.node_of_rank() == (std::vector<int>{0, 0, 1, 1}), "node_of_rank {}",
                 fmt::join(ctx.comm.node_of_rank(), ","));
  const RemotePeers expected_remote{r >= 2, r >= 2, r < 2, r < 2};
  SCENARIO_CHECK(ctx.comm.remote_peers() == expected_remote, "remote_peers of the world");

  const std::vector<int64_t> counts{5, 2, 4, 3};  // uneven
  const uint64_t total = 14, mine = counts[r], remote_elements = r < 2 ? 4 + 3 : 5 + 2;
  ctx.comm.begin_step(1);
  ctx.comm.all_reduce(at::ones({10}));
  at::Tensor shard_v = at::empty({counts[r]});
  ctx.comm.reduce_scatter_v(at::ones({static_cast<int64_t>(total)}), shard_v, counts);
  ctx.comm.all_gather_v(at::ones({counts[r]}), at::empty({static_cast<int64_t>(total)}), counts);
  ctx.comm.broadcast(at::ones({5}), 1);
  std::vector<int64_t> send_counts(4), recv_counts(4);
  for (int peer = 0; peer < 4; ++peer) {
    send_counts[peer] = 1 + peer + 2 * r;
    recv_counts[peer] = 1 + r + 2 * peer;
  }
  ctx.comm.all_to_all(at::ones({std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0})}),
                      at::empty({std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0})}), send_counts,
                      recv_counts);
  const CommCounters world = ctx.comm.step_counters();
  auto check_inter = [&](CollectiveKind kind, uint64_t sent, uint64_t received) {
    const KindCounters& got = world[kind];
    SCENARIO_CHECK(got.bytes_sent_inter_node == sent && got.bytes_received_inter_node == received,
                   "{}: inter-node sent {} received {}, expected {} {}", to_string(kind), got.bytes_sent_inter_node,
                   got.bytes_received_inter_node, sent, received);
  };
  check_inter(CollectiveKind::kAllReduce, 2 * 10 * f * 2 / 4, 2 * 10 * f * 2 / 4);
  check_inter(CollectiveKind::kReduceScatter, remote_elements * f, 2 * mine * f);
  check_inter(CollectiveKind::kAllGather, 2 * mine * f, remote_elements * f);
  check_inter(CollectiveKind::kBroadcast, r == 1 ? 5 * f : 0, r >= 2 ? 5 * f : 0);
  uint64_t a2a_sent = 0, a2a_received = 0;
  for (int peer = 0; peer < 4; ++peer) {
    if (!expected_remote[peer]) continue;
    a2a_sent += send_counts[peer] * f;
    a2a_received += recv_counts[peer] * f;
  }
  check_inter(CollectiveKind::kAllToAll, a2a_sent, a2a_received);

  {
    // Ranks 0, 2 and 1, 3: a sub-group across the nodes; its peer is remote.
    std::unique_ptr<Comm> pair = ctx.comm.new_group(r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3});
    SCENARIO_CHECK(&pair->node_of_rank() == &ctx.comm.node_of_rank(), "one layout for every group");
    SCENARIO_CHECK(pair->num_nodes() == 2, "num_nodes of the pair");
    SCENARIO_CHECK(pair->remote_peers() == (RemotePeers{pair->rank() == 1, pair->rank() == 0}), "pair's remote peers");
    pair->all_gather(at::ones({6}), at::empty({12}));
    const KindCounters in_pair = pair->step_counters().total();
    SCENARIO_CHECK(in_pair.bytes_sent == 6 * f && in_pair.bytes_sent_inter_node == 6 * f, "the pair's all-gather");
  }
  const KindCounters job = ctx.comm.end_step().total();
  const KindCounters world_total = world.total();
  SCENARIO_CHECK(job.calls == world_total.calls + 1 && job.bytes_sent == world_total.bytes_sent + 6 * f &&
                     job.bytes_received == world_total.bytes_received + 6 * f &&
                     job.bytes_sent_inter_node == world_total.bytes_sent_inter_node + 6 * f &&
                     job.bytes_received_inter_node == world_total.bytes_received_inter_node + 6 * f,
                 "the step's job-wide counters hold the world's and the destroyed pair's: calls {} sent {} inter {}",
                 job.calls, job.bytes_sent, job.bytes_sent_inter_node);
  SCENARIO_CHECK(ctx.comm.job_counters().total().bytes_sent == job.bytes_sent, "job-wide since creation");
  SCENARIO_CHECK(ctx.comm.counters().total().bytes_sent == world_total.bytes_sent, "the world's own");
});

// Node strings in any order: nodes are numbered by their smallest rank.
const bool interleaved_registered = register_scenario("nodes_interleaved", [](RankContext& ctx) {
  SCENARIO_CHECK(ctx.comm.node_of_rank() == (std::vector<int>{0, 1, 0}), "node_of_rank {}",
                 fmt::join(ctx.comm.node_of_rank(), ","));
  SCENARIO_CHECK(ctx.comm.num_nodes() == 2, "num_nodes {}", ctx.comm.num_nodes());
  ctx.comm.begin_step(1);
  ctx.comm.all_reduce(at::ones({6}));  // 24 bytes, 3 ranks: 2N/w = 16 per peer
  const KindCounters step = ctx.comm.end_step().total();
  const uint64_t remote = ctx.rank == 1 ? 2 : 1;
  SCENARIO_CHECK(step.bytes_sent_inter_node == 2 * 24 * remote / 3, "inter-node {}", step.bytes_sent_inter_node);
});

const bool never_registered = register_scenario(
    "nodes_never_run", [](RankContext&) { check_failed("Comm::create should have refused the layout"); });

TEST(NodeLayoutTest, TwoByTwoSplitsEveryKindAndCountsSubGroups) {
  ScenarioOptions options;
  options.nodes = {"n0", "n0", "n1", "n1"};
  const ScenarioRun run = run_scenario("nodes_2x2", 4, options);
  EXPECT_EQ(run.result.exit_code, 0) << run.all_output();
}

TEST(NodeLayoutTest, NodesAreNumberedByTheirSmallestRank) {
  ScenarioOptions options;
  options.nodes = {"host-b", "host-a", "host-b"};
  const ScenarioRun run = run_scenario("nodes_interleaved", 3, options);
  EXPECT_EQ(run.result.exit_code, 0) << run.all_output();
}

// Ranks told 2 per node while 3 share one node string: every rank stops at once with one line naming both
// figures and the launcher (usage error), none waits for the others.
TEST(NodeLayoutTest, WrongLocalWorldSizeStopsEveryRankWithBothFigures) {
  ScenarioOptions options;
  options.nodes = {"x", "x", "x"};
  options.local_world_sizes = {2, 2, 2};
  const ScenarioRun run = run_scenario("nodes_never_run", 3, options);
  EXPECT_EQ(run.result.exit_code, 2) << run.all_output();
  EXPECT_LT(run.seconds, 10) << run.all_output();
  // The launcher stops the others once the first has failed: some may be gone before their line is out.
  EXPECT_NE(run.all_output().find("zhost: error: the ranks do not agree on the nodes: the test's simulated layout "
                                  "told rank 0 that 2 ranks run on its node (LOCAL_WORLD_SIZE), but 3 ranks (0, 1, 2) "
                                  "name its node 'x'"),
            std::string::npos)
      << run.all_output();
  EXPECT_EQ(run.all_output().find("should have refused"), std::string::npos) << run.all_output();
}

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
