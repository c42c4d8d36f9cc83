// tests/training/test_supervision.cpp: a rank killed in the middle of training stops the whole job
// within seconds, and zhost names the rank and its cause: with the host's stage 0, with the stage 2
// plugin (whose collectives are in flight in its buckets when the peer dies), and with the stage 3 plugin
// (gathers and reductions in flight).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "training_test_support.hpp"

using namespace zhost::testing;
namespace fs = std::filesystem;

namespace {

std::vector<pid_t> children_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> pids;
  for (pid_t child; in >> child;) pids.push_back(child);
  return pids;
}


}  // namespace

class Supervision : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(Stages, Supervision, ::testing::Values(0, 2, 3),
                         [](const ::testing::TestParamInfo<int>& stage) { return "Stage" + std::to_string(stage.param); });

TEST_P(Supervision, KilledRankStopsTheJobWithinTenSeconds) {
  ScratchDir dir;
  const std::string stage = "zero.stage=" + std::to_string(GetParam());
  const std::string run_dir = (dir.path() / "runs").string();
  const std::string run_dir_setting = "run.dir=" + run_dir;
  fs::path config = dir.path() / "long.toml";
  std::ofstream(config) << small_job_config();
  fs::path err = dir.path() / "err.txt";
  pid_t launcher = fork();
  if (launcher == 0) {
    if (!freopen(err.c_str(), "w", stderr) || !freopen((dir.path() / "out.txt").c_str(), "w", stdout)) _exit(126);
    std::vector<const char*> argv = {ZHOST_EXE, "run", config.c_str(), "--nproc", "2", "--set", "steps=100000",
                                     "--set", run_dir_setting.c_str(), "--set", "run.name=long", "--set",
                                     "train_micro_batch_size_per_gpu=1", "--set", stage.c_str()};
    if (GetParam() == 3)  // small enough units that blocks are gathered and released every micro-batch
      for (const char* arg : {"--set", "zero.stage3_param_persistence_threshold=40"}) argv.push_back(arg);
    argv.push_back(nullptr);
    execv(ZHOST_EXE, const_cast<char* const*>(argv.data()));
    _exit(127);
  }
  // Wait until training runs (the first metrics record), then kill rank 1.
  fs::path metrics = dir.path() / "runs" / "long" / "metrics.jsonl";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!(fs::exists(metrics) && fs::file_size(metrics) > 0) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(fs::exists(metrics)) << "training never started:\n" << zhost::testing::read_text_file(err);
  std::vector<pid_t> ranks = children_of(launcher);
  ASSERT_EQ(ranks.size(), 2u);
  ASSERT_EQ(kill(ranks[1], SIGKILL), 0);
  auto killed_at = std::chrono::steady_clock::now();

  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(launcher, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - killed_at < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  if (done == 0) {
    kill(launcher, SIGKILL);
    waitpid(launcher, &status, 0);
    FAIL() << "the launcher did not stop within 30 s";
  }
  EXPECT_LT(seconds, 10.0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  std::string errors = zhost::testing::read_text_file(err);
  EXPECT_NE(errors.find("zhost: error: rank 1"), std::string::npos) << errors;
  EXPECT_NE(errors.find("SIGKILL"), std::string::npos) << errors;
  EXPECT_EQ(kill(ranks[0], 0), -1) << "rank 0 still running";  // no orphans
}
