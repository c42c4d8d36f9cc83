// tests/training/supervision_test.cpp: supervision of real training jobs (`zhost run --nproc N`): a rank
// killed in the middle of training stops the whole job within seconds, and zhost names the rank and its
// cause (stage 0, the stage 2 plugin with collectives in flight in its buckets, the stage 3 plugin with
// gathers and reductions in flight); a rank that is stopped (SIGSTOP), whichever it is, rank 0 (the store's
// host) included, is warned about, then named, and the job ends within comm.timeout_s and a few seconds.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "training_test_support.hpp"

using namespace zhost::testing;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

int exit_code_of(const std::string& command) {
  const int status = std::system((command + " >/dev/null 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The first cells of the exit-code table in docs/architecture.md.
std::set<std::string> documented_exit_codes() {
  std::istringstream doc(read_text_file(fs::path(ZHOST_SOURCE_DIR) / "docs" / "architecture.md"));
  std::set<std::string> codes;
  bool in_table = false;
  for (std::string line; std::getline(doc, line);) {
    if (line == "| code | meaning |") {
      in_table = true;
    } else if (in_table && line.rfind("|---", 0) != 0) {
      if (line.rfind("| ", 0) != 0) break;
      codes.insert(line.substr(2, line.find(" |", 2) - 2));
    }
  }
  return codes;
}

// The last line of a run.log is its final status, a failure.
void expect_last_line_is_a_failed_status(const fs::path& run_log) {
  const std::string log = read_text_file(run_log);
  ASSERT_FALSE(log.empty()) << run_log;
  const size_t start = log.rfind('\n', log.size() - 2);
  const std::string last = log.substr(start == std::string::npos ? 0 : start + 1);
  EXPECT_NE(last.find("[rank 0] status: failed: "), std::string::npos) << log;
  EXPECT_EQ(last.back(), '\n') << log;
}

}  // namespace

class Supervision : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(Stages, Supervision, ::testing::Values(0, 2, 3),
                         [](const ::testing::TestParamInfo<int>& stage) {
                           return "Stage" + std::to_string(stage.param);
                         });

TEST_P(Supervision, KilledRankStopsTheJobWithinTenSeconds) {
  ScratchDir dir;
  std::vector<std::string> sets = {"zero.stage=" + std::to_string(GetParam())};
  if (GetParam() == 3)  // small enough units that blocks are gathered and released every micro-batch
    sets.push_back("zero.stage3_param_persistence_threshold=40");
  BackgroundJob job(dir, 2, sets);
  ASSERT_TRUE(job.wait_for_training()) << "training never started:\n" << job.err();
  ASSERT_EQ(kill(job.pid_of(1), SIGKILL), 0);
  const auto killed_at = Clock::now();
  const std::optional<int> status = job.wait_for_exit(30);
  ASSERT_TRUE(status) << "the launcher did not stop within 30 s";
  EXPECT_LT(seconds_since(killed_at), 10.0);
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 3);  // a failed rank (docs/architecture.md, exit codes)
  EXPECT_EQ(job.summary().rfind("zhost: error: rank 1", 0), 0u) << job.err();
  EXPECT_NE(job.summary().find("SIGKILL"), std::string::npos) << job.err();
  EXPECT_TRUE(job.all_ranks_gone()) << "a rank still runs";
  expect_last_line_is_a_failed_status(dir.path() / "runs" / "long" / "run.log");
}

// Note [Status on a signal]: the launcher stopped by SIGTERM stops its ranks, and rank 0's run.log still ends
// with a status line.
TEST(LauncherSignal, StoppedBySigtermLeavesAStatusInRunLog) {
  ScratchDir dir;
  BackgroundJob job(dir, 2, {"zero.stage=2"});
  ASSERT_TRUE(job.wait_for_training()) << "training never started:\n" << job.err();
  ASSERT_EQ(kill(job.launcher(), SIGTERM), 0);
  const std::optional<int> status = job.wait_for_exit(30);
  ASSERT_TRUE(status) << "the launcher did not stop within 30 s";
  EXPECT_TRUE(job.all_ranks_gone()) << "a rank still runs";
  expect_last_line_is_a_failed_status(dir.path() / "runs" / "long" / "run.log");
}

struct StopCase {
  int nproc;
  int stopped;
};

void PrintTo(const StopCase& c, std::ostream* os) { *os << "rank " << c.stopped << " of " << c.nproc; }

class StoppedRank : public ::testing::TestWithParam<StopCase> {};

INSTANTIATE_TEST_SUITE_P(EachRank, StoppedRank,
                         ::testing::Values(StopCase{2, 0}, StopCase{2, 1}, StopCase{3, 0}, StopCase{3, 1},
                                           StopCase{3, 2}),
                         [](const ::testing::TestParamInfo<StopCase>& c) {
                           return "Rank" + std::to_string(c.param.stopped) + "Of" + std::to_string(c.param.nproc);
                         });

// comm.timeout_s = 4: the others warn after a quarter of it, naming the stopped rank, fail after it, naming
// it again, and the launcher names it first in its summary; then it stops every rank, the stopped one too.
TEST_P(StoppedRank, IsWarnedAboutThenNamedAndTheJobEnds) {
  constexpr double kTimeout = 4;
  const auto [nproc, stopped] = GetParam();
  ScratchDir dir;
  BackgroundJob job(dir, nproc, {"comm.timeout_s=4"});
  ASSERT_TRUE(job.wait_for_training()) << "training never started:\n" << job.err();
  const pid_t pid = job.pid_of(stopped);
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  const auto stopped_at = Clock::now();
  const std::optional<int> status = job.wait_for_exit(kTimeout + 30);
  ASSERT_TRUE(status) << "the job did not end within comm.timeout_s + 30 s:\n" << job.err();
  EXPECT_LT(seconds_since(stopped_at), kTimeout + 8);
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 3);

  const std::string err = job.err();
  // How the other ranks name it: rank 0 hosts the rendezvous store, which stops answering with it.
  const std::string named =
      stopped == 0 ? "rank 0 does not answer" : "rank " + std::to_string(stopped) + " stopped responding";
  EXPECT_NE(err.find("has waited"), std::string::npos) << "no straggler warning:\n" << err;
  const size_t warning = err.find("has waited");
  EXPECT_NE(err.find(named, warning), std::string::npos) << "the warning does not name the stopped rank:\n" << err;
  bool rank_reported = false;
  std::istringstream lines(err);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("] zhost: error: ") != std::string::npos && line.find(named) != std::string::npos)
      rank_reported = true;
  }
  EXPECT_TRUE(rank_reported) << "no rank's error names rank " << stopped << ":\n" << err;
  const std::string summary_start = "zhost: error: rank " + std::to_string(stopped) + " (pid " + std::to_string(pid) +
                                    ") is stopped (process state T)";
  EXPECT_EQ(job.summary().rfind(summary_start, 0), 0u) << err;
  EXPECT_TRUE(job.all_ranks_gone()) << "a rank still runs";
}

