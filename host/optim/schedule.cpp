// host/optim/schedule.cpp: DeepSpeed's LR schedules (WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle,
// LRRangeTest) and the constant schedule. Formulas keep DeepSpeed's order of floating-point operations.
#include "host/optim/schedule.hpp"

#include <spdlog/spdlog.h>

#include <cmath>
#include <string>
#include <vector>

#include "host/core/error.hpp"
#include "host/core/text.hpp"

namespace zhost::optim {

WarmupType parse_warmup_type(std::string_view name) {
  if (name == "log") return WarmupType::kLog;
  if (name == "linear") return WarmupType::kLinear;
  fail_usage("warmup_type '{}' is not known: use 'log' or 'linear'", name);
}

ScheduleSpec default_schedule_spec(std::string_view deepspeed_type) {
  if (deepspeed_type == "none") return ConstantLrSpec{};
  if (deepspeed_type == "WarmupLR") return WarmupLrSpec{};
  if (deepspeed_type == "WarmupDecayLR") return WarmupDecayLrSpec{};
  if (deepspeed_type == "WarmupCosineLR") return WarmupCosineLrSpec{};
  if (deepspeed_type == "OneCycle") return OneCycleSpec{};
  if (deepspeed_type == "LRRangeTest") return LrRangeTestSpec{};
  const std::vector<std::string> known = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR",
                                          "OneCycle", "LRRangeTest",   "none"};
  fail_usage(
      "scheduler type '{}' is not supported; zhost has {}{} (torch.optim.lr_scheduler classes, "
      "which DeepSpeed also accepts, are not available)",
      deepspeed_type, text::join(known), text::did_you_mean(deepspeed_type, known));
}

double LrSchedule::lr_at(int64_t last_batch_iteration) const {
  if (last_batch_iteration < -1) {
    fail("{}: last_batch_iteration must be >= -1, got {}", name(), last_batch_iteration);
  }
  return last_batch_iteration == -1 ? initial_lr() : lr_after(last_batch_iteration);
}

double LrSchedule::lr_for_step(int64_t applied_step) const {
  if (applied_step < 1) fail("{}: optimizer steps count from 1, got {}", name(), applied_step);
  return lr_at(applied_step - 2);
}

std::optional<LrSchedule::Betas> LrSchedule::betas_for_step(int64_t applied_step) const {
  if (applied_step < 1) fail("{}: optimizer steps count from 1, got {}", name(), applied_step);
  return betas_at(applied_step - 2);
}

namespace {

constexpr double kPi = 3.14159265358979323846;  // Python's math.pi

// ---- validation helpers (UsageError naming the schedule and the parameter) ----

void require_positive(std::string_view schedule, std::string_view parameter, int64_t value) {
  if (value <= 0) fail_usage("{}: {} must be > 0, got {}", schedule, parameter, value);
}

void require_non_negative(std::string_view schedule, std::string_view parameter, int64_t value) {
  if (value < 0) fail_usage("{}: {} must be >= 0, got {}", schedule, parameter, value);
}

void require_finite(std::string_view schedule, std::string_view parameter, double value) {
  if (!std::isfinite(value)) fail_usage("{}: {} must be a finite number, got {}", schedule, parameter, value);
}

double require_present(std::string_view schedule, std::string_view parameter, const std::optional<double>& value) {
  if (!value) fail_usage("{}: {} is required", schedule, parameter);
  require_finite(schedule, parameter, *value);
  return *value;
}

void warn_if_total_below_warmup(std::string_view schedule, int64_t total, int64_t warmup) {
  if (total < warmup) {
    spdlog::warn("{}: total_num_steps {} is less than warmup_num_steps {}", schedule, total, warmup);
  }
}

// ---- warmup shared by WarmupLR, WarmupDecayLR and WarmupCosineLR ----

struct Warmup {
  int64_t num_steps;  // DeepSpeed's max(2, warmup_num_steps)
  WarmupType type;
  double inverse_log;

  Warmup(std::string_view schedule, int64_t warmup_num_steps, WarmupType warmup_type)
      : num_steps(std::max<int64_t>(2, warmup_num_steps)),
        type(warmup_type),
        inverse_log(1.0 / std::log(static_cast<double>(num_steps))) {
    require_positive(schedule, "warmup_num_steps", warmup_num_steps);
  }
  bool active(int64_t iteration) const { return iteration < num_steps; }
  // In [0, 1) while active: log(i+1)/log(n) or i/n.
  double gamma(int64_t iteration) const {
    if (type == WarmupType::kLog) return inverse_log * std::log(static_cast<double>(iteration + 1));
    return static_cast<double>(iteration) / static_cast<double>(num_steps);
  }
};

class ConstantLr final : public LrSchedule {
 public:
  explicit ConstantLr(double lr) : lr_(lr) {}
  std::string_view name() const override { return "constant"; }

