// tests/launch/launcher_test.cpp: the local-rank supervisor with a stand-in rank program: a killed or
// failing rank stops the others within the bound and is named in one line, no rank outlives the launcher,
// output lines are prefixed, exit codes propagate, signals to the launcher are forwarded; ranks are forked
// when a rank_main is given and forking is safe, and executed otherwise.
#include "host/launch/launcher.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <thread>

#include "host/core/error.hpp"
#include "tests/support/scoped_env.hpp"
#include "tests/support/scratch_dir.hpp"

namespace zhost::launch {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct CapturedLine {
  int rank;
  OutputStream stream;
  std::string text;
};

// Options that run the stand-in rank program and collect its lines.
struct TestLaunch {
  LaunchOptions options;
  std::shared_ptr<std::vector<CapturedLine>> lines = std::make_shared<std::vector<CapturedLine>>();

  TestLaunch(int nproc, std::vector<std::string> args) {
    options.nproc = nproc;
    options.program = LAUNCH_RANK_PROGRAM;
    options.args = std::move(args);
    options.grace_period_s = 5;
    options.timeout_s = 30;
    options.on_output = [lines = lines](int rank, OutputStream stream, std::string_view text) {
      lines->push_back({rank, stream, std::string(text)});
    };
  }

  std::vector<std::string> lines_of(int rank, OutputStream stream = OutputStream::kStdout) const {
    std::vector<std::string> texts;
    for (const CapturedLine& line : *lines) {
      if (line.rank == rank && line.stream == stream) texts.push_back(line.text);
    }
    return texts;
  }
};

using TempDir = zhost::testing::ScratchDir;

// Gone, or a zombie waiting for a reaper that is not us.
bool process_gone(int pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, name, state;
  stat >> pid_field >> name >> state;
  return state == "Z";
}

// The pids the ranks wrote into `dir`, once all `count` files are there (waits up to 5 s).
std::vector<int> wait_for_pids(const std::string& dir, int count) {
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  std::vector<int> pids;
  while (Clock::now() < deadline) {
    pids.clear();
    for (int rank = 0; rank < count; ++rank) {
      int pid = 0;
      if (std::ifstream(dir + "/rank" + std::to_string(rank) + ".pid") >> pid) pids.push_back(pid);
    }
    if (static_cast<int>(pids.size()) == count) return pids;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pids;
}

TEST(LauncherTest, KilledRankStopsTheOthersAndIsNamed) {
  TestLaunch launch(3, {"--fail-rank", "1", "--fail-signal", "9", "--sleep-s", "60"});
  const auto started = Clock::now();
  const LaunchResult result = run_local_ranks(launch.options);
  EXPECT_LT(seconds_since(started), 10.0);
  EXPECT_EQ(result.exit_code, static_cast<int>(ExitCode::kRankFailed));
  ASSERT_EQ(result.ranks.size(), 3u);
  EXPECT_EQ(result.error, fmt::format("rank 1 (pid {}) was killed by signal 9 (SIGKILL); stopped the other ranks",
                                      result.ranks[1].pid));
  EXPECT_EQ(result.ranks[0].signal, SIGTERM);
  EXPECT_EQ(result.ranks[2].signal, SIGTERM);
  for (const RankExit& rank : result.ranks) EXPECT_TRUE(process_gone(rank.pid)) << "rank " << rank.rank;
}

TEST(LauncherTest, RanksIgnoringSigtermAreKilledAfterTheGracePeriod) {
  TestLaunch launch(3, {"--fail-rank", "0", "--fail-signal", "9", "--sleep-s", "60", "--ignore-sigterm"});
  launch.options.grace_period_s = 1;
  const auto started = Clock::now();
  const LaunchResult result = run_local_ranks(launch.options);
  EXPECT_LT(seconds_since(started), 4.0);
  EXPECT_GE(seconds_since(started), 1.0);
  ASSERT_EQ(result.ranks.size(), 3u);
  EXPECT_EQ(result.ranks[1].signal, SIGKILL);
  EXPECT_EQ(result.ranks[2].signal, SIGKILL);
  EXPECT_NE(result.error.find("rank 0 (pid"), std::string::npos) << result.error;
}

TEST(LauncherTest, ExitCodeOfTheFailedRankPropagates) {
  TestLaunch launch(3, {"--fail-rank", "2", "--fail-code", "3", "--sleep-s", "60"});
  const LaunchResult result = run_local_ranks(launch.options);
  EXPECT_EQ(result.exit_code, 3);
  ASSERT_EQ(result.ranks.size(), 3u);
  EXPECT_EQ(result.error, fmt::format("rank 2 (pid {}) exited with code 3: rank 2 fails on purpose; stopped the "
                                      "other ranks",
                                      result.ranks[2].pid));
}

TEST(LauncherTest, LastRankFailingStopsNobody) {
  TestLaunch launch(1, {"--fail-rank", "0", "--fail-code", "1", "--fail-after-ms", "0"});
  const LaunchResult result = run_local_ranks(launch.options);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.error,
            fmt::format("rank 0 (pid {}) exited with code 1: rank 0 fails on purpose", result.ranks[0].pid));
}

// zhost's exit codes 1-3 pass through; any other code, like a signal, counts as a failed rank (3).
TEST(LauncherTest, UndocumentedExitCodeCountsAsAFailedRank) {
  TestLaunch launch(2, {"--fail-rank", "1", "--fail-code", "42", "--sleep-s", "60"});
  const LaunchResult result = run_local_ranks(launch.options);
  EXPECT_EQ(result.exit_code, static_cast<int>(ExitCode::kRankFailed));
  EXPECT_NE(result.error.find("exited with code 42"), std::string::npos) << result.error;
}

// A rank stopped (SIGSTOP) while another fails is named first, as the likely cause, and the SIGTERM that
// stops the job reaches it (the launcher continues it).
TEST(LauncherTest, StoppedRankIsNamedWhenAnotherFails) {
  TestLaunch launch(
      3, {"--stop-rank", "0", "--fail-rank", "2", "--fail-code", "3", "--fail-after-ms", "1000", "--sleep-s", "60"});
  const auto started = Clock::now();
  const LaunchResult result = run_local_ranks(launch.options);
  EXPECT_LT(seconds_since(started), 4.0);
  EXPECT_EQ(result.exit_code, static_cast<int>(ExitCode::kRankFailed));
  ASSERT_EQ(result.ranks.size(), 3u);
  EXPECT_EQ(
      result.error.rfind(fmt::format("rank 0 (pid {}) is stopped (process state T) since ", result.ranks[0].pid), 0),
      0u)
      << result.error;
  EXPECT_NE(result.error.find(fmt::format("; rank 2 (pid {}) exited with code 3: rank 2 fails on purpose; stopped the "
                                          "other ranks",
                                          result.ranks[2].pid)),
            std::string::npos)
      << result.error;
  EXPECT_EQ(result.ranks[0].signal, SIGTERM);
  for (const RankExit& rank : result.ranks) EXPECT_TRUE(process_gone(rank.pid)) << "rank " << rank.rank;
}

// A rank that stays stopped past stopped_rank_limit_s stops the job, even when no other rank notices.
TEST(LauncherTest, RankStoppedPastTheLimitStopsTheJob) {
  TestLaunch launch(2, {"--stop-rank", "1", "--sleep-s", "60"});
  launch.options.stopped_rank_limit_s = 1;
  const auto started = Clock::now();
  const LaunchResult result = run_local_ranks(launch.options);
  EXPECT_LT(seconds_since(started), 3.0);
  EXPECT_EQ(result.exit_code, static_cast<int>(ExitCode::kRankFailed));
  ASSERT_EQ(result.ranks.size(), 2u);
  EXPECT_EQ(
      result.error.rfind(fmt::format("rank 1 (pid {}) is stopped (process state T) since ", result.ranks[1].pid), 0),
      0u)
      << result.error;
  EXPECT_NE(result.error.find("longer than the limit of 1.0 s; stopped the ranks"), std::string::npos) << result.error;
  for (const RankExit& rank : result.ranks) EXPECT_TRUE(process_gone(rank.pid)) << "rank " << rank.rank;
}

TEST(LauncherTest, RanksGetTheirEnvironment) {
  TestLaunch launch(2, {"--print-env"});
  launch.options.env = {{"EXTRA", "x"}};
  const LaunchResult result = run_local_ranks(launch.options);
  EXPECT_EQ(result.exit_code, 0) << result.error;
  EXPECT_TRUE(result.error.empty());
  const std::string port = launch.lines_of(0).at(6);
  EXPECT_NE(port, "MASTER_PORT=0");
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<std::string> expected{fmt::format("RANK={}", rank),
                                            "WORLD_SIZE=2",
                                            fmt::format("LOCAL_RANK={}", rank),
                                            "LOCAL_WORLD_SIZE=2",
                                            "GROUP_RANK=0",
                                            "MASTER_ADDR=127.0.0.1",
                                            port,
                                            "ZHOST_LAUNCHED=1",
                                            "TORCH_CPP_LOG_LEVEL=FATAL",
                                            "EXTRA=x"};
    EXPECT_EQ(launch.lines_of(rank), expected);
  }
}

