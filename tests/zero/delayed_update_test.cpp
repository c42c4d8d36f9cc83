// tests/zero/delayed_update_test.cpp: ZeRO-Offload's delayed parameter update (zero.offload_optimizer.
// delayed_update, Note [Delayed parameter update] in zhost/zero/delayed_update.hpp) through real
// `zhost run` jobs on 2 ranks with the offload_cpu tier (the tests' small gpt, fp32, clipping acting), each at
// stage 2 and at stage 3.
//
// The rule is pinned by exact comparisons with runs that need no delay to compute the same numbers:
//   - which weights a step's forward and backward read: the loss of step t (taken on the weights that step's
//     gradients are computed on) must be L_t(W_{t-2}) from the start step S on, L_t(W_{t-1}) before and at
//     it. L_t(W_0) comes from a run with lr 0 throughout; L_t(W_k) from a run without delay resumed after
//     step k with lr 0. With S = 1: step 2 on W_0 fails with no delay, step 3 on W_1 fails with two steps of
//     delay. With S = 3: steps 1-3 equal the run without delay, step 4 reads W_2, step 5 W_3.
//   - before the start step: the job equals the one without delay bit for bit; a job whose last step is the
//     start step (applied at once) too.
//   - what the update is: drained after every step (a checkpoint each step applies the update in flight), the
//     delayed job equals the job without delay bit for bit, so the gradients moved into the tier and the
//     step taken there are exactly the undelayed ones.
//   - checkpoints: a job resumed from a delayed job's checkpoint equals it bit for bit, also from one saved
//     before the start step.
//   - config check refuses a start step below 1.
//   - 40 steps: the loss stays within 2% of the job without delay.
//   - the lookahead (experimental.delayed_update_lookahead) is pinned against PyTorch in
//     tests/reference (DelayedUpdateReference); here only its config rules.
//   - extrapolation (experimental.delayed_update_extrapolation = k): AdamW's step is proportional to
//     its learning rate, so E_1 = W_1 + k (W_1 - W_0) is W_0 stepped once at (1 + k) times step 1's learning
//     rate; L_3(E_1) comes from such a run resumed with lr 0 and agrees up to the rounding of the two ways of
//     computing E_1. Drained every step, or resumed, the job is exact as without extrapolation.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>

#include "tests/support/scratch_dir.hpp"
#include "tests/training/training_test_support.hpp"

using namespace zhost::testing;

