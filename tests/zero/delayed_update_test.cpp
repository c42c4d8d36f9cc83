// tests/zero/delayed_update_test.cpp: ZeRO-Offload's delayed parameter update (zero.offload_optimizer.
// delayed_update, Note [Delayed parameter update] in plugins/zero_common/delayed_update.hpp) through real
// `zhost run` jobs on 2 ranks with the offload_cpu tier (the tests' small gpt, fp32, clipping acting).
//
// The rule is pinned by exact comparisons with runs that need no delay to compute the same numbers:
//   - which weights a step's forward and backward read: the loss of step t (taken on the weights that step's
//     gradients are computed on) must be L_t(W_{t-2}). L_t(W_0) comes from a run with lr 0 throughout;
//     L_t(W_1) from a run without delay resumed after step 1 with lr 0. Step 2 on W_0 fails with no delay,
//     step 3 on W_1 fails with two steps of delay.
//   - what the update is: drained after every step (a checkpoint each step applies the update in flight), the
//     delayed job equals the job without delay bit for bit, so the gradients moved into the tier and the
//     step taken there are exactly the undelayed ones.
//   - checkpoints: a job resumed from a delayed job's checkpoint equals it bit for bit.
//   - 40 steps: the loss stays within 2% of the job without delay.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tests/support/scratch_dir.hpp"
#include "tests/training/training_test_support.hpp"

using namespace zhost::testing;

namespace {

// 2 ranks, stage 2 over the CPU tier; warmup from a nonzero lr, so that step 1 moves the weights.
const char* kJob =
    "--nproc 2 --set zero.stage=2 --set zero.offload_optimizer.device=cpu --set offload_cpu.threads=1 "
    "--set scheduler.warmup_min_lr=0.002 ";
const char* kDelayed = " --set zero.offload_optimizer.delayed_update=true";
const char* kNoLr = " --set optimizer.lr=0 --set scheduler.warmup_min_lr=0 --set scheduler.warmup_max_lr=0";

RunOutput train(const ScratchDir& dir, const std::string& name, const std::string& args) {
  RunOutput r = run_zhost(dir.path(), small_job_config(), name, kJob + args);
  EXPECT_EQ(r.exit_code, 0) << name << ":\n" << r.err << r.out;
  return r;
}

TEST(DelayedUpdate, EachStepReadsTheWeightsFromTwoUpdatesBefore) {
  ScratchDir dir;
  RunOutput delayed = train(dir, "delayed", std::string("--set steps=4") + kDelayed);
  RunOutput frozen = train(dir, "frozen", std::string("--set steps=4") + kNoLr);  // L_t(W_0)
  RunOutput first = train(dir, "first", "--set steps=1 --set checkpoint.at_end=true --set checkpoint.dir=first_ckpt");
  RunOutput after_first =  // L_t(W_1): resumed after step 1, lr 0 from there
      train(
          dir, "after_first",
          std::string("--set steps=4") + kNoLr + " --resume " + (dir.path() / "first_ckpt" / "step-00000001").string());
  ASSERT_EQ(delayed.losses.size(), 4u);
  ASSERT_EQ(frozen.losses.size(), 4u);
  ASSERT_EQ(after_first.losses.size(), 3u);  // steps 2-4
  EXPECT_NE(delayed.err.find("delayed parameter update"), std::string::npos) << delayed.err;
  EXPECT_EQ(delayed.losses[0], frozen.losses[0]);       // step 1 on W_0
  EXPECT_EQ(delayed.losses[1], frozen.losses[1]);       // step 2 on W_0: one step stale
  EXPECT_NE(delayed.losses[1], after_first.losses[0]);  // ... not on W_1
  EXPECT_EQ(delayed.losses[2], after_first.losses[1]);  // step 3 on W_1
  EXPECT_NE(delayed.losses[2], frozen.losses[2]);       // ... not on W_0
}

TEST(DelayedUpdate, DrainedAfterEveryStepEqualsNoDelayBitForBit) {
  ScratchDir dir;
  RunOutput plain = train(dir, "plain", "");
  RunOutput drained =
      train(dir, "drained", std::string(kDelayed) + " --set checkpoint.interval=1 --set checkpoint.dir=ckpt");
  RunOutput delayed = train(dir, "delayed", kDelayed);
  ASSERT_EQ(plain.losses.size(), 6u);
  expect_clipping_acted(plain);
  EXPECT_EQ(drained.losses, plain.losses);
  EXPECT_EQ(weights_mismatch(drained, plain, 0, 0), "");
  EXPECT_NE(weights_mismatch(delayed, plain, 0, 0), "");  // without the drains the delay shows
}

TEST(DelayedUpdate, ResumedFromACheckpointEqualsTheJobThatSaved) {
  ScratchDir dir;
  const std::string job = std::string(kDelayed) + " --set checkpoint.interval=3";
  RunOutput full = train(dir, "full", job + " --set checkpoint.dir=full_ckpt");
  RunOutput resumed = train(
      dir, "resumed",
      job + " --set checkpoint.dir=resumed_ckpt --resume " + (dir.path() / "full_ckpt" / "step-00000003").string());
  ASSERT_EQ(full.losses.size(), 6u);
  ASSERT_EQ(resumed.losses.size(), 3u);  // steps 4-6
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], full.losses[i + 3]) << "step " << i + 4;
  EXPECT_EQ(weights_mismatch(resumed, full, 0, 0), "");
}

// The short version of the 200-step comparison in docs/config.md ("Delayed parameter update").
TEST(DelayedUpdate, FortyStepsLossWithinTwoPercentOfNoDelay) {
  ScratchDir dir;
  RunOutput plain = train(dir, "plain", "--set steps=40 --set steps_per_print=40");
  RunOutput delayed = train(dir, "delayed", std::string("--set steps=40 --set steps_per_print=40") + kDelayed);
  ASSERT_EQ(plain.losses.size(), 40u);  // metrics.jsonl: every step
  ASSERT_EQ(delayed.losses.size(), 40u);
  // The mean of the last 5 steps' losses (one step's loss alone is as noisy as its batch).
  auto tail_mean = [](const std::vector<double>& losses) {
    double sum = 0;
    for (size_t i = losses.size() - 5; i < losses.size(); ++i) sum += losses[i];
    return sum / 5;
  };
  const double plain_loss = tail_mean(plain.losses), delayed_loss = tail_mean(delayed.losses);
  EXPECT_LT(std::abs(delayed_loss - plain_loss), 0.02 * plain_loss) << delayed_loss << " vs " << plain_loss;
  EXPECT_LT(delayed_loss, delayed.losses.front());  // it trains
}

TEST(DelayedUpdate, RefusedAtConfigCheckWithoutAnOptimizerTier) {
  ScratchDir dir;
  RunOutput r = run_zhost(dir.path(), small_job_config(), "refused", std::string("--set zero.stage=2") + kDelayed);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("no tier running the optimizer"), std::string::npos) << r.err;
}

}  // namespace