 protected:
  double initial_lr() const override { return lr_; }
  double lr_after(int64_t) const override { return lr_; }

 private:
  double lr_;
};

// WarmupLR, and WarmupDecayLR when `decay_total_steps` is set.
class WarmupLr final : public LrSchedule {
 public:
  WarmupLr(std::string_view schedule_name, double min_lr, double max_lr, Warmup warmup,
           std::optional<int64_t> decay_total_steps)
      : name_(schedule_name),
        min_lr_(min_lr),
        delta_lr_(max_lr - min_lr),
        warmup_(warmup),
        decay_total_steps_(decay_total_steps) {}
  std::string_view name() const override { return name_; }

 protected:
  double initial_lr() const override { return min_lr_; }
  double lr_after(int64_t iteration) const override { return min_lr_ + delta_lr_ * gamma(iteration); }

 private:
  double gamma(int64_t iteration) const {
    if (warmup_.active(iteration)) return warmup_.gamma(iteration);
    if (!decay_total_steps_) return 1.0;
    const int64_t total = *decay_total_steps_;
    return std::max(
        0.0, static_cast<double>(total - iteration) / std::max(1.0, static_cast<double>(total - warmup_.num_steps)));
  }

  std::string_view name_;
  double min_lr_;
  double delta_lr_;
  Warmup warmup_;
  std::optional<int64_t> decay_total_steps_;
};

class WarmupCosineLr final : public LrSchedule {
 public:
  WarmupCosineLr(double base_lr, const WarmupCosineLrSpec& spec, Warmup warmup)
      : base_lr_(base_lr), spec_(spec), warmup_(warmup) {}
  std::string_view name() const override { return "WarmupCosineLR"; }

 protected:
  // DeepSpeed's get_lr() before the first scheduler step returns 0.
  double initial_lr() const override { return 0.0; }
  double lr_after(int64_t iteration) const override { return base_lr_ * ratio(iteration); }

 private:
  double ratio(int64_t iteration) const {
    if (warmup_.active(iteration)) {
      return spec_.warmup_min_ratio + warmup_.gamma(iteration) * (1.0 - spec_.warmup_min_ratio);
    }
    const double steps_into_decay = static_cast<double>(iteration - warmup_.num_steps + 1);
    const double decay_steps = static_cast<double>(std::max<int64_t>(1, spec_.total_num_steps - warmup_.num_steps));
    const double progress = std::min(1.0, steps_into_decay / decay_steps);
    const double cosine = (1.0 + std::cos(kPi * progress)) / 2.0;
    return std::max(0.0, spec_.cos_min_ratio + (1.0 - spec_.cos_min_ratio) * cosine);
  }

  double base_lr_;
  WarmupCosineLrSpec spec_;
  Warmup warmup_;
};

class OneCycle final : public LrSchedule {
 public:
  OneCycle(double min_lr, double max_lr, const OneCycleSpec& spec)
      : min_lr_(min_lr),
        max_lr_(max_lr),
        first_step_size_(static_cast<double>(spec.cycle_first_step_size)),
        second_step_size_(static_cast<double>(spec.cycle_second_step_size.value_or(spec.cycle_first_step_size))),
        total_size_(first_step_size_ + second_step_size_),
        step_ratio_(first_step_size_ / total_size_),
        first_stair_count_(spec.cycle_first_stair_count),
        second_stair_count_(spec.cycle_second_stair_count.value_or(spec.cycle_first_stair_count)),
        decay_step_size_(spec.decay_step_size),
        decay_lr_rate_(spec.decay_lr_rate),
        momentum_(spec.momentum) {}
  std::string_view name() const override { return "OneCycle"; }

