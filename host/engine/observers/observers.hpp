// host/engine/observers/observers.hpp: the observers of a run's steps and the one function that builds their
// list (Note [Step observers], step_observer.hpp).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "host/comm/comm.hpp"
#include "host/engine/observers/step_observer.hpp"
#include "host/engine/settings.hpp"
#include "host/model/model.hpp"

namespace zhost::engine {

class StorageSwaps;
class TraceWriter;

// What the observers of one run are built from; everything in it outlives them.
struct ObserverContext {
  const TrainSettings& settings;
  comm::Comm& world;
  RunDirectory& run_dir;
  TraceWriter* trace;     // Note [Trace file]; null when run.trace is off
  ProgressBar& progress;  // rank 0's (of 0 steps elsewhere): cleared before a line is logged over it
  Checkpointer& checkpointer;
  StorageSwaps* swaps;  // Note [Storage swap]; null: none
  const model::Model& model;
  StepRates rates;
  // Logs the model-state figures after training (model_states.hpp); empty: none to log.
  std::function<void()> final_model_states;
};

using StepObservers = std::vector<std::unique_ptr<StepObserver>>;

// The job's observers, in the order of Note [Step observers].
StepObservers make_step_observers(const ObserverContext& context);

// Each observer, in its own file.
std::unique_ptr<StepObserver> make_flops_profiler_observer(const ObserverContext& context);
std::unique_ptr<StepObserver> make_step_records_observer(const ObserverContext& context);
std::unique_ptr<StepObserver> make_applied_steps_observer(const ObserverContext& context);
std::unique_ptr<StepObserver> make_model_states_observer(const ObserverContext& context);
std::unique_ptr<StepObserver> make_checkpoint_observer(const ObserverContext& context);
std::unique_ptr<StepObserver> make_stop_observer(const ObserverContext& context);
std::unique_ptr<StepObserver> make_step_lines_observer(const ObserverContext& context);
std::unique_ptr<StepObserver> make_storage_swap_observer(const ObserverContext& context);

}  // namespace zhost::engine