namespace {

// 2 ranks over the CPU tier; warmup from a nonzero lr, so that step 1 moves the weights.
const char* kTier =
    "--nproc 2 --set zero.offload_optimizer.device=cpu --set offload_cpu.threads=1 "
    "--set scheduler.warmup_min_lr=0.002 ";
// Each test runs at stage 2 (one tier group: the partition) and at stage 3 (three sub-groups and a persistent
// unit, which must be gathered again whenever the shards are written).
struct Stage {
  const char* name;
  const char* args;
};
void PrintTo(const Stage& s, std::ostream* os) { *os << s.name; }
const Stage kStage2{"Stage2", "--set zero.stage=2 "};
const Stage kStage3{
    "Stage3", "--set zero.stage=3 --set zero.sub_group_size=3000 --set zero.stage3_param_persistence_threshold=40 "};
std::string job = std::string(kTier) + kStage2.args;  // the test's: set by DelayedUpdate::SetUp
// Delayed from the first step (S = 1), and from step 3.
const char* kDelayed =
    " --set zero.offload_optimizer.delayed_update=true --set zero.offload_optimizer.delayed_update_start_step=1";
const char* kDelayedFrom3 =
    " --set zero.offload_optimizer.delayed_update=true --set zero.offload_optimizer.delayed_update_start_step=3";
const char* kNoLr = " --set optimizer.lr=0 --set scheduler.warmup_min_lr=0 --set scheduler.warmup_max_lr=0";
// Delayed from the first step with the weights extrapolated by k = 1.5.
const std::string kExtrapolated = std::string(kDelayed) + " --set experimental.delayed_update_extrapolation=1.5";

RunOutput train(const ScratchDir& dir, const std::string& name, const std::string& args) {
  RunOutput r = run_zhost(dir.path(), small_job_config(), name, job + args);
  EXPECT_EQ(r.exit_code, 0) << name << ":\n" << r.err << r.out;
  return r;
}

// The job without delay and the delayed job `delayed` saving after every step (each save drains), both with
// `extra`: the same losses and final weights, bit for bit. Returns the job without delay.
RunOutput expect_drained_every_step_equals_no_delay(const ScratchDir& dir, const std::string& delayed,
                                                    const std::string& extra = "") {
  RunOutput plain = train(dir, "plain", extra);
  RunOutput drained =
      train(dir, "drained", delayed + extra + " --set checkpoint.interval=1 --set checkpoint.dir=drained_ckpt");
  EXPECT_EQ(plain.losses.size(), 6u);
  EXPECT_EQ(drained.losses, plain.losses);
  EXPECT_EQ(weights_mismatch(drained, plain, 0, 0), "");
  return plain;
}

class DelayedUpdate : public ::testing::TestWithParam<Stage> {
 protected:
  void SetUp() override { job = std::string(kTier) + GetParam().args; }
};
INSTANTIATE_TEST_SUITE_P(Stages, DelayedUpdate, ::testing::Values(kStage2, kStage3),
                         [](const ::testing::TestParamInfo<Stage>& s) { return std::string(s.param.name); });

TEST_P(DelayedUpdate, EachStepReadsTheWeightsFromTwoUpdatesBefore) {
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
  EXPECT_NE(delayed.err.find("delayed parameter update from step 1"), std::string::npos) << delayed.err;
  EXPECT_EQ(delayed.losses[0], frozen.losses[0]);       // step 1 on W_0
  EXPECT_EQ(delayed.losses[1], frozen.losses[1]);       // step 2 on W_0: one step stale
  EXPECT_NE(delayed.losses[1], after_first.losses[0]);  // ... not on W_1
  EXPECT_EQ(delayed.losses[2], after_first.losses[1]);  // step 3 on W_1
  EXPECT_NE(delayed.losses[2], frozen.losses[2]);       // ... not on W_0
}

TEST_P(DelayedUpdate, DrainedAfterEveryStepEqualsNoDelayBitForBit) {
  ScratchDir dir;
  RunOutput plain = expect_drained_every_step_equals_no_delay(dir, kDelayed);
  RunOutput delayed = train(dir, "delayed", kDelayed);
  ASSERT_EQ(plain.losses.size(), 6u);
  expect_clipping_acted(plain);
  EXPECT_NE(weights_mismatch(delayed, plain, 0, 0), "");  // without the drains the delay shows
}

// The job `args` saving after steps 3 and 6, and the job resumed from step 3: steps 4-6 and the final weights
// must be the same bits. Returns the job that saved.
RunOutput expect_resumed_equals_the_job_that_saved(const ScratchDir& dir, const std::string& args) {
  const std::string job = args + " --set checkpoint.interval=3";
  RunOutput full = train(dir, "full", job + " --set checkpoint.dir=full_ckpt");
  RunOutput resumed = train(
      dir, "resumed",
      job + " --set checkpoint.dir=resumed_ckpt --resume " + (dir.path() / "full_ckpt" / "step-00000003").string());
  EXPECT_EQ(full.losses.size(), 6u);
  EXPECT_EQ(resumed.losses.size(), 3u);  // steps 4-6
  if (full.losses.size() != 6u || resumed.losses.size() != 3u) return full;
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], full.losses[i + 3]) << "step " << i + 4;
  EXPECT_EQ(weights_mismatch(resumed, full, 0, 0), "");
  return full;
}

TEST_P(DelayedUpdate, ResumedFromACheckpointEqualsTheJobThatSaved) {
  ScratchDir dir;
  expect_resumed_equals_the_job_that_saved(dir, kDelayed);
}