// Note [Forked ranks]: given rank_main, a rank is this process forked. The child has the rank's environment
// and default signal dispositions (not the launcher's handlers), its output is captured like an exec'd
// rank's, and what rank_main returns is the rank's exit code. The program is not run.
int forked_rank_main() {
  struct sigaction term {};
  ::sigaction(SIGTERM, nullptr, &term);
  std::printf("forked RANK=%s LOCAL_WORLD_SIZE=%s ZHOST_LAUNCHED=%s EXTRA=%s SIGTERM %s\n", ::getenv("RANK"),
              ::getenv("LOCAL_WORLD_SIZE"), ::getenv("ZHOST_LAUNCHED"), ::getenv("EXTRA"),
              term.sa_handler == SIG_DFL ? "default" : "handled");
  return std::string(::getenv("RANK")) == "1" ? 2 : 0;
}

TEST(LauncherTest, ForkedRanksRunRankMainWithTheirEnvironment) {
  TestLaunch launch(2, {"--print-env"});
  launch.options.env = {{"EXTRA", "x"}};
  launch.options.rank_main = forked_rank_main;
  const LaunchResult result = run_local_ranks(launch.options);
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.error.find("rank 1 (pid "), std::string::npos) << result.error;
  EXPECT_NE(result.error.find("exited with code 2"), std::string::npos) << result.error;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(launch.lines_of(rank),
              std::vector<std::string>{
                  fmt::format("forked RANK={} LOCAL_WORLD_SIZE=2 ZHOST_LAUNCHED=1 EXTRA=x SIGTERM default", rank)});
  }
}

