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

}  // namespace
}  // namespace zhost::comm::testing
