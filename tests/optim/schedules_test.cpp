// tests/optim/schedules_test.cpp: each LR schedule against its closed form at chosen iterations (before
// the first scheduler step, warmup boundaries, end of decay, beyond), the step-index convention, defaults,
// and validation.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "host/core/error.hpp"
#include "host/optim/schedule.hpp"

namespace zhost::optim {
namespace {

constexpr double kPi = 3.141592653589793;

void expect_lr(const LrSchedule& schedule, int64_t iteration, double expected) {
  EXPECT_NEAR(schedule.lr_at(iteration), expected, 1e-12 * std::abs(expected) + 1e-300)
      << schedule.name() << " at last_batch_iteration " << iteration;
}

TEST(ConstantSchedule, IsTheBaseLrEverywhere) {
  const auto schedule = make_schedule(ConstantLrSpec{}, 0.25);
  for (const int64_t iteration : {-1, 0, 1, 1000000}) expect_lr(*schedule, iteration, 0.25);
}

TEST(WarmupLR, LogWarmupThenConstant) {
  WarmupLrSpec spec;
  spec.warmup_min_lr = 0.01;
  spec.warmup_max_lr = 0.1;
  spec.warmup_num_steps = 100;
  const auto schedule = make_schedule(spec, 0.5);
  expect_lr(*schedule, -1, 0.01);  // written at construction
  expect_lr(*schedule, 0, 0.01);   // log(1) = 0
  expect_lr(*schedule, 9, 0.01 + 0.09 * std::log(10.0) / std::log(100.0));
  expect_lr(*schedule, 99, 0.1);  // log(100)/log(100): the last warmup iteration reaches max
  expect_lr(*schedule, 100, 0.1);
  expect_lr(*schedule, 1000000, 0.1);
}

TEST(WarmupLR, LinearWarmup) {
  WarmupLrSpec spec;
  spec.warmup_min_lr = 0.1;
  spec.warmup_max_lr = 1.1;
  spec.warmup_num_steps = 10;
  spec.warmup_type = WarmupType::kLinear;
  const auto schedule = make_schedule(spec, 0.5);
  expect_lr(*schedule, 0, 0.1);
  expect_lr(*schedule, 5, 0.6);
  expect_lr(*schedule, 9, 1.0);  // i/n stays below 1 inside the warmup
  expect_lr(*schedule, 10, 1.1);
}

TEST(WarmupLR, DefaultsAndTinyWarmup) {
  WarmupLrSpec spec;  // max: the optimizer's lr (upstream); warmup_num_steps 1 becomes 2
  spec.warmup_num_steps = 1;
  spec.warmup_type = WarmupType::kLinear;
  const auto schedule = make_schedule(spec, 0.3);
  expect_lr(*schedule, 0, 0.0);
  expect_lr(*schedule, 1, 0.15);
  expect_lr(*schedule, 2, 0.3);
}

// Step k uses lr_at(k - 2): the scheduler steps after each applied optimizer step.
TEST(StepConvention, OptimizerStepKUsesIterationKMinusTwo) {
  WarmupLrSpec spec;
  spec.warmup_min_lr = 0.0;
  spec.warmup_max_lr = 1.0;
  spec.warmup_num_steps = 10;
  spec.warmup_type = WarmupType::kLinear;
  const auto schedule = make_schedule(spec, 1.0);
  EXPECT_EQ(schedule->lr_for_step(1), schedule->lr_at(-1));
  EXPECT_EQ(schedule->lr_for_step(2), schedule->lr_at(0));
  EXPECT_DOUBLE_EQ(schedule->lr_for_step(3), 0.1);
  EXPECT_DOUBLE_EQ(schedule->lr_for_step(12), 1.0);
  EXPECT_THROW(schedule->lr_for_step(0), Error);
  EXPECT_THROW(schedule->lr_at(-2), Error);
}

TEST(WarmupDecayLR, LinearDecayToMinAfterWarmup) {
  WarmupDecayLrSpec spec;
  spec.total_num_steps = 100;
  spec.warmup_min_lr = 0.1;
  spec.warmup_max_lr = 1.0;
  spec.warmup_num_steps = 10;
  spec.warmup_type = WarmupType::kLinear;
  const auto schedule = make_schedule(spec, 0.5);
  expect_lr(*schedule, -1, 0.1);
  expect_lr(*schedule, 5, 0.1 + 0.9 * 0.5);
  expect_lr(*schedule, 10, 1.0);  // warmup end: gamma = (100-10)/90
  expect_lr(*schedule, 55, 0.1 + 0.9 * 45.0 / 90.0);
  expect_lr(*schedule, 100, 0.1);  // total: down to warmup_min_lr
  expect_lr(*schedule, 150, 0.1);  // clamped beyond
}

TEST(WarmupDecayLR, DefaultMaxIsDeepSpeeds) {
  WarmupDecayLrSpec spec;
  spec.total_num_steps = 2000;
  const auto schedule = make_schedule(spec, 0.5);  // base lr is not the default max here
  expect_lr(*schedule, 999, 0.001);                // log warmup of 1000 steps reaches max at 999
  expect_lr(*schedule, 1500, 0.001 * 500.0 / 1000.0);
}

TEST(WarmupCosineLR, ScalesTheBaseLr) {
  WarmupCosineLrSpec spec;
  spec.total_num_steps = 100;
  spec.warmup_num_steps = 10;
  spec.warmup_min_ratio = 0.2;
  spec.cos_min_ratio = 0.01;
  spec.warmup_type = WarmupType::kLinear;
  const double base = 0.5;
  const auto schedule = make_schedule(spec, base);
  expect_lr(*schedule, -1, 0.0);  // DeepSpeed's initial lr for this schedule
  expect_lr(*schedule, 0, base * 0.2);
  expect_lr(*schedule, 5, base * (0.2 + 0.5 * 0.8));
  expect_lr(*schedule, 9, base * (0.2 + 0.9 * 0.8));
  auto cosine_lr = [&](double progress) { return base * (0.01 + 0.99 * (1 + std::cos(kPi * progress)) / 2); };
  expect_lr(*schedule, 10, cosine_lr(1.0 / 90.0));  // first decay iteration is already one step in
  expect_lr(*schedule, 54, cosine_lr(0.5));
  expect_lr(*schedule, 99, base * 0.01);   // progress 1 at total - 1
  expect_lr(*schedule, 500, base * 0.01);  // clamped: no rise after the end (upstream)
}

TEST(WarmupCosineLR, LogWarmup) {
  WarmupCosineLrSpec spec;
  spec.total_num_steps = 1000;
  spec.warmup_num_steps = 50;
  const auto schedule = make_schedule(spec, 2.0);
  expect_lr(*schedule, 0, 0.0);
  expect_lr(*schedule, 24, 2.0 * std::log(25.0) / std::log(50.0));
}

TEST(OneCycle, RisesFallsThenDecays) {
  OneCycleSpec spec;
  spec.cycle_min_lr = 0.01;
  spec.cycle_max_lr = 0.1;
  spec.cycle_first_step_size = 10;
  spec.cycle_second_step_size = 20;
  spec.decay_step_size = 10;
  spec.decay_lr_rate = 0.5;
  const auto schedule = make_schedule(spec, 1.0);
  expect_lr(*schedule, -1, 0.01);
  expect_lr(*schedule, 4, 0.01 + 0.09 * 0.5);   // (i+1)/10 of the way up
  expect_lr(*schedule, 9, 0.1);                 // peak
  expect_lr(*schedule, 19, 0.01 + 0.09 * 0.5);  // halfway down the 20-step second half
  expect_lr(*schedule, 28, 0.01 + 0.09 * 0.05);
  expect_lr(*schedule, 29, 0.01);  // cycle end
  expect_lr(*schedule, 30, 0.01 / (1 + 0.5 * 1.0 / 10.0));
  expect_lr(*schedule, 59, 0.01 / (1 + 0.5 * 30.0 / 10.0));
}

// Note [OneCycle's momentum]: beta1 moves against the lr over the same cycle; beta2 is 0.99 throughout.
TEST(OneCycle, MomentumCyclesAgainstTheLr) {
  OneCycleSpec spec;
  spec.cycle_min_lr = 0.01;
  spec.cycle_max_lr = 0.1;
  spec.cycle_first_step_size = 10;
  spec.cycle_second_step_size = 20;
  spec.decay_step_size = 10;
  spec.momentum = OneCycleMomentum{0.8, 0.9, 0.05};
  const auto schedule = make_schedule(spec, 1.0);
  auto expect_beta1 = [&](int64_t applied_step, double expected) {
    const auto betas = schedule->betas_for_step(applied_step);
    ASSERT_TRUE(betas.has_value());
    EXPECT_NEAR(betas->beta1, expected, 1e-12) << "step " << applied_step;
    EXPECT_EQ(betas->beta2, 0.99) << "step " << applied_step;
  };
  expect_beta1(1, 0.8);                             // at construction: cycle_min_mom
  expect_beta1(6, 0.9 - 0.1 * 0.5);                 // iteration 4: halfway up the lr, halfway down the momentum
  expect_beta1(11, 0.8);                            // iteration 9: the lr's peak, the momentum's low
  expect_beta1(21, 0.9 - 0.1 * 0.5);                // iteration 19: halfway down the second half
  expect_beta1(31, 0.9);                            // iteration 29: the cycle's end
  expect_beta1(32, 0.9 * (1 + 0.05 * 1.0 / 10.0));  // iteration 30: decay grows it
  expect_beta1(61, 0.9 * (1 + 0.05 * 30.0 / 10.0));
  spec.momentum.reset();
  EXPECT_FALSE(make_schedule(spec, 1.0)->betas_for_step(5).has_value());  // cycle_momentum off: the optimizer's
  spec.momentum = OneCycleMomentum{0.8, 1.0, 0.0};
  EXPECT_THROW(make_schedule(spec, 1.0), UsageError);
}

TEST(OneCycle, NoDecayStaysAtMin) {
  OneCycleSpec spec;
  spec.cycle_min_lr = 0.01;
  spec.cycle_max_lr = 0.1;
  spec.cycle_first_step_size = 4;  // second half defaults to the first
  const auto schedule = make_schedule(spec, 1.0);
  expect_lr(*schedule, 3, 0.1);
  expect_lr(*schedule, 5, 0.01 + 0.09 * 0.5);
  expect_lr(*schedule, 8, 0.01);
  expect_lr(*schedule, 100, 0.01);
}

TEST(OneCycle, Stairs) {
  OneCycleSpec spec;
  spec.cycle_min_lr = 0.0;
  spec.cycle_max_lr = 1.0;
  spec.cycle_first_step_size = 10;
  spec.cycle_second_step_size = 20;
  spec.cycle_first_stair_count = 2;
  spec.cycle_second_stair_count = 4;
  const auto schedule = make_schedule(spec, 1.0);
  expect_lr(*schedule, 3, 0.0);  // 4 of 10 steps up: still on the first stair
  expect_lr(*schedule, 4, 0.5);
  expect_lr(*schedule, 9, 1.0);
  expect_lr(*schedule, 14, 0.75);  // 15 of 30: (30-15)*4/20 = 3 stairs of 4
  expect_lr(*schedule, 15, 0.5);   // 16: 14*4/20 = 2.8 -> 2
}

TEST(LRRangeTest, ContinuousAndStaircase) {
  LrRangeTestSpec spec;
  spec.lr_range_test_min_lr = 0.001;
  spec.lr_range_test_step_size = 10;
  spec.lr_range_test_step_rate = 2.0;
  const auto continuous = make_schedule(spec, 1.0);
  expect_lr(*continuous, -1, 0.001);
  expect_lr(*continuous, 4, 0.001 * (1 + 2.0 * 0.5));
  spec.lr_range_test_staircase = true;
  const auto staircase = make_schedule(spec, 1.0);
  expect_lr(*staircase, 4, 0.001);
  expect_lr(*staircase, 9, 0.003);
}

TEST(ScheduleValidation, RejectsBadParameters) {
  EXPECT_THROW(make_schedule(WarmupDecayLrSpec{}, 1.0), UsageError);   // total_num_steps required
  EXPECT_THROW(make_schedule(WarmupCosineLrSpec{}, 1.0), UsageError);  // total_num_steps required
  EXPECT_THROW(make_schedule(OneCycleSpec{}, 1.0), UsageError);        // cycle_min_lr/max_lr required
  WarmupLrSpec no_warmup;
  no_warmup.warmup_num_steps = 0;
  EXPECT_THROW(make_schedule(no_warmup, 1.0), UsageError);
  LrRangeTestSpec range;
  range.lr_range_test_step_size = 0;
  EXPECT_THROW(make_schedule(range, 1.0), UsageError);
  EXPECT_THROW(parse_warmup_type("cosine"), UsageError);
  EXPECT_EQ(parse_warmup_type("linear"), WarmupType::kLinear);
}

TEST(ScheduleTypes, DeepSpeedNames) {
  EXPECT_TRUE(std::holds_alternative<WarmupLrSpec>(default_schedule_spec("WarmupLR")));
  EXPECT_TRUE(std::holds_alternative<WarmupDecayLrSpec>(default_schedule_spec("WarmupDecayLR")));
  EXPECT_TRUE(std::holds_alternative<WarmupCosineLrSpec>(default_schedule_spec("WarmupCosineLR")));
  EXPECT_TRUE(std::holds_alternative<OneCycleSpec>(default_schedule_spec("OneCycle")));
  EXPECT_TRUE(std::holds_alternative<LrRangeTestSpec>(default_schedule_spec("LRRangeTest")));
  EXPECT_TRUE(std::holds_alternative<ConstantLrSpec>(default_schedule_spec("none")));
  try {
    default_schedule_spec("WarmupLr");
    FAIL() << "WarmupLr was accepted";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("did you mean 'WarmupLR'"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace zhost::optim
