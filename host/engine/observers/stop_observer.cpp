// host/engine/observers/stop_observer.cpp: SIGTERM and SIGINT stop the job at the next step boundary, after a
// checkpoint (Note [Stop at a step boundary], stop_request.hpp; Note [Step observers]).
#include <spdlog/spdlog.h>

#include <optional>

#include "host/engine/observers/observers.hpp"
#include "host/engine/stop_request.hpp"

namespace zhost::engine {
namespace {

class StopObserver : public StepObserver {
 public:
  explicit StopObserver(const ObserverContext& c) : world_(c.world), progress_(c.progress) {}

  void on_start(const TrainingPosition&) override { signals_.emplace(); }

  // The loss all-reduce tells every rank; the checkpoint observer saves, the loop stops after the boundary.
  void ask(BoundaryRequests& requests) override { requests.stop = requests.stop || StopRequest::requested(); }

  void after_step(const StepReport& report) override {
    if (!report.stopping || world_.rank() != 0) return;
    progress_.clear();
    spdlog::warn("stopping after step {} on {} (checkpoint saved; resume with --resume latest)", report.record.step,
                 StopRequest::requested() ? StopRequest::signal_name() : "another rank's signal");
  }

 private:
  comm::Comm& world_;
  ProgressBar& progress_;
  std::optional<StopRequest> signals_;  // catches the signals from on_start until the observer is destroyed
};

}  // namespace

std::unique_ptr<StepObserver> make_stop_observer(const ObserverContext& context) {
  return std::make_unique<StopObserver>(context);
}

}  // namespace zhost::engine
