// tests/comm/failure_test.cpp: no hang, ever: a rank that skips a collective makes the others fail within
// the timeout naming it; a rank that dies mid-collective makes them fail at once; a rank that never joins
// makes the rendezvous fail naming it.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "host/core/error.hpp"
#include "host/launch/launcher.hpp"
#include "tests/comm/multi_rank.hpp"

namespace zhost::comm::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Rank 1 skips the second all_reduce (and idles); the others fail after comm.timeout_s. A collective after
// the failure fails at once. The waiting ranks ignore SIGTERM, so that both report before the launcher
// stops the job because the first of them exited.
const bool skip_registered = register_scenario("skip_collective", [](RankContext& ctx) {
  if (ctx.rank != 1) ::signal(SIGTERM, SIG_IGN);
  ctx.comm.begin_step(3);
  at::Tensor data = at::ones({16});
  ctx.comm.all_reduce(data);
  if (ctx.rank == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(30));  // the launcher stops it
    return;
  }
  try {
    ctx.comm.all_reduce(data);
  } catch (const Error&) {
    const auto started = Clock::now();
    bool later_failed = false;
    try {
      ctx.comm.barrier();
    } catch (const Error& later) {
      later_failed = std::string(later.what()).find("an earlier collective failed") != std::string::npos;
    }
    SCENARIO_CHECK(later_failed && Clock::now() - started < std::chrono::milliseconds(100),
                   "a collective after a failure must fail at once");
    throw;
  }
});

// Rank 1 dies while the others wait in a collective; they ignore SIGTERM so that the test sees their own
// report rather than the launcher stopping them.
const bool peer_dies_registered = register_scenario("peer_dies", [](RankContext& ctx) {
  at::Tensor data = at::ones({1 << 16});
  ctx.comm.all_reduce(data);
  if (ctx.rank == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ::raise(SIGKILL);
  }
  ::signal(SIGTERM, SIG_IGN);
  ctx.comm.all_reduce(data);
});

// Rank `stopped` stops itself (SIGSTOP) after a first all_reduce, while the others wait in the second one;
// they ignore SIGTERM so that each reports before the launcher stops the job.
Scenario stops(int stopped) {
  return [stopped](RankContext& ctx) {
    at::Tensor data = at::ones({16});
    ctx.comm.all_reduce(data);
    if (ctx.rank == stopped) {
      ::raise(SIGSTOP);
      return;
    }
    ::signal(SIGTERM, SIG_IGN);
    ctx.comm.all_reduce(data);
  };
}
const bool rank0_stops_registered = register_scenario("rank0_stops", stops(0));
const bool rank1_stops_registered = register_scenario("rank1_stops", stops(1));

// A stopped rank, rank 0 (whose process serves the rendezvous store) included, is warned about after a quarter
// of comm.timeout_s and named when the collective fails after comm.timeout_s: no wait on the store hangs.
TEST(FailureTest, StoppedRankIsWarnedAboutAndNamedWithinTheTimeout) {
  for (int stopped : {0, 1}) {
    ScenarioOptions options;
    options.comm_timeout_s = 2;
    options.grace_period_s = 10;  // longer than the bound below: the waiting ranks must end by themselves
    const ScenarioRun run = run_scenario(fmt::format("rank{}_stops", stopped), 3, options);
    ASSERT_EQ(run.result.ranks.size(), 3u);
    const std::string named =
        stopped == 0 ? "rank 0 does not answer" : fmt::format("rank {} stopped responding", stopped);
    for (int waiting : {0, 1, 2}) {
      if (waiting == stopped) continue;
      EXPECT_EQ(run.result.ranks[waiting].exit_code, static_cast<int>(ExitCode::kRankFailed)) << run.all_output();
      const std::string report = run.output_of(waiting);
      const size_t warning = report.find("all_reduce #2 (group world) has waited 0.");
      EXPECT_NE(warning, std::string::npos) << run.all_output();
      EXPECT_NE(report.find(named, warning), std::string::npos) << run.all_output();
      // After comm.timeout_s, or after the store's answer deadline (3 s) when the warning asked rank 0's store.
      const size_t failure = report.find(fmt::format("all_reduce #2 (group world) failed on rank {} after ", waiting));
      EXPECT_NE(failure, std::string::npos) << run.all_output();
      EXPECT_NE(report.find(named, failure), std::string::npos) << run.all_output();
    }
    EXPECT_EQ(run.result.exit_code, static_cast<int>(ExitCode::kRankFailed)) << run.all_output();
    EXPECT_EQ(
        run.result.error.rfind(fmt::format("rank {} (pid {}) is stopped", stopped, run.result.ranks[stopped].pid), 0),
        0u)
        << run.result.error;
    EXPECT_LT(run.seconds, 15.0) << run.all_output();  // from the launch: start-up, rendezvous, 2 s, 3 s
  }
}

