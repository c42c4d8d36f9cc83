// tests/training/fault_injection_test.cpp: ranks killed at random. Each round starts `zhost run --nproc N`
// (N = 2 or 3), SIGKILLs a random rank at a random time, in half the rounds within 3 s of the ranks' start
// (start-up, rendezvous, set-up), in the others within 1 s of the first step (training: forward, backward or
// the step), and checks that every process is gone within 10 s, that the launcher names the killed rank and
// that it exits with 3 (a failed rank).
//
// ZHOST_FAULT_ROUNDS (default 6) and ZHOST_FAULT_SEED (default 1) choose the run; scripts/fault-injection
// runs 100 rounds. The test prints how long the jobs took to stop (max and median).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include "training_test_support.hpp"

using namespace zhost::testing;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : fallback;
}

}  // namespace

TEST(FaultInjection, RandomKillsStopTheJobAndNameTheRank) {
  const int rounds = env_int("ZHOST_FAULT_ROUNDS", 6);
  std::mt19937 random(static_cast<unsigned>(env_int("ZHOST_FAULT_SEED", 1)));
  std::uniform_real_distribution<double> before_training_s(0.0, 3.0);
  std::uniform_real_distribution<double> in_training_s(0.0, 1.0);
  std::vector<double> stop_s;
  int during_training = 0;
  for (int round = 0; round < rounds; ++round) {
    const int nproc = 2 + static_cast<int>(random() % 2);
    const int victim = static_cast<int>(random() % static_cast<unsigned>(nproc));
    const bool in_training = random() % 2 == 1;
    const double delay = in_training ? in_training_s(random) : before_training_s(random);
    SCOPED_TRACE(::testing::Message() << "round " << round << ": rank " << victim << " of " << nproc << " killed "
                                      << delay << " s after "
                                      << (in_training ? "the first step" : "the ranks started"));
    ScratchDir dir;
    BackgroundJob job(dir, nproc, {});
    ASSERT_TRUE(in_training ? job.wait_for_training() : job.wait_for_ranks(60)) << job.err();
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    const bool training = fs::exists(dir.path() / "runs" / "long" / "metrics.jsonl");
    const pid_t pid = job.pid_of(victim);
    ASSERT_EQ(kill(pid, SIGKILL), 0) << job.err();
    const auto killed_at = Clock::now();
    const std::optional<int> status = job.wait_for_exit(30);
    const double seconds = std::chrono::duration<double>(Clock::now() - killed_at).count();
    ASSERT_TRUE(status) << "the launcher did not stop within 30 s:\n" << job.err();
    EXPECT_LT(seconds, 10.0) << job.err();
    EXPECT_TRUE(job.all_ranks_gone());
    ASSERT_TRUE(WIFEXITED(*status)) << *status;
    EXPECT_EQ(WEXITSTATUS(*status), 3) << job.err();
    const std::string expected = "zhost: error: rank " + std::to_string(victim) + " (pid " + std::to_string(pid) +
                                 ") was killed by signal 9 (SIGKILL)";
    EXPECT_EQ(job.summary().rfind(expected, 0), 0u) << job.err();
    stop_s.push_back(seconds);
    during_training += training ? 1 : 0;
  }
  std::sort(stop_s.begin(), stop_s.end());
  const double median = stop_s.empty() ? 0 : (stop_s[(stop_s.size() - 1) / 2] + stop_s[stop_s.size() / 2]) / 2;
  std::printf(
      "fault injection: %d kills (%d during training, %d before its first step); time to stop: max %.2f s, "
      "median %.2f s\n",
      rounds, during_training, rounds - during_training, stop_s.empty() ? 0 : stop_s.back(), median);
}
