// host/optim/loss_scaler.cpp: static and dynamic fp16 loss scaling (the rule is in loss_scaler.hpp).
#include "host/optim/loss_scaler.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "host/core/error.hpp"

namespace zhost::optim {
namespace {

void require_positive_finite(std::string_view setting, double value) {
  if (!std::isfinite(value) || value <= 0) {
    fail_usage("fp16.{} must be a positive number, got {}", setting, value);
  }
}

void require_positive(std::string_view setting, int64_t value) {
  if (value <= 0) fail_usage("fp16.{} must be > 0, got {}", setting, value);
}

}  // namespace

LossScaler::LossScaler(const LossScaleSpec& spec) : LossScaler(spec.loss_scale == 0, spec) {}

LossScaler::LossScaler(bool dynamic, const LossScaleSpec& spec) : dynamic_(dynamic), spec_(spec) {
  if (!dynamic_) {
    require_positive_finite("loss_scale", spec.loss_scale);
    state_.scale = spec.loss_scale;
    return;
  }
  const double initial_scale = std::ldexp(1.0, spec.initial_scale_power);
  if (!std::isfinite(initial_scale) || initial_scale <= 0) {
    fail_usage("fp16.initial_scale_power {} gives no usable scale (2^{})", spec.initial_scale_power,
               spec.initial_scale_power);
  }
  require_positive("loss_scale_window", spec.loss_scale_window);
  require_positive("hysteresis", spec.hysteresis);
  require_positive_finite("min_loss_scale", spec.min_loss_scale);
  state_.scale = initial_scale;
  state_.hysteresis_left = spec.hysteresis;
}

LossScaler LossScaler::none() {
  LossScaleSpec spec;
  spec.loss_scale = 1.0;
  return LossScaler(false, spec);
}

bool LossScaler::update(bool overflow) {
  if (!dynamic_) {
    ++state_.iteration;
    return overflow;
  }
  if (overflow) {
    if (spec_.hysteresis == 1 || state_.hysteresis_left == 1) {
      if (state_.scale == spec_.min_loss_scale && spec_.raise_error_at_min_scale) {
        fail(
            "fp16 gradients overflowed at the minimum loss scale {} (fp16.min_loss_scale) with hysteresis "
            "spent: the loss scale cannot go lower. Look for inf/NaN in the data or the model, lower the "
            "learning rate, or train in bf16",
            state_.scale);
      }
      const double next_scale = std::max(state_.scale / 2.0, spec_.min_loss_scale);
      spdlog::debug("fp16 overflow at iteration {}: step skipped, loss scale {} -> {}", state_.iteration, state_.scale,
                    next_scale);
      state_.scale = next_scale;
    } else {
      spdlog::debug("fp16 overflow at iteration {}: step skipped, loss scale {} kept, hysteresis {} -> {}",
                    state_.iteration, state_.scale, state_.hysteresis_left, state_.hysteresis_left - 1);
      --state_.hysteresis_left;
    }
    state_.last_overflow_iteration = state_.iteration;
  } else {
    if (spec_.consecutive_hysteresis) state_.hysteresis_left = spec_.hysteresis;
    const int64_t stable_steps = state_.iteration - state_.last_overflow_iteration - 1;
    if (stable_steps > 0 && stable_steps % spec_.loss_scale_window == 0) {
      if (!spec_.consecutive_hysteresis) state_.hysteresis_left = spec_.hysteresis;
      state_.scale *= 2.0;
      spdlog::debug("fp16: {} steps without overflow, loss scale raised to {}", stable_steps, state_.scale);
    }
  }
  ++state_.iteration;
  return overflow;
}

void LossScaler::restore(const State& state) {
  if (!std::isfinite(state.scale) || state.scale <= 0 || state.iteration < 0 || state.last_overflow_iteration < -1 ||
      state.last_overflow_iteration >= state.iteration || state.hysteresis_left < 1) {
    fail(
        "loss scaler state to restore is inconsistent (scale {}, iteration {}, last overflow {}, "
        "hysteresis left {})",
        state.scale, state.iteration, state.last_overflow_iteration, state.hysteresis_left);
  }
  state_ = state;
}

}  // namespace zhost::optim