TEST(FailureTest, SkippedCollectiveFailsTheOthersWithinTheTimeoutNamingTheMissingRank) {
  ScenarioOptions options;
  options.comm_timeout_s = 2;
  options.grace_period_s = 5;
  const ScenarioRun run = run_scenario("skip_collective", 3, options);
  ASSERT_EQ(run.result.ranks.size(), 3u);
  for (int waiting : {0, 2}) {
    EXPECT_EQ(run.result.ranks[waiting].exit_code, static_cast<int>(ExitCode::kRankFailed)) << run.all_output();
    const std::string report = run.output_of(waiting);
    EXPECT_NE(report.find(fmt::format("all_reduce #2 (group world, step 3) failed on rank {} after 2.", waiting)),
              std::string::npos)
        << run.all_output();
    EXPECT_NE(report.find("rank 1 did not arrive (its last collective in this group: #1 all_reduce)"),
              std::string::npos)
        << run.all_output();
    EXPECT_EQ(report.find(fmt::format("rank {} did not arrive", 2 - waiting)), std::string::npos) << run.all_output();
  }
  EXPECT_EQ(run.result.exit_code, static_cast<int>(ExitCode::kRankFailed)) << run.all_output();
  EXPECT_NE(run.result.error.find("exited with code 3: all_reduce #2"), std::string::npos) << run.result.error;
  EXPECT_NE(run.result.error.find("; stopped the other ranks"), std::string::npos) << run.result.error;
  EXPECT_LT(run.seconds, 10.0);
}

TEST(FailureTest, DeadPeerFailsTheOthersQuicklyNamingIt) {
  ScenarioOptions options;
  options.comm_timeout_s = 60;  // far beyond the test's bound: the failure must come from the dead peer
  options.grace_period_s = 10;
  const ScenarioRun run = run_scenario("peer_dies", 3, options);
  ASSERT_EQ(run.result.ranks.size(), 3u);
  EXPECT_EQ(run.result.ranks[1].signal, SIGKILL) << run.all_output();
  for (int survivor : {0, 2}) {
    EXPECT_EQ(run.result.ranks[survivor].exit_code, static_cast<int>(ExitCode::kRankFailed)) << run.all_output();
    EXPECT_NE(run.output_of(survivor).find("all_reduce #2 (group world) failed"), std::string::npos)
        << run.all_output();
  }
  EXPECT_NE(run.output_of(0).find("rank 1 stopped responding"), std::string::npos) << run.all_output();
  EXPECT_NE(run.result.error.find("rank 1 (pid"), std::string::npos) << run.result.error;
  EXPECT_LT(run.seconds, 10.0);
}

TEST(FailureTest, RendezvousNamesTheRanksThatNeverJoined) {
  const int port = launch::pick_free_port();
  const auto started = Clock::now();
  try {
    Comm::create({0, 3, "127.0.0.1", port, 1.0});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRankFailed);
    EXPECT_NE(std::string(e.what()).find("1 of 3 ranks joined; missing: ranks 1, 2"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(5));
}

}  // namespace
}  // namespace zhost::comm::testing
