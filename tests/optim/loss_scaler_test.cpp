// tests/optim/loss_scaler_test.cpp: the fp16 loss scaler with injected overflows: skipped steps,
// hysteresis, growth after loss_scale_window clean steps, the min_loss_scale floor, consecutive
// hysteresis, the static scale, checkpoint state, and validation.
#include "host/optim/loss_scaler.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "host/core/error.hpp"

namespace zhost::optim {
namespace {

LossScaleSpec dynamic_spec(int initial_scale_power, int64_t window, int64_t hysteresis) {
  LossScaleSpec spec;
  spec.initial_scale_power = initial_scale_power;
  spec.loss_scale_window = window;
  spec.hysteresis = hysteresis;
  return spec;
}

// Feeds `count` clean steps, each of which must be applied.
void clean_steps(LossScaler& scaler, int count) {
  for (int i = 0; i < count; ++i) ASSERT_FALSE(scaler.update(false));
}

TEST(LossScaler, DefaultsAreDeepSpeeds) {
  const LossScaler scaler{LossScaleSpec{}};
  EXPECT_TRUE(scaler.dynamic());
  EXPECT_EQ(scaler.scale(), 65536.0);
  EXPECT_EQ(scaler.hysteresis_left(), 2);
}

TEST(LossScaler, HysteresisDelaysTheFirstHalving) {
  LossScaler scaler(dynamic_spec(16, 1000, 2));
  EXPECT_TRUE(scaler.update(true));  // skipped, scale kept, hysteresis 2 -> 1
  EXPECT_EQ(scaler.scale(), 65536.0);
  EXPECT_EQ(scaler.hysteresis_left(), 1);
  EXPECT_TRUE(scaler.update(true));  // hysteresis spent: halve
  EXPECT_EQ(scaler.scale(), 32768.0);
  EXPECT_EQ(scaler.hysteresis_left(), 1);  // not refilled by halving
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 16384.0);
}

TEST(LossScaler, WithoutHysteresisEveryOverflowHalves) {
  LossScaler scaler(dynamic_spec(10, 1000, 1));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 256.0);
}

TEST(LossScaler, GrowsOnTheStepAfterAWindowOfCleanSteps) {
  LossScaler scaler(dynamic_spec(4, 4, 1));
  clean_steps(scaler, 4);
  EXPECT_EQ(scaler.scale(), 16.0);
  clean_steps(scaler, 1);  // the fifth clean step follows four: double
  EXPECT_EQ(scaler.scale(), 32.0);
  clean_steps(scaler, 3);
  EXPECT_EQ(scaler.scale(), 32.0);
  clean_steps(scaler, 1);
  EXPECT_EQ(scaler.scale(), 64.0);

  // An overflow restarts the count.
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 32.0);
  clean_steps(scaler, 4);
  EXPECT_EQ(scaler.scale(), 32.0);
  clean_steps(scaler, 1);
  EXPECT_EQ(scaler.scale(), 64.0);
}

TEST(LossScaler, GrowthRefillsHysteresis) {
  LossScaler scaler(dynamic_spec(8, 2, 3));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.hysteresis_left(), 1);
  clean_steps(scaler, 2);
  EXPECT_EQ(scaler.hysteresis_left(), 1);  // clean steps alone do not refill it
  clean_steps(scaler, 1);
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_EQ(scaler.hysteresis_left(), 3);
}

TEST(LossScaler, ConsecutiveHysteresisRefillsOnEveryCleanStep) {
  LossScaleSpec spec = dynamic_spec(8, 1000, 3);
  spec.consecutive_hysteresis = true;
  LossScaler consecutive(spec);
  LossScaler plain(dynamic_spec(8, 1000, 3));
  for (LossScaler* scaler : {&consecutive, &plain}) {
    EXPECT_TRUE(scaler->update(true));
    EXPECT_FALSE(scaler->update(false));
    EXPECT_TRUE(scaler->update(true));
    EXPECT_TRUE(scaler->update(true));
  }
  // consecutive: 3 -> 2, refilled to 3, 2, 1: scale kept. plain: 3 -> 2, 2, 1, then halve.
  EXPECT_EQ(consecutive.scale(), 256.0);
  EXPECT_EQ(consecutive.hysteresis_left(), 1);
  EXPECT_EQ(plain.scale(), 128.0);
}

TEST(LossScaler, MinLossScaleIsAFloorAndOverflowAtItIsAnError) {
  LossScaleSpec spec = dynamic_spec(3, 1000, 1);  // 8
  spec.min_loss_scale = 3;
  LossScaler scaler(spec);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 4.0);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 3.0);  // max(2, 3)
  EXPECT_THROW(scaler.update(true), Error);

  spec.raise_error_at_min_scale = false;
  LossScaler tolerant(spec);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(tolerant.update(true));
  EXPECT_EQ(tolerant.scale(), 3.0);
}

TEST(LossScaler, HysteresisIsSpentBeforeTheMinimumErrors) {
  LossScaleSpec spec = dynamic_spec(0, 1000, 2);  // starts at the minimum, 1
  LossScaler scaler(spec);
  EXPECT_TRUE(scaler.update(true));  // hysteresis 2 -> 1, no change yet
  EXPECT_THROW(scaler.update(true), Error);
}

TEST(LossScaler, StaticScaleNeverChangesButStillSkipsOverflows) {
  LossScaleSpec spec;
  spec.loss_scale = 128;
  LossScaler scaler(spec);
  EXPECT_FALSE(scaler.dynamic());
  EXPECT_EQ(scaler.scale(), 128.0);
  EXPECT_TRUE(scaler.update(true));
  clean_steps(scaler, 5000);
  EXPECT_EQ(scaler.scale(), 128.0);

  LossScaler none = LossScaler::none();
  EXPECT_EQ(none.scale(), 1.0);
  EXPECT_FALSE(none.update(false));
}

TEST(LossScaler, StateRestoresTheSameBehaviour) {
  LossScaler original(dynamic_spec(8, 3, 2));
  const std::vector<bool> history = {false, true, false, false, true, true, false};
  for (const bool overflow : history) original.update(overflow);
  LossScaler resumed(dynamic_spec(8, 3, 2));
  resumed.restore(original.state());
  const std::vector<bool> future = {false, false, false, false, true, false, false, false, false};
  for (const bool overflow : future) {
    original.update(overflow);
    resumed.update(overflow);
    EXPECT_EQ(resumed.scale(), original.scale());
    EXPECT_EQ(resumed.hysteresis_left(), original.hysteresis_left());
  }
  LossScaler::State broken = original.state();
  broken.scale = 0;
  EXPECT_THROW(resumed.restore(broken), Error);
}

TEST(LossScaler, RejectsBadSettings) {
  EXPECT_THROW(LossScaler(dynamic_spec(16, 0, 2)), UsageError);
  EXPECT_THROW(LossScaler(dynamic_spec(16, 1000, 0)), UsageError);
  EXPECT_THROW(LossScaler(dynamic_spec(5000, 1000, 2)), UsageError);  // 2^5000 is not a double
  LossScaleSpec spec;
  spec.min_loss_scale = 0;
  EXPECT_THROW(LossScaler{spec}, UsageError);
  spec = LossScaleSpec{};
  spec.loss_scale = -1;
  EXPECT_THROW(LossScaler{spec}, UsageError);
}

}  // namespace
}  // namespace zhost::optim
