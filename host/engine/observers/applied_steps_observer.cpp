// host/engine/observers/applied_steps_observer.cpp: a job whose steps apply no update fails (Note [Steps that
// apply nothing]; Note [Step observers]).
//
// Note [Steps that apply nothing]: a job whose steps apply no update must not end as a success.
//   - fp32 and bf16 have no loss scale to lower: a step whose gradients are not finite (the partition's
//     overflow verdict, the same on every rank) stops the job at once with its step and what to check.
//   - fp16 skips an overflowing step (DeepSpeed's rule); kMaxConsecutiveSkips skipped in a row stop it. The
//     dynamic scaler with DeepSpeed's defaults (2^16, hysteresis 2, floor 1) needs 17 skips to reach its floor
//     and raises there itself; 64 leaves room for a larger initial_scale_power and catches what never recovers:
//     a static fp16.loss_scale, or a floor still too high.
//   - A job that ends without applying a single step (fewer steps than the above) fails too.
// Every rank sees the same verdicts, so every rank stops at the same step and no collective waits.
#include "host/core/error.hpp"
#include "host/engine/observers/observers.hpp"

namespace zhost::engine {
namespace {

constexpr int64_t kMaxConsecutiveSkips = 64;

class AppliedStepsObserver : public StepObserver {
 public:
  explicit AppliedStepsObserver(const ObserverContext& c) : settings_(c.settings) {}

  void on_start(const TrainingPosition& start) override { start_applied_ = last_applied_ = start.applied_steps; }

  void after_step(const StepReport& report) override {
    const StepRecord& record = report.record;
    ++ran_;
    last_applied_ = record.applied_steps;
    consecutive_skips_ = record.skipped ? consecutive_skips_ + 1 : 0;
    if (!record.skipped) return;
    if (settings_.precision != Precision::kFp16)
      fail(
          "step {}: the gradients are not finite (inf/NaN; loss {}) in {} training, which has no loss scale to "
          "lower, so no step can apply; check the data, model.init_std, optimizer.lr and gradient_clipping",
          record.step, record.loss, precision_name(settings_.precision));
    if (consecutive_skips_ >= kMaxConsecutiveSkips)
      fail(
          "step {}: {} fp16 steps in a row skipped for gradient overflow (loss scale {:g}), so the job is not "
          "training; check the data, model.init_std and optimizer.lr, use a dynamic or lower fp16.loss_scale, or "
          "train in bf16",
          record.step, consecutive_skips_, record.loss_scale);
  }

  void on_finish(TrainResult&) override {
    if (ran_ > 0 && last_applied_ == start_applied_)
      fail(
          "all {} steps were skipped for gradient overflow, so the job trained nothing; check the data, "
          "model.init_std and optimizer.lr, use a dynamic or lower fp16.loss_scale, or train in bf16",
          ran_);
  }

 private:
  const TrainSettings& settings_;
  int64_t start_applied_ = 0, last_applied_ = 0;
  int64_t ran_ = 0;  // steps run by this job (not counting a resumed checkpoint's)
  int64_t consecutive_skips_ = 0;
};

}  // namespace

std::unique_ptr<StepObserver> make_applied_steps_observer(const ObserverContext& context) {
  return std::make_unique<AppliedStepsObserver>(context);
}

}  // namespace zhost::engine