// Note [Delayed parameter update], the switch: steps 1 to S read the fresh weights W_{t-1}, step S + 1 reads
// W_{S-1} again, and from there step t reads W_{t-2} (S = 3).
TEST_P(DelayedUpdate, FromTheStartStepEachStepReadsTheWeightsFromTwoUpdatesBefore) {
  ScratchDir dir;
  RunOutput plain =  // a checkpoint after every step: W_2 and W_3 to resume from (they change nothing here)
      train(dir, "plain", "--set checkpoint.interval=1 --set checkpoint.keep_last=6 --set checkpoint.dir=plain_ckpt");
  RunOutput delayed = train(dir, "delayed", kDelayedFrom3);
  auto after = [&](int k) {  // L_t(W_k): resumed after step k of the job without delay, lr 0 from there
    const std::string step = "step-0000000" + std::to_string(k);
    return train(dir, "after_" + std::to_string(k),
                 std::string(kNoLr) + " --set checkpoint.dir=after_ckpt --resume " +
                     (dir.path() / "plain_ckpt" / step).string());
  };
  RunOutput after_2 = after(2), after_3 = after(3);
  ASSERT_EQ(plain.losses.size(), 6u);
  ASSERT_EQ(delayed.losses.size(), 6u);
  ASSERT_EQ(after_2.losses.size(), 4u);  // steps 3-6
  ASSERT_EQ(after_3.losses.size(), 3u);  // steps 4-6
  EXPECT_NE(delayed.err.find("delayed parameter update from step 3"), std::string::npos) << delayed.err;
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(delayed.losses[i], plain.losses[i]) << "step " << i + 1;  // fresh
  EXPECT_EQ(delayed.losses[3], after_2.losses[1]);  // step 4 on W_2: the first stale one
  EXPECT_NE(delayed.losses[3], plain.losses[3]);    // ... not on W_3
  EXPECT_EQ(delayed.losses[4], after_3.losses[1]);  // step 5 on W_3 (step 3's gradients were fresh: plain's W_3)
  EXPECT_NE(delayed.losses[4], after_2.losses[2]);  // ... not on W_2
  EXPECT_NE(delayed.losses[4], plain.losses[4]);    // ... nor on W_4
}

// Note [Delayed parameter update], extrapolation, with S = 1 and k = 1.5: steps 1 and 2 read W_0 as without
// extrapolation; step 3 reads E_1 = W_1 + 1.5 (W_1 - W_0), which is W_0 stepped at 2.5 times step 1's learning
// rate (AdamW's step, weight decay included, is proportional to it). The runs that pin it, with `args` added
// to each: the job, and L_t(W_1) and L_t(E_1) (the latter up to rounding) from one step of the job without
// delay at 1 and at 2.5 times the rate, resumed with lr 0.
struct StepThreeRuns {
  RunOutput extrapolated, first, wide, after_first, after_wide;
};

StepThreeRuns step_three_runs(const ScratchDir& dir, const std::string& args) {
  StepThreeRuns r;
  r.extrapolated = train(dir, "extrapolated", "--set steps=4 " + kExtrapolated + args);
  r.first = train(dir, "first", "--set steps=1 --set checkpoint.at_end=true --set checkpoint.dir=first_ckpt" + args);
  r.wide = train(dir, "wide",
                 "--set steps=1 --set checkpoint.at_end=true --set checkpoint.dir=wide_ckpt --set optimizer.lr=0.025 "
                 "--set scheduler.warmup_min_lr=0.005 --set scheduler.warmup_max_lr=0.025" +
                     args);
  auto frozen_after = [&](const std::string& name, const char* checkpoint) {
    return train(dir, name,
                 std::string("--set steps=4") + kNoLr + args + " --resume " +
                     (dir.path() / checkpoint / "step-00000001").string());
  };
  r.after_first = frozen_after("after_first", "first_ckpt");
  r.after_wide = frozen_after("after_wide", "wide_ckpt");
  EXPECT_EQ(r.extrapolated.losses.size(), 4u);
  EXPECT_EQ(r.after_first.losses.size(), 3u);  // steps 2-4
  EXPECT_EQ(r.after_wide.losses.size(), 3u);
  return r;
}

