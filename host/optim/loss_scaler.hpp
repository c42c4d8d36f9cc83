// host/optim/loss_scaler.hpp: the fp16 loss scale, static or dynamic, with DeepSpeed's semantics.
//
// Use, once per optimizer step (at the gradient-accumulation boundary):
//   loss * scaler.scale() before backward; grads / scaler.scale() before the optimizer;
//   bool skipped = scaler.update(overflow);   // overflow: has_inf_or_nan or a non-finite global norm,
//   if (!skipped) { optimizer steps, schedule advances }   // agreed across ranks by the caller
//
// The dynamic rule, DeepSpeed's DynamicLossScaler.update_scale (current upstream), with
// hysteresis = fp16.hysteresis ("delayed_shift") and a counter `hysteresis_left` starting there:
//   overflow:
//     if hysteresis == 1 or hysteresis_left == 1: the scale halves, max(scale / 2, min_loss_scale);
//         hysteresis_left is NOT refilled here. If the scale already equals min_loss_scale, that is an
//         error (DeepSpeed raises; raise_error_at_min_scale = false keeps the scale at the floor instead).
//     else: hysteresis_left -= 1 and the scale stays.
//     In both cases the step is skipped and the overflow's iteration is remembered.
//   clean step:
//     if consecutive_hysteresis: hysteresis_left = hysteresis (any clean step refills it).
//     stable = iteration - last_overflow_iteration - 1 (the clean steps before this one since the last
//     overflow, or since the start where last_overflow_iteration = -1);
//     if stable > 0 and stable % loss_scale_window == 0: the scale doubles, and hysteresis_left =
//         hysteresis unless consecutive_hysteresis.
//   The iteration counter advances on every update.
// So the scale doubles on the clean step that follows loss_scale_window clean steps (DeepSpeed 0.14 used
// (iteration - last_overflow_iteration) % loss_scale_window == 0, doubling one step earlier).
// A static scale never changes; its update still reports overflowing steps as skipped, as DeepSpeed's
// ZeRO optimizers skip them. bf16 and fp32 use LossScaler::none() (scale 1).
#pragma once

#include <cstdint>

namespace zhost::optim {

// DeepSpeed's "fp16" block; defaults are DeepSpeed's.
struct LossScaleSpec {
  double loss_scale = 0.0;       // > 0: static scale; 0: dynamic
  int initial_scale_power = 16;  // dynamic: the first scale is 2^initial_scale_power
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;
  bool raise_error_at_min_scale = true;  // DeepSpeed's DynamicLossScaler default; not a config key
};

class LossScaler {
 public:
  // The scaler's state, for checkpoints (DeepSpeed saves the same fields of its scaler).
  struct State {
    double scale = 1.0;
    int64_t iteration = 0;  // updates so far
    int64_t last_overflow_iteration = -1;
    int64_t hysteresis_left = 1;
  };

  // Validates the spec (UsageError naming the setting).
  explicit LossScaler(const LossScaleSpec& spec);
  // Scale 1, never changes: bf16 and fp32 training.
  static LossScaler none();

  double scale() const { return state_.scale; }
  bool dynamic() const { return dynamic_; }
  int64_t hysteresis_left() const { return state_.hysteresis_left; }

  // Records one step's overflow verdict; returns true when the step must be skipped (== overflow).
  // Throws zhost::Error on a dynamic overflow at min_loss_scale with raise_error_at_min_scale.
  bool update(bool overflow);

  const State& state() const { return state_; }
  void restore(const State& state);

 private:
  LossScaler(bool dynamic, const LossScaleSpec& spec);
  bool dynamic_;
  LossScaleSpec spec_;
  State state_;
};

}  // namespace zhost::optim