// Every exit code that docs/architecture.md documents is what the binary returns in that situation.
TEST(ExitCodes, EveryDocumentedCodeIsWhatTheBinaryReturns) {
  ASSERT_EQ(documented_exit_codes(), (std::set<std::string>{"0", "1", "2", "3", "128 + N"}))
      << "the table changed: give each new code a case here";
  ScratchDir dir;
  const std::string zhost = ZHOST_EXE;
  const fs::path config = dir.path() / "job.toml";
  std::ofstream(config) << small_job_config();
  const std::string run = zhost + " run " + config.string() + " --set run.dir=" + (dir.path() / "runs").string();

  EXPECT_EQ(exit_code_of(zhost + " version"), 0);
  EXPECT_EQ(exit_code_of(zhost + " run " + (dir.path() / "missing.toml").string()), 2);  // nothing ran
  // A runtime failure: the run directory cannot take metrics.jsonl.
  fs::create_directories(dir.path() / "runs" / "blocked" / "metrics.jsonl");
  EXPECT_EQ(exit_code_of(run + " --set run.name=blocked"), 1);
  // A failed rank: rank 0 of 2, whose peer never joins.
  EXPECT_EQ(exit_code_of("RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(unused_port()) +
                         " " + run + " --set run.name=alone --set comm.timeout_s=1"),
            3);
  // (a killed rank under --nproc: Supervision.KilledRankStopsTheJobWithinTenSeconds, a stopped one: StoppedRank)
  // 128 + N: Ctrl-C to the launcher.
  BackgroundJob job(dir, 2, {});
  ASSERT_TRUE(job.wait_for_training()) << "training never started:\n" << job.err();
  ASSERT_EQ(kill(job.launcher(), SIGINT), 0);
  const std::optional<int> status = job.wait_for_exit(20);
  ASSERT_TRUE(status) << job.err();
  ASSERT_TRUE(WIFEXITED(*status)) << *status;
  EXPECT_EQ(WEXITSTATUS(*status), 128 + SIGINT) << job.err();
  EXPECT_TRUE(job.all_ranks_gone());
}

// Note [Forked ranks]: ranks forked from the launcher (the default) and ranks that exec zhost again
// (ZHOST_LAUNCH=exec) train bit for bit alike, stage 2 on 2 ranks, and the launcher says which it did.
TEST(Launch, ForkedAndExecutedRanksTrainBitForBitAlike) {
  ScratchDir dir;
  const std::string args = " --nproc 2 --set zero.stage=2 --set steps=4 --log-level debug";
  RunOutput forked = run_zhost(dir.path(), small_job_config(), "forked", args);
  RunOutput executed = run_zhost(dir.path(), small_job_config(), "executed", args, "ZHOST_LAUNCH=exec ");
  ASSERT_EQ(forked.exit_code, 0) << forked.err;
  ASSERT_EQ(executed.exit_code, 0) << executed.err;
  EXPECT_NE(forked.err.find("launch: forking the ranks from this process"), std::string::npos) << forked.err;
  EXPECT_NE(executed.err.find("launch: starting the ranks by exec: ZHOST_LAUNCH=exec"), std::string::npos)
      << executed.err;
  ASSERT_EQ(forked.losses.size(), 4u);
  EXPECT_EQ(forked.losses, executed.losses);
  EXPECT_EQ(weights_mismatch(forked, executed, 0, 0), "");
}

