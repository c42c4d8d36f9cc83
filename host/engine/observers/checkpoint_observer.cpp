// host/engine/observers/checkpoint_observer.cpp: the job's checkpoints at step boundaries (checkpointing.hpp;
// Note [Step observers]).
#include "host/engine/observers/observers.hpp"
#include "host/telemetry/trace.hpp"

namespace zhost::engine {
namespace {

class CheckpointObserver : public StepObserver {
 public:
  explicit CheckpointObserver(const ObserverContext& c)
      : settings_(c.settings), checkpointer_(c.checkpointer), trace_(c.trace) {}

  // Collective: every rank sees the same step and the same `stopping`. A stop always saves (Note [Stop at a
  // step boundary]) and publishes the save before the job ends.
  void after_step(const StepReport& report) override {
    const int64_t step = report.record.step;
    if (checkpointer_.due(step, settings_.steps) || report.stopping) {
      const TraceScope span(trace_, "checkpoint", "checkpoint_save", "step", step);
      checkpointer_.save(report.position);
    } else {
      checkpointer_.progress();
    }
    if (report.stopping) checkpointer_.drain();
  }

  // An asynchronous save still being written is published before the job ends.
  void on_finish(TrainResult&) override { checkpointer_.drain(); }

 private:
  const TrainSettings& settings_;
  Checkpointer& checkpointer_;
  TraceWriter* trace_;
};

}  // namespace

std::unique_ptr<StepObserver> make_checkpoint_observer(const ObserverContext& context) {
  return std::make_unique<CheckpointObserver>(context);
}

}  // namespace zhost::engine