TEST_P(DelayedUpdate, ExtrapolatedStepsReadTheWeightsCarriedOnAlongTheirLastUpdate) {
  ScratchDir dir;
  const StepThreeRuns r = step_three_runs(dir, "");
  RunOutput frozen = train(dir, "frozen", std::string("--set steps=4") + kNoLr);  // L_t(W_0)
  ASSERT_EQ(r.extrapolated.losses.size(), 4u);
  ASSERT_EQ(r.after_first.losses.size(), 3u);
  ASSERT_EQ(r.after_wide.losses.size(), 3u);
  ASSERT_EQ(frozen.losses.size(), 4u);
  ASSERT_EQ(r.first.metrics.size(), 1u);
  ASSERT_EQ(r.wide.metrics.size(), 1u);
  EXPECT_DOUBLE_EQ(r.wide.metrics[0].at("lr"), 2.5 * r.first.metrics[0].at("lr"));  // the reference's premise
  EXPECT_NE(r.extrapolated.err.find("delayed parameter update from step 1, weights extrapolated by 1.5"),
            std::string::npos)
      << r.extrapolated.err;
  EXPECT_EQ(r.extrapolated.losses[0], frozen.losses[0]);  // step 1 on W_0
  EXPECT_EQ(r.extrapolated.losses[1], frozen.losses[1]);  // step 2 on W_0: nothing extrapolated yet
  // Step 3 on E_1: E_1 here is W_1 + 1.5 (W_1 - W_0) in fp32, there one step at 2.5 times the rate; the two
  // differ in the weights' last bits (2.4e-7 in this loss of 5.39 when written). Against that, W_1 (the plain
  // rule) is 1.5 steps away (0.069 in this loss), and k = 1.47 instead of 1.5 moves it by 1.1e-3.
  const double on_e1 = r.after_wide.losses[1], on_w1 = r.after_first.losses[1];
  const double rounding = 1e-6 * on_e1;
  EXPECT_NEAR(r.extrapolated.losses[2], on_e1, rounding);
  EXPECT_GT(std::abs(r.extrapolated.losses[2] - on_w1), 100 * rounding) << "step 3 read W_1, not E_1";
}

// The same in bf16, where the extrapolated weights are cast to the compute dtype after the fp32 arithmetic
// (and the fp32 master is read back from the tier each step): step 3 reads E_1 up to the casts of two nearly
// equal fp32 values (equal when written), and a drained job is still the job without delay, bit for bit.
TEST_P(DelayedUpdate, ExtrapolatedBf16StepsReadTheExtrapolatedWeightsAndDrainExactly) {
  ScratchDir dir;
  const std::string bf16 = " --set bf16.enabled=true";
  const StepThreeRuns r = step_three_runs(dir, bf16);
  ASSERT_EQ(r.extrapolated.losses.size(), 4u);
  ASSERT_EQ(r.after_first.losses.size(), 3u);
  ASSERT_EQ(r.after_wide.losses.size(), 3u);
  const double on_e1 = r.after_wide.losses[1], on_w1 = r.after_first.losses[1];
  const double casts = 1e-4 * on_e1;  // a bf16 ulp here and there
  EXPECT_NEAR(r.extrapolated.losses[2], on_e1, casts);
  EXPECT_GT(std::abs(r.extrapolated.losses[2] - on_w1), 10 * casts) << "step 3 read W_1, not E_1";
  expect_drained_every_step_equals_no_delay(dir, kExtrapolated, bf16);
}