// Forking without exec is unsafe from a process with other threads: the launcher then execs the program.
TEST(LauncherTest, RanksAreExecutedWhenTheLauncherRunsOtherThreads) {
  TestLaunch launch(2, {"--print-env"});
  launch.options.rank_main = forked_rank_main;
  std::promise<void> finish;
  std::thread other([done = finish.get_future()]() mutable { done.wait(); });
  const LaunchResult result = run_local_ranks(launch.options);
  finish.set_value();
  other.join();
  EXPECT_EQ(result.exit_code, 0) << result.error;
  EXPECT_EQ(launch.lines_of(1).at(0), "RANK=1");  // the program's output, not rank_main's
}

TEST(LauncherTest, ZhostLaunchExecForcesExec) {
  zhost::testing::ScopedEnv exec("ZHOST_LAUNCH", "exec");
  TestLaunch launch(2, {"--print-env"});
  launch.options.rank_main = forked_rank_main;
  const LaunchResult result = run_local_ranks(launch.options);
  EXPECT_EQ(result.exit_code, 0) << result.error;
  EXPECT_EQ(launch.lines_of(0).at(0), "RANK=0");
}

TEST(LauncherTest, MultiNodeGlobalRanks) {
  TestLaunch launch(2, {"--print-env"});
  launch.options.nnodes = 2;
  launch.options.node_rank = 1;
  launch.options.master_addr = "10.1.2.3";
  launch.options.master_port = 23456;
  const LaunchResult result = run_local_ranks(launch.options);
  EXPECT_EQ(result.exit_code, 0) << result.error;
  EXPECT_EQ(launch.lines_of(2).at(0), "RANK=2");
  EXPECT_EQ(launch.lines_of(3).at(0), "RANK=3");
  EXPECT_EQ(launch.lines_of(3).at(1), "WORLD_SIZE=4");
  EXPECT_EQ(launch.lines_of(3).at(2), "LOCAL_RANK=1");
  EXPECT_EQ(launch.lines_of(3).at(4), "GROUP_RANK=1");  // the node rank: ranks tell nodes apart by it
  EXPECT_EQ(launch.lines_of(3).at(5), "MASTER_ADDR=10.1.2.3");
  EXPECT_EQ(launch.lines_of(3).at(6), "MASTER_PORT=23456");
}

