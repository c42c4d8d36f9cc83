// host/engine/observers/flops_profiler_observer.cpp: the flops profiler's step (flops_profiler.hpp): the step
// times its blocks into the profile, and rank 0 reports it (Note [Step observers]).
#include "host/engine/observers/observers.hpp"
#include "host/telemetry/flops_profiler.hpp"

namespace zhost::engine {
namespace {

class FlopsProfilerObserver : public StepObserver {
 public:
  explicit FlopsProfilerObserver(const ObserverContext& c)
      : profiler_(c.settings.flops_profiler, c.model, c.world.world_size()),
        model_(c.model),
        world_(c.world),
        run_dir_(c.run_dir) {}

  void before_step(StepPlan& plan) override {
    if (!profiler_.profiles(plan.step)) return;
    profiled_ = ProfiledStep{};
    profiled_.block_forward_ms.assign(model_.num_blocks(), 0);
    profiled_.block_backward_ms.assign(model_.num_blocks(), 0);
    plan.profiled = &profiled_;
  }

  // The step filled the profile with this rank's times, taken before the loss all-reduce.
  void after_step(const StepReport& report) override {
    const int64_t step = report.record.step;
    if (profiler_.profiles(step) && world_.rank() == 0) profiler_.report(step, profiled_, run_dir_.path());
  }

 private:
  FlopsProfiler profiler_;
  const model::Model& model_;
  comm::Comm& world_;
  RunDirectory& run_dir_;
  ProfiledStep profiled_;
};

}  // namespace

std::unique_ptr<StepObserver> make_flops_profiler_observer(const ObserverContext& context) {
  return std::make_unique<FlopsProfilerObserver>(context);
}

}  // namespace zhost::engine
