// tests/abi/frozen_training_test.cpp: a real `zhost run` on two ranks (processes over Gloo) trains with a
// partition plugin built against the frozen SDK headers of each released ABI (frozen_partition.c), and ends
// with the same losses and weights as the host's own data-parallel stage 0 on the same job: the old
// plugin's tables, setup, hooks, collectives and step are all served right by this host.
#include <gtest/gtest.h>

#include <string>

#include "tests/support/scratch_dir.hpp"
#include "tests/training/training_test_support.hpp"

using namespace zhost::testing;

namespace {

constexpr double kFp32Tolerance = 2e-5;  // as tests/training: summation order differs, nothing else
constexpr double kFp32Absolute = 5e-6;
const std::string kSgd =
    " --nproc 2 --set optimizer.type=SGD --set optimizer.momentum=0.9 --set optimizer.lr=0.5 "
    "--set scheduler.warmup_max_lr=0.5";

class FrozenPartition : public ::testing::TestWithParam<std::string> {};  // the release's folder, "v1_0"

TEST_P(FrozenPartition, TrainsAsTheHostsOwnDataParallelStage) {
  const std::string plugin = "frozen_dp_" + GetParam();
  ScratchDir dir;
  RunOutput old_plugin =
      run_zhost(dir.path(), small_job_config(), "frozen",
                kSgd + " --set zero.stage=1 --plugin-path " + ZHOST_FROZEN_PARTITION_DIR + "/" + GetParam());
  RunOutput stage0 = run_zhost(dir.path(), small_job_config(), "stage0", kSgd + " --set zero.stage=0");
  ASSERT_EQ(old_plugin.exit_code, 0) << old_plugin.err << old_plugin.out;
  ASSERT_EQ(stage0.exit_code, 0) << stage0.err << stage0.out;
  const std::string log = old_plugin.out + old_plugin.err;
  EXPECT_NE(log.find("via '" + plugin + "'"), std::string::npos) << log;
  EXPECT_NE(log.find(plugin + " created (built against frozen SDK headers)"), std::string::npos) << log;
  ASSERT_EQ(old_plugin.losses.size(), 6u);
  expect_losses_near(old_plugin, stage0, kFp32Tolerance);
  EXPECT_EQ(weights_mismatch(old_plugin, stage0, kFp32Tolerance, kFp32Absolute), "");
  EXPECT_LT(old_plugin.losses.back(), old_plugin.losses.front());  // it trains
}

// Checkpoints need the partition table's save_state: a plugin without it trains, but a job that saves is refused
// at start.
TEST(FrozenPartitionCheckpoint, AJobThatSavesIsRefusedAtStartNamingTheRebuild) {
  ScratchDir dir;
  RunOutput r = run_zhost(dir.path(), small_job_config(), "old",
                          kSgd +
                              " --set zero.stage=1 --set checkpoint.interval=2 --set checkpoint.dir=ckpt "
                              "--plugin-path " +
                              ZHOST_FROZEN_PARTITION_DIR + "/v1_0");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(
      r.err.find("partition plugin 'frozen_dp_v1_0' cannot save its state (its partition table has no save_state)"),
      std::string::npos)
      << r.err;
  EXPECT_TRUE(r.losses.empty());  // refused before the first step
}

// Per-step betas (OneCycle's momentum) came with 1.1: a 1.0 partition would step with its setup's betas and
// change the math silently, so the job is refused at start, naming the plugin and the rebuild.
TEST(FrozenPartitionAbi, A1_0PartitionIsRefusedForPerStepBetas) {
  ScratchDir dir;
  RunOutput r = run_zhost(
      dir.path(), small_job_config(), "old",
      std::string(" --nproc 2 --set zero.stage=1 --set scheduler.type=OneCycle --set scheduler.cycle_min_lr=1e-4 "
                  "--set scheduler.cycle_max_lr=1e-3 --plugin-path ") +
          ZHOST_FROZEN_PARTITION_DIR + "/v1_0");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("OneCycle's momentum cycling (scheduler.cycle_momentum = true) needs zhost ABI 1.1, and plugin "
                       "'frozen_dp_v1_0'"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(r.losses.empty());
}

INSTANTIATE_TEST_SUITE_P(Releases, FrozenPartition, ::testing::Values("v1_0", "v1_1"),
                         [](const ::testing::TestParamInfo<std::string>& release) { return release.param; });

}  // namespace