// A rank whose rank 0 never comes gives up once, after comm.timeout_s, naming the store and what to check
// (waiting for the store's port first must not add the TCPStore client's own timeout on top).
TEST(Rendezvous, ARankWithoutRankZeroGivesUpAfterOneTimeout) {
  ScratchDir dir;
  const auto started = Clock::now();
  RunOutput r =
      run_zhost(dir.path(), small_job_config(), "alone", "--set comm.timeout_s=4",
                "RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(unused_port()) + " ");
  const double seconds = seconds_since(started);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("rendezvous: rank 1 could not reach the store at 127.0.0.1:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 0 hosts the store: check that it started"), std::string::npos) << r.err;
  EXPECT_GE(seconds, 4.0);
  EXPECT_LT(seconds, 7.5) << "two timeouts: the store's port and then the client";
}

// Note [No CUDA before fork]: the launcher checks the job (whether it trains on a GPU included: run.device =
// "auto") before it forks its ranks, and must not call into CUDA to do so: a forked rank of a process that has would
// find CUDA unusable. cuda_probe_recorder.c, preloaded, stands in for cudaGetDeviceCount and writes down every process
// that asks; the launcher must not be one of them, while the processes that asked (its probe child, the ranks) show
// that the recorder was heard at all.
TEST(Launch, LauncherNeverCallsCuda) {
  if (!ZHOST_BUILT_WITH_CUDA) GTEST_SKIP() << "this zhost was built without CUDA: nothing calls CUDA";
  ScratchDir dir;
  const fs::path config = dir.path() / "job.toml";
  std::ofstream(config) << small_job_config();
  const fs::path probes = dir.path() / "probes.txt";
  const pid_t launcher = spawn_logged(
      {ZHOST_EXE, "run", config.string(), "--nproc", "2", "--set", "steps=2", "--set", "run.device=auto", "--set",
       "run.dir=" + (dir.path() / "runs").string(), "--set", "run.name=probe"},
      dir.path() / "out.txt", dir.path() / "err.txt",
      {std::string("LD_PRELOAD=") + ZHOST_CUDA_PROBE_RECORDER, "ZHOST_TEST_CUDA_PROBES=" + probes.string()});
  const int exit_code = wait_for_exit_code(launcher, 120);
  ASSERT_EQ(exit_code, 0) << read_text_file(dir.path() / "err.txt");
  std::istringstream lines(read_text_file(probes));
  std::set<int> asking;
  for (int pid = 0; lines >> pid;) asking.insert(pid);
  ASSERT_FALSE(asking.empty()) << "no process asked for CUDA devices: the recorder was not heard";
  EXPECT_EQ(asking.count(launcher), 0u) << "the launcher (pid " << launcher << ") called cudaGetDeviceCount";
}

// Note [Steps that apply nothing]: a job whose steps all skip fails, naming the step and what to check; rank 0's
// run.log ends with the failure.
TEST(StepsThatApplyNothing, NonFiniteFp32GradientsStopTheJobAtTheFirstStep) {
  zhost::testing::ScratchDir dir;
  RunOutput r = run_zhost(dir.path(), small_job_config(), "nan", "--nproc 2 --set model.init_std=1e30");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("step 1: the gradients are not finite (inf/NaN"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("in fp32 training, which has no loss scale to lower"), std::string::npos) << r.err;
  const std::string log = read_text_file(r.run_dir / "run.log");
  EXPECT_NE(log.find("failed: step 1: the gradients are not finite"), std::string::npos) << log;
}

TEST(StepsThatApplyNothing, Fp16StopsAfterSixtyFourSkippedStepsInARow) {
  zhost::testing::ScratchDir dir;
  RunOutput r = run_zhost(dir.path(), small_job_config(), "fp16",
                          "--nproc 1 --set model.init_std=1e30 --set fp16.enabled=true --set fp16.loss_scale=128 "
                          "--set steps=80 --set steps_per_print=10");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("step 64: 64 fp16 steps in a row skipped for gradient overflow"), std::string::npos) << r.err;
}

TEST(StepsThatApplyNothing, AShortJobThatAppliedNoStepFails) {
  zhost::testing::ScratchDir dir;
  RunOutput r = run_zhost(dir.path(), small_job_config(), "short",
                          "--nproc 1 --set model.init_std=1e30 --set fp16.enabled=true --set fp16.loss_scale=128");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("all 6 steps were skipped for gradient overflow, so the job trained nothing"), std::string::npos)
      << r.err;
}