// The lookahead in bf16 completes the fp32 prediction at the boundary and casts it there (fp32 jobs add in place):
// the losses follow the fp32 job's up to bf16's rounding (at most 5e-4 of the loss when written) and leave the
// job without the lookahead from step 3 on (by 4.6e-3 at step 3, 0.1 later); drained every step, the job is
// the one without delay, bit for bit.
TEST_P(DelayedUpdate, LookaheadInBf16FollowsTheFp32PredictionAndDrainsExactly) {
  ScratchDir dir;
  const std::string bf16 = " --set bf16.enabled=true";
  const std::string extrapolated = std::string(kDelayed) + " --set experimental.delayed_update_extrapolation=1.2";
  const std::string ahead = extrapolated + " --set experimental.delayed_update_lookahead=0.1";
  RunOutput fp32 = train(dir, "fp32", ahead);
  RunOutput half = train(dir, "bf16", ahead + bf16);
  RunOutput behind = train(dir, "behind", extrapolated + bf16);
  ASSERT_EQ(fp32.losses.size(), 6u);
  ASSERT_EQ(half.losses.size(), 6u);
  ASSERT_EQ(behind.losses.size(), 6u);
  EXPECT_NE(half.err.find("weights extrapolated by 1.2, lookahead 0.1"), std::string::npos) << half.err;
  for (size_t i = 0; i < 6; ++i)
    EXPECT_NEAR(half.losses[i], fp32.losses[i], 1.5e-3 * fp32.losses[i]) << "step " << i + 1;
  EXPECT_EQ(half.losses[1], behind.losses[1]);  // step 2 reads W_0 in both
  EXPECT_GT(std::abs(half.losses[2] - behind.losses[2]), 2e-3 * behind.losses[2]) << "step 3 read E_1, not P_1";
  expect_drained_every_step_equals_no_delay(dir, ahead, bf16);
}

// Whatever drains applies the optimizer's weights, not their extrapolation: saved after every step (a save
// drains), the job is bit for bit the job without delay; resumed, it is bit for bit the job that saved.
TEST_P(DelayedUpdate, ExtrapolatedJobDrainedOrResumedIsExact) {
  ScratchDir dir;
  expect_drained_every_step_equals_no_delay(dir, kExtrapolated);
  RunOutput full = expect_resumed_equals_the_job_that_saved(dir, kExtrapolated);
  RunOutput stale =
      train(dir, "stale", std::string(kDelayed) + " --set checkpoint.interval=3 --set checkpoint.dir=stale_ckpt");
  ASSERT_EQ(full.losses.size(), 6u);
  ASSERT_EQ(stale.losses.size(), 6u);
  EXPECT_NE(stale.losses[2], full.losses[2]);  // step 3 reads E_1 there, W_1 here: the extrapolation shows
}

// Before the start step the tier steps at once: bit for bit the job without delay, up to the last step when
// it is the start step (nothing in flight, its update applied before the job ends).
TEST_P(DelayedUpdate, BeforeTheStartStepEqualsNoDelayBitForBit) {
  ScratchDir dir;
  RunOutput plain = train(dir, "plain", "");
  RunOutput last = train(dir, "last",
                         " --set zero.offload_optimizer.delayed_update=true "
                         "--set zero.offload_optimizer.delayed_update_start_step=6");
  RunOutput delayed = train(dir, "delayed", kDelayedFrom3);
  ASSERT_EQ(plain.losses.size(), 6u);
  expect_clipping_acted(plain);
  EXPECT_NE(last.err.find("delayed parameter update from step 6"), std::string::npos) << last.err;
  EXPECT_EQ(last.losses, plain.losses);
  EXPECT_EQ(weights_mismatch(last, plain, 0, 0), "");
  EXPECT_NE(weights_mismatch(delayed, plain, 0, 0), "");  // delayed from step 3 on: it shows
}

// A checkpoint saved before the start step (step 2, S = 3): the resumed job's step 3 is the first delayed one,
// as in the job that saved.
TEST_P(DelayedUpdate, ResumedAcrossTheStartStepEqualsTheJobThatSaved) {
  ScratchDir dir;
  const std::string job = std::string(kDelayedFrom3) + " --set checkpoint.interval=2 --set checkpoint.keep_last=3";
  RunOutput full = train(dir, "full", job + " --set checkpoint.dir=full_ckpt");
  RunOutput resumed = train(
      dir, "resumed",
      job + " --set checkpoint.dir=resumed_ckpt --resume " + (dir.path() / "full_ckpt" / "step-00000002").string());
  ASSERT_EQ(full.losses.size(), 6u);
  ASSERT_EQ(resumed.losses.size(), 4u);  // steps 3-6
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(resumed.losses[i], full.losses[i + 2]) << "step " << i + 3;
  EXPECT_EQ(weights_mismatch(resumed, full, 0, 0), "");
}