TEST(LauncherTest, OutputLinesArePrefixedWithTheirRank) {
  LaunchOptions options;
  options.nproc = 2;
  options.program = LAUNCH_RANK_PROGRAM;
  options.args = std::vector<std::string>{"--print-output"};
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int exit_code = launch_local_ranks(options);
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(exit_code, 0);
  for (int rank = 0; rank < 2; ++rank) {
    for (const char* line : {"first line", "halves joined", "no final newline"}) {
      EXPECT_NE(out.find(fmt::format("[rank {}] {}\n", rank, line)), std::string::npos) << out;
    }
    EXPECT_NE(err.find(fmt::format("[rank {}] to stderr\n", rank)), std::string::npos) << err;
  }
}

TEST(LauncherTest, SigtermToTheLauncherIsForwardedToTheRanks) {
  TempDir pid_dir;
  const pid_t launcher = ::fork();
  if (launcher == 0) {
    LaunchOptions options;
    options.nproc = 2;
    options.program = LAUNCH_RANK_PROGRAM;
    options.args = std::vector<std::string>{"--sleep-s", "60", "--pid-dir", pid_dir.path()};
    ::_exit(launch_local_ranks(options));
  }
  const std::vector<int> pids = wait_for_pids(pid_dir.path(), 2);
  ASSERT_EQ(pids.size(), 2u);
  const auto started = Clock::now();
  ::kill(launcher, SIGTERM);
  int status = 0;
  while (::waitpid(launcher, &status, WNOHANG) == 0 && seconds_since(started) < 10) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_LT(seconds_since(started), 10.0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) << status;
  for (int pid : pids) EXPECT_TRUE(process_gone(pid)) << pid;
}

TEST(LauncherTest, RanksDieWithAKilledLauncher) {
  TempDir pid_dir;
  const pid_t launcher = ::fork();
  if (launcher == 0) {
    LaunchOptions options;
    options.nproc = 2;
    options.program = LAUNCH_RANK_PROGRAM;
    options.args = std::vector<std::string>{"--sleep-s", "60", "--pid-dir", pid_dir.path(), "--ignore-sigterm"};
    ::_exit(launch_local_ranks(options));
  }
  const std::vector<int> pids = wait_for_pids(pid_dir.path(), 2);
  ASSERT_EQ(pids.size(), 2u);
  ::kill(launcher, SIGKILL);
  ::waitpid(launcher, nullptr, 0);
  const auto started = Clock::now();
  bool all_gone = false;
  while (!all_gone && seconds_since(started) < 5) {
    all_gone = process_gone(pids[0]) && process_gone(pids[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(all_gone);
}

TEST(LauncherTest, JobTimeoutStopsTheRanks) {
  TestLaunch launch(2, {"--sleep-s", "60"});
  launch.options.timeout_s = 0.5;
  const LaunchResult result = run_local_ranks(launch.options);
  EXPECT_EQ(result.exit_code, static_cast<int>(ExitCode::kRankFailed));
  EXPECT_EQ(result.error, "the ranks did not finish within 0.5 s; stopped them");
}

TEST(LauncherTest, ProgramThatCannotRunIsAnError) {
  TestLaunch launch(2, {});
  launch.options.program = "/nonexistent/rank";
  try {
    run_local_ranks(launch.options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "could not start rank 0: cannot execute '/nonexistent/rank': No such file or directory");
  }
}

TEST(LauncherTest, BadOptionsAreUsageErrors) {
  TestLaunch launch(2, {});
  launch.options.nnodes = 2;
  EXPECT_THROW(run_local_ranks(launch.options), UsageError);  // no --master-port
  launch.options.nnodes = 1;
  launch.options.nproc = 0;
  EXPECT_THROW(run_local_ranks(launch.options), UsageError);
}

TEST(LauncherTest, SignalNames) {
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signal_name(40), "signal 40");
}

}  // namespace
}  // namespace zhost::launch