 protected:
  double initial_lr() const override { return min_lr_; }
  double lr_after(int64_t iteration) const override {
    if (static_cast<double>(iteration) < total_size_) {
      return min_lr_ + (max_lr_ - min_lr_) * scale_factor(iteration);
    }
    if (decay_step_size_ == 0 || decay_lr_rate_ == 0) return min_lr_;
    const double decay_iteration = static_cast<double>(iteration) - total_size_ + 1.0;
    const double decay_interval = decay_iteration / static_cast<double>(decay_step_size_);
    return min_lr_ / (1.0 + decay_lr_rate_ * decay_interval);
  }
  // Note [OneCycle's momentum]: DeepSpeed's OneCycle with cycle_momentum (its default) writes the betas
  // (momentum, 0.99) into the optimizer with each lr, beta2 included whatever the optimizer was given:
  // cycle_min_mom at construction; in the cycle, cycle_max_mom - (cycle_max_mom - cycle_min_mom) * scale (the
  // lr's scale, so momentum falls as the lr rises); after it, cycle_max_mom, times 1 + decay_mom_rate * j /
  // decay_step_size when both are non-zero (j as for the lr). DeepSpeed leaves optimizers without betas (SGD)
  // alone, with a warning; so does zhost's DeepSpeed import. The partition and tier get the betas of each step in
  // zhost_step_args / zhost_tier_step_args (ABI 1.1).
  std::optional<Betas> betas_at(int64_t iteration) const override {
    if (!momentum_) return std::nullopt;
    constexpr double kBeta2 = 0.99;
    const OneCycleMomentum& m = *momentum_;
    if (iteration < 0) return Betas{m.cycle_min_mom, kBeta2};
    if (static_cast<double>(iteration) < total_size_)
      return Betas{m.cycle_max_mom - (m.cycle_max_mom - m.cycle_min_mom) * scale_factor(iteration), kBeta2};
    if (decay_step_size_ == 0 || m.decay_mom_rate == 0) return Betas{m.cycle_max_mom, kBeta2};
    const double decay_iteration = static_cast<double>(iteration) - total_size_ + 1.0;
    return Betas{m.cycle_max_mom * (1.0 + m.decay_mom_rate * decay_iteration / static_cast<double>(decay_step_size_)),
                 kBeta2};
  }

 private:
  // Position in the cycle, 0 at cycle_min_lr and 1 at cycle_max_lr.
  double scale_factor(int64_t iteration) const {
    const double batch_iteration = static_cast<double>(iteration + 1);
    const double cycle = std::floor(1.0 + batch_iteration / total_size_);
    const double x = 1.0 + batch_iteration / total_size_ - cycle;
    const bool rising = x <= step_ratio_;
    const int64_t stair_count = rising ? first_stair_count_ : second_stair_count_;
    if (stair_count <= 0) return rising ? x / step_ratio_ : (x - 1.0) / (step_ratio_ - 1.0);
    // Stairs come from the integer offset in the cycle, as upstream does, not from the float scale.
    const double cycle_iteration = std::fmod(batch_iteration, total_size_);
    const double stairs = static_cast<double>(stair_count);
    const double stair_position = cycle_iteration <= first_step_size_
                                      ? cycle_iteration * stairs / first_step_size_
                                      : (total_size_ - cycle_iteration) * stairs / second_step_size_;
    return std::floor(stair_position) / stairs;
  }

  double min_lr_;
  double max_lr_;
  double first_step_size_;
  double second_step_size_;
  double total_size_;
  double step_ratio_;
  int64_t first_stair_count_;
  int64_t second_stair_count_;
  int64_t decay_step_size_;
  double decay_lr_rate_;
  std::optional<OneCycleMomentum> momentum_;
};

class LrRangeTest final : public LrSchedule {
 public:
  explicit LrRangeTest(const LrRangeTestSpec& spec) : spec_(spec) {}
  std::string_view name() const override { return "LRRangeTest"; }

 protected:
  double initial_lr() const override { return spec_.lr_range_test_min_lr; }
  double lr_after(int64_t iteration) const override {
    double interval = static_cast<double>(iteration + 1) / static_cast<double>(spec_.lr_range_test_step_size);
    if (spec_.lr_range_test_staircase) interval = std::floor(interval);
    return spec_.lr_range_test_min_lr * (1.0 + spec_.lr_range_test_step_rate * interval);
  }