// The short version of the 200-step comparison in docs/config.md ("Delayed parameter update").
TEST_P(DelayedUpdate, FortyStepsLossWithinTwoPercentOfNoDelay) {
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

// Stages 1-3 sum gradients in one order and the tier steps element by element, so the same rule gives the same
// bits at stage 3 (three sub-groups) as at stage 2 (one partition): delayed from step 3, extrapolated, with
// accumulation, over 10 steps. So the loss figures measured at stage 2 (docs/config.md) hold at stage 3.
TEST(DelayedUpdateStages, Stage3EqualsStage2BitForBit) {
  ScratchDir dir;
  const std::string delayed = std::string(kDelayedFrom3) +
                              " --set experimental.delayed_update_extrapolation=1.5 --set steps=10 "
                              "--set gradient_accumulation_steps=2";
  job = std::string(kTier) + kStage2.args;
  RunOutput stage2 = train(dir, "stage2", delayed);
  job = std::string(kTier) + kStage3.args;
  RunOutput stage3 = train(dir, "stage3", delayed);
  ASSERT_EQ(stage2.losses.size(), 10u);
  EXPECT_EQ(stage3.losses, stage2.losses);
  EXPECT_EQ(weights_mismatch(stage3, stage2, 0, 0), "");
}

// With ZeRO++'s quantized gathers and reductions (qwZ, qgZ) at stage 3: drained after every step, the delayed
// job is the job without delay, bit for bit (the transforms see the same collectives), and undrained it is not.
TEST(DelayedUpdateStages, Stage3WithQuantizedCollectivesDrainedEveryStepEqualsNoDelayBitForBit) {
  ScratchDir dir;
  job = std::string(kTier) + kStage3.args +
        "--set zero.zero_quantized_weights=true --set zero.zero_quantized_gradients=true ";
  RunOutput plain = train(dir, "plain", "");
  RunOutput drained =
      train(dir, "drained", std::string(kDelayed) + " --set checkpoint.interval=1 --set checkpoint.dir=ckpt");
  RunOutput delayed = train(dir, "delayed", kDelayed);
  ASSERT_EQ(plain.losses.size(), 6u);
  EXPECT_NE(plain.err.find("quant_zeropp"), std::string::npos) << plain.err;
  EXPECT_EQ(drained.losses, plain.losses);
  EXPECT_EQ(weights_mismatch(drained, plain, 0, 0), "");
  EXPECT_NE(weights_mismatch(delayed, plain, 0, 0), "");
}

TEST(DelayedUpdateConfig, RefusedAtConfigCheckWithoutAnOptimizerTier) {
  ScratchDir dir;
  RunOutput r = run_zhost(dir.path(), small_job_config(), "refused", std::string("--set zero.stage=2") + kDelayed);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("no tier running the optimizer"), std::string::npos) << r.err;
}

