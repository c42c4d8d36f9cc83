// host/engine/observers/observers.cpp: make_step_observers, the one place that says which observers a job's
// steps have and in which order (Note [Step observers], step_observer.hpp).
#include "host/engine/observers/observers.hpp"

namespace zhost::engine {

StepObservers make_step_observers(const ObserverContext& context) {
  const TrainSettings& s = context.settings;
  StepObservers observers;
  auto add = [&](std::unique_ptr<StepObserver> observer) { observers.push_back(std::move(observer)); };
  if (s.flops_profiler.enabled) add(make_flops_profiler_observer(context));
  add(make_step_records_observer(context));
  add(make_applied_steps_observer(context));
  if (context.final_model_states) add(make_model_states_observer(context));
  add(make_checkpoint_observer(context));
  // Note [Stop at a step boundary]: only a job that saves checkpoints turns a signal into a last save.
  if (s.checkpoint.on_signal && (s.checkpoint.interval > 0 || s.checkpoint.at_end)) add(make_stop_observer(context));
  add(make_step_lines_observer(context));
  if (context.swaps) add(make_storage_swap_observer(context));
  return observers;
}

}  // namespace zhost::engine
