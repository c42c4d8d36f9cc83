// host/engine/observers/step_records_observer.cpp: every step's own record (telemetry.hpp): rank 0's progress
// bar and metrics.jsonl, every rank's steps.rankN.jsonl (Note [Step observers]).
#include "host/engine/observers/observers.hpp"

namespace zhost::engine {
namespace {

class StepRecordsObserver : public StepObserver {
 public:
  explicit StepRecordsObserver(const ObserverContext& c)
      : world_(c.world), run_dir_(c.run_dir), progress_(c.progress) {}

  void after_step(const StepReport& report) override {
    const StepRecord& record = report.record;
    if (world_.rank() == 0) progress_.update(record.step, record.loss);
    run_dir_.append_rank_record(record);
    if (world_.rank() == 0) run_dir_.append_metrics(record);
  }

 private:
  comm::Comm& world_;
  RunDirectory& run_dir_;
  ProgressBar& progress_;
};

}  // namespace

std::unique_ptr<StepObserver> make_step_records_observer(const ObserverContext& context) {
  return std::make_unique<StepRecordsObserver>(context);
}

}  // namespace zhost::engine