// A delayed update this job never reaches, and a start step without a delayed update, do nothing: each is
// one warning from the config rules, logged once by rank 0 (and printed by `zhost config check`), and the job
// trains as without them.
TEST_P(DelayedUpdate, SettingsThatDelayNothingAreWarnedAboutOnce) {
  ScratchDir dir;
  RunOutput never = train(dir, "never", " --set zero.offload_optimizer.delayed_update=true");
  EXPECT_EQ(count_occurrences(
                never.err,
                "warning: zero.offload_optimizer.delayed_update = true delays no step of this job: its 6 steps end "
                "before zero.offload_optimizer.delayed_update_start_step = 41"),
            1)
      << never.err;
  RunOutput unused = train(dir, "unused", " --set zero.offload_optimizer.delayed_update_start_step=3");
  EXPECT_EQ(count_occurrences(unused.err,
                              "--set zero.offload_optimizer.delayed_update_start_step=3: warning: "
                              "zero.offload_optimizer.delayed_update_start_step = 3 has no effect"),
            1)
      << unused.err;
  RunOutput unused_k = train(dir, "unused_k", " --set experimental.delayed_update_extrapolation=1.5");
  EXPECT_EQ(count_occurrences(unused_k.err,
                              "warning: experimental.delayed_update_extrapolation = 1.5 has no effect: it "
                              "extrapolates the weights of zero.offload_optimizer.delayed_update, which is false"),
            1)
      << unused_k.err;
  RunOutput unused_c = train(dir, "unused_c", " --set experimental.delayed_update_lookahead=0.1");
  EXPECT_EQ(count_occurrences(unused_c.err,
                              "warning: experimental.delayed_update_lookahead = 0.1 has no effect: it looks "
                              "ahead from the weights of zero.offload_optimizer.delayed_update, which is false"),
            1)
      << unused_c.err;
  RunOutput plain = train(dir, "plain", "");
  ASSERT_EQ(plain.losses.size(), 6u);
  EXPECT_EQ(never.losses, plain.losses);
  EXPECT_EQ(unused.losses, plain.losses);
  EXPECT_EQ(unused_k.losses, plain.losses);
  EXPECT_EQ(unused_c.losses, plain.losses);
  EXPECT_EQ(plain.err.find("warning: zero.offload_optimizer"), std::string::npos) << plain.err;
}

// Stage 0 has no tier to delay; stage 3 gathers its parameters from shards during the step in flight, so shards
// kept in a tier are refused (the forward would load them from the tier that steps).
TEST(DelayedUpdateConfig, RefusedAtStageZeroAndWithParameterShardsInATier) {
  ScratchDir dir;
  const std::pair<std::string, std::string> cases[] = {
      {"--set zero.stage=0", "is built for zero.stage 1, 2 and 3, and this config has zero.stage = 0"},
      {"--set zero.stage=3 --set zero.offload_param.device=cpu",
       "at zero.stage 3 is built with the parameter shards in device memory, and this config has "
       "zero.offload_param.device = \"cpu\""},
  };
  for (const auto& [sets, expected] : cases) {
    RunOutput r = run_zhost(dir.path(), small_job_config(), "refused", std::string(kTier) + sets + kDelayed);
    EXPECT_EQ(r.exit_code, 2) << sets << "\n" << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << sets << "\n" << r.err;
  }
}

// The lookahead takes a step of Adam's size (c lr per element on average): refused for SGD and Lion, whose steps
// are not, before any rank starts.
TEST(DelayedUpdateConfig, LookaheadRefusedForOptimizersOtherThanAdam) {
  ScratchDir dir;
  for (const std::string type : {"SGD", "Lion"}) {
    RunOutput r = run_zhost(dir.path(), small_job_config(), "refused" + type,
                            std::string(kTier) + kStage2.args + kDelayed + " --set optimizer.type=" + type +
                                " --set experimental.delayed_update_lookahead=0.1");
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("experimental.delayed_update_lookahead = 0.1 takes a step of Adam's size, and "
                         "optimizer.type is \"" +
                         type + "\"; set it to 0, or use Adam or AdamW"),
              std::string::npos)
        << r.err;
  }
}

// Steps count from 1: a start step below 1 is refused by the config check (`zhost run` runs it before any
// rank starts, as `zhost config check` does), in one line naming the key.
TEST(DelayedUpdateConfig, StartStepBelowOneRefusedAtConfigCheck) {
  ScratchDir dir;
  for (const std::string value : {"-1", "0"}) {
    RunOutput r = run_zhost(dir.path(), small_job_config(), "refused" + value,
                            std::string(kTier) + kStage2.args + kDelayed +
                                " --set zero.offload_optimizer.delayed_update_start_step=" + value);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    const std::string expected =
        "zero.offload_optimizer.delayed_update_start_step = " + value + " is out of range; use a value of at least 1";
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    size_t mentions = 0;  // lines naming the key
    std::istringstream lines(r.err);
    for (std::string line; std::getline(lines, line);)
      if (line.find("delayed_update_start_step") != std::string::npos) ++mentions;
    EXPECT_EQ(mentions, 1u) << r.err;
  }
}

}  // namespace
