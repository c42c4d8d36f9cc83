// host/optim/schedule.hpp: DeepSpeed's learning-rate schedules as pure functions of the step index.
//
// Parameter names, defaults and formulas are DeepSpeed's (deepspeed/runtime/lr_schedules.py, current
// upstream; differences from the 0.14 series are noted where they exist).
//
// Step index convention, exactly DeepSpeed's. A DeepSpeed scheduler keeps `last_batch_iteration`,
// -1 at construction, where it writes an initial lr into the optimizer. The engine calls
// scheduler.step() after every *applied* optimizer step (not after a step skipped for overflow), which
// increments last_batch_iteration and writes get_lr(). So:
//   lr_at(i)            = the lr in the optimizer while last_batch_iteration == i; lr_at(-1) is the
//                         initial lr written at construction.
//   lr_for_step(k)      = the lr the k-th applied optimizer step (k >= 1) uses = lr_at(k - 2).
// Step 1 uses the initial lr, step 2 uses lr_at(0), step 3 lr_at(1), and so on. For WarmupLR the
// initial lr equals lr_at(0) (warmup_min_lr), so the first two steps share it; WarmupCosineLR's initial
// lr is 0. Both are what DeepSpeed does. On resume, the scheduler state to save is the number of applied
// steps (last_batch_iteration = applied steps - 1).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <variant>

namespace zhost::optim {

enum class WarmupType { kLog, kLinear };

// "log" or "linear". DeepSpeed falls back to log for other names with a warning; zhost rejects them.
WarmupType parse_warmup_type(std::string_view name);

// No schedule: the optimizer's base lr at every step.
struct ConstantLrSpec {};

// WarmupLR: lr = min + (max - min) * gamma(i); gamma(i) = log(i+1)/log(n) (log) or i/n (linear) while
// i < n, then 1; n = max(2, warmup_num_steps).
struct WarmupLrSpec {
  double warmup_min_lr = 0.0;
  std::optional<double> warmup_max_lr;  // default: the optimizer's base lr (DeepSpeed 0.14: 0.001)
  int64_t warmup_num_steps = 1000;      // must be > 0
  WarmupType warmup_type = WarmupType::kLog;
};

// WarmupDecayLR: WarmupLR's warmup, then gamma(i) = max(0, (total - i) / max(1, total - n)) for i >= n,
// i.e. linear decay from warmup_max_lr at i = n down to warmup_min_lr (not 0) at i = total, flat after.
struct WarmupDecayLrSpec {
  int64_t total_num_steps = 0;  // required, > 0
  double warmup_min_lr = 0.0;
  std::optional<double> warmup_max_lr;  // default: 0.001 (DeepSpeed's WarmupDecayLR default)
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::kLog;
};

// WarmupCosineLR: lr = base_lr * ratio(i). Warmup (i < n): ratio = warmup_min_ratio + (1 -
// warmup_min_ratio) * gamma(i) with WarmupLR's gamma. Then progress = min(1, (i - n + 1) / max(1, total -
// n)) and ratio = max(0, cos_min_ratio + (1 - cos_min_ratio) * (1 + cos(pi * progress)) / 2). Upstream
// clamps progress at 1 (the lr stays at cos_min_ratio after total_num_steps); 0.14 let it rise again.
struct WarmupCosineLrSpec {
  int64_t total_num_steps = 0;  // required, > 0
  double warmup_min_ratio = 0.0;
  int64_t warmup_num_steps = 1000;
  double cos_min_ratio = 0.0001;
  WarmupType warmup_type = WarmupType::kLog;
};

// OneCycle: lr rises from cycle_min_lr to cycle_max_lr over cycle_first_step_size iterations, falls back
// over cycle_second_step_size, then decays as cycle_min_lr / (1 + decay_lr_rate * j / decay_step_size)
// (j = iterations after the cycle, continuous) unless decay_step_size or decay_lr_rate is 0 (then flat at
// cycle_min_lr). A stair count > 0 holds the lr flat in that many stairs over its half cycle (upstream;
// 0.14 ignored the stair counts). With `momentum` the betas cycle too (Note [OneCycle's momentum]).
struct OneCycleMomentum {
  double cycle_min_mom = 0.8;  // DeepSpeed's defaults
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;
};
struct OneCycleSpec {
  std::optional<double> cycle_min_lr;  // required
  std::optional<double> cycle_max_lr;  // required
  double decay_lr_rate = 0.0;
  int64_t cycle_first_step_size = 2000;           // must be > 0
  std::optional<int64_t> cycle_second_step_size;  // default: cycle_first_step_size
  int64_t cycle_first_stair_count = 0;
  std::optional<int64_t> cycle_second_stair_count;  // default: cycle_first_stair_count
  int64_t decay_step_size = 0;
  std::optional<OneCycleMomentum> momentum;  // cycle_momentum (DeepSpeed's default: on, for optimizers with betas)
};

// LRRangeTest: lr = min_lr * (1 + step_rate * x), x = (i+1)/step_size, floored when staircase.
struct LrRangeTestSpec {
  double lr_range_test_min_lr = 1e-3;
  int64_t lr_range_test_step_size = 2000;  // must be > 0
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
};

using ScheduleSpec =
    std::variant<ConstantLrSpec, WarmupLrSpec, WarmupDecayLrSpec, WarmupCosineLrSpec, OneCycleSpec, LrRangeTestSpec>;

// DeepSpeed's scheduler "type" names: WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest
// (case-sensitive, as in DeepSpeed), plus "none" for ConstantLrSpec. Returns the spec with defaults.
ScheduleSpec default_schedule_spec(std::string_view deepspeed_type);

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // See the top of this file. Pure; throws zhost::Error for last_batch_iteration < -1.
  double lr_at(int64_t last_batch_iteration) const;
  // The lr of the k-th applied optimizer step, k >= 1: lr_at(k - 2).
  double lr_for_step(int64_t applied_step) const;
  // The betas of the k-th applied step when the schedule sets them (OneCycle's momentum), by the same index
  // convention; none: the optimizer's own.
  struct Betas {
    double beta1, beta2;
  };
  std::optional<Betas> betas_for_step(int64_t applied_step) const;
  virtual std::string_view name() const = 0;

 protected:
  virtual std::optional<Betas> betas_at(int64_t /*last_batch_iteration*/) const { return std::nullopt; }
  virtual double initial_lr() const = 0;                 // lr_at(-1)
  virtual double lr_after(int64_t iteration) const = 0;  // lr_at(i), i >= 0
};

// Validates the spec (UsageError naming the bad parameter) and builds the schedule. `base_lr` is the
// optimizer's lr (WarmupCosineLR scales it; WarmupLR uses it as the default warmup_max_lr).
std::unique_ptr<LrSchedule> make_schedule(const ScheduleSpec& spec, double base_lr);

}  // namespace zhost::optim
