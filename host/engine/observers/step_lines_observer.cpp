// host/engine/observers/step_lines_observer.cpp: every steps_per_print steps (and the last), rank 0 logs one
// line averaging the steps since the previous one (telemetry.hpp); these lines are the run's records
// (TrainResult::records; Note [Step observers]).
#include <spdlog/spdlog.h>

#include <chrono>
#include <map>
#include <string>

#include "host/engine/observers/observers.hpp"
#include "host/engine/trainer.hpp"

namespace zhost::engine {
namespace {

using Clock = std::chrono::steady_clock;

class StepLinesObserver : public StepObserver {
 public:
  explicit StepLinesObserver(const ObserverContext& c)
      : settings_(c.settings), world_(c.world), progress_(c.progress), rates_(c.rates) {}

  void on_start(const TrainingPosition&) override { window_start_ = Clock::now(); }

  // After a logged line the window starts with the next step, once the swap after the line is done.
  void before_step(StepPlan&) override {
    if (!restart_window_) return;
    window_start_ = Clock::now();
    restart_window_ = false;
  }

  void after_step(const StepReport& report) override {
    const StepRecord& record = report.record;
    if (report.stopping) {  // the job stops here: the step's own record is the run's last
      records_.push_back(record);
      return;
    }
    window_.add(report.timing);
    window_loss_ += record.loss;
    window_flops_per_token_ += record.flops_per_token;
    ++window_steps_;
    // plugin spans of unprinted steps join the window's average
    for (const auto& [name, ms] : record.plugin_ms) window_plugin_ms_[name] += ms;
    if (!record.printed) return;

    // The printed line averages the steps since the last print.
    StepRecord line = record;
    line.loss = window_loss_ / static_cast<double>(window_steps_);
    StepRates rates = rates_;  // the window's own FLOPs per token: each step's (Note [Random-LTD] lowers some)
    rates.flops_per_token = window_flops_per_token_ / static_cast<double>(window_steps_);
    rates.fill(line, std::chrono::duration<double>(Clock::now() - window_start_).count(), window_steps_);
    window_.averages_into(line);
    line.plugin_ms.clear();
    for (const auto& [name, ms] : window_plugin_ms_)
      line.plugin_ms.emplace_back(name, ms / static_cast<double>(window_steps_));
    if (world_.rank() == 0) {
      progress_.clear();
      spdlog::info("{}", format_step_line(line, settings_.steps, settings_.wall_clock_breakdown));
      if (settings_.wall_clock_breakdown) spdlog::info("{}", format_timers_line(line));
    }
    records_.push_back(line);
    window_plugin_ms_.clear();
    window_loss_ = 0;
    window_flops_per_token_ = 0;
    window_steps_ = 0;
    window_ = StepTiming{};
    restart_window_ = true;
  }

  void on_finish(TrainResult& result) override { result.records = std::move(records_); }

 private:
  const TrainSettings& settings_;
  comm::Comm& world_;
  ProgressBar& progress_;
  StepRates rates_;
  std::vector<StepRecord> records_;
  // Since the last printed line:
  StepTiming window_;
  double window_loss_ = 0;
  double window_flops_per_token_ = 0;
  int64_t window_steps_ = 0;
  std::map<std::string, double> window_plugin_ms_;  // plugin spans' ms summed
  Clock::time_point window_start_;
  bool restart_window_ = false;
};

}  // namespace

std::unique_ptr<StepObserver> make_step_lines_observer(const ObserverContext& context) {
  return std::make_unique<StepLinesObserver>(context);
}

}  // namespace zhost::engine