 private:
  LrRangeTestSpec spec_;
};

// ---- make_schedule, one overload per spec ----

std::unique_ptr<LrSchedule> build(const ConstantLrSpec&, double base_lr) {
  return std::make_unique<ConstantLr>(base_lr);
}

std::unique_ptr<LrSchedule> build(const WarmupLrSpec& spec, double base_lr) {
  constexpr std::string_view kName = "WarmupLR";
  require_finite(kName, "warmup_min_lr", spec.warmup_min_lr);
  const double max_lr = spec.warmup_max_lr.value_or(base_lr);
  require_finite(kName, "warmup_max_lr", max_lr);
  return std::make_unique<WarmupLr>(kName, spec.warmup_min_lr, max_lr,
                                    Warmup(kName, spec.warmup_num_steps, spec.warmup_type), std::nullopt);
}

std::unique_ptr<LrSchedule> build(const WarmupDecayLrSpec& spec, double) {
  constexpr std::string_view kName = "WarmupDecayLR";
  require_positive(kName, "total_num_steps", spec.total_num_steps);
  require_finite(kName, "warmup_min_lr", spec.warmup_min_lr);
  const double max_lr = spec.warmup_max_lr.value_or(0.001);
  require_finite(kName, "warmup_max_lr", max_lr);
  const Warmup warmup(kName, spec.warmup_num_steps, spec.warmup_type);
  warn_if_total_below_warmup(kName, spec.total_num_steps, warmup.num_steps);
  return std::make_unique<WarmupLr>(kName, spec.warmup_min_lr, max_lr, warmup, spec.total_num_steps);
}

std::unique_ptr<LrSchedule> build(const WarmupCosineLrSpec& spec, double base_lr) {
  constexpr std::string_view kName = "WarmupCosineLR";
  require_positive(kName, "total_num_steps", spec.total_num_steps);
  require_finite(kName, "warmup_min_ratio", spec.warmup_min_ratio);
  require_finite(kName, "cos_min_ratio", spec.cos_min_ratio);
  const Warmup warmup(kName, spec.warmup_num_steps, spec.warmup_type);
  warn_if_total_below_warmup(kName, spec.total_num_steps, warmup.num_steps);
  return std::make_unique<WarmupCosineLr>(base_lr, spec, warmup);
}

std::unique_ptr<LrSchedule> build(const OneCycleSpec& spec, double) {
  constexpr std::string_view kName = "OneCycle";
  const double min_lr = require_present(kName, "cycle_min_lr", spec.cycle_min_lr);
  const double max_lr = require_present(kName, "cycle_max_lr", spec.cycle_max_lr);
  require_finite(kName, "decay_lr_rate", spec.decay_lr_rate);
  require_positive(kName, "cycle_first_step_size", spec.cycle_first_step_size);
  if (spec.cycle_second_step_size) {
    require_non_negative(kName, "cycle_second_step_size", *spec.cycle_second_step_size);
  }
  require_non_negative(kName, "cycle_first_stair_count", spec.cycle_first_stair_count);
  if (spec.cycle_second_stair_count) {
    require_non_negative(kName, "cycle_second_stair_count", *spec.cycle_second_stair_count);
  }
  require_non_negative(kName, "decay_step_size", spec.decay_step_size);
  if (spec.momentum) {
    for (const auto& [key, value] : {std::pair{"cycle_min_mom", spec.momentum->cycle_min_mom},
                                     std::pair{"cycle_max_mom", spec.momentum->cycle_max_mom}}) {
      if (!(value >= 0 && value < 1)) fail_usage("OneCycle {} must be in [0, 1) (a beta1), got {}", key, value);
    }
    require_finite(kName, "decay_mom_rate", spec.momentum->decay_mom_rate);
  }
  return std::make_unique<OneCycle>(min_lr, max_lr, spec);
}

std::unique_ptr<LrSchedule> build(const LrRangeTestSpec& spec, double) {
  constexpr std::string_view kName = "LRRangeTest";
  require_finite(kName, "lr_range_test_min_lr", spec.lr_range_test_min_lr);
  require_finite(kName, "lr_range_test_step_rate", spec.lr_range_test_step_rate);
  require_positive(kName, "lr_range_test_step_size", spec.lr_range_test_step_size);
  return std::make_unique<LrRangeTest>(spec);
}

}  // namespace

std::unique_ptr<LrSchedule> make_schedule(const ScheduleSpec& spec, double base_lr) {
  if (!std::isfinite(base_lr) || base_lr < 0) fail_usage("base learning rate must be >= 0, got {}", base_lr);
  return std::visit([base_lr](const auto& typed_spec) { return build(typed_spec, base_lr); }, spec);
}

}  // namespace zhost::optim
