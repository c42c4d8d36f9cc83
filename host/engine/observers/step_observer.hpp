// host/engine/observers/step_observer.hpp: what the trainer's step loop tells the observers of its steps, and
// what they may ask of it (Note [Step observers]).
//
// Note [Step observers]
// Trainer::run (host/engine/trainer.cpp) is a loop of steps. A step is one optimizer step of this rank (the
// micro-batches, the partition's step) and then one small all-reduce of its loss, over ranks, that also
// carries what the observers ask at this boundary (BoundaryRequests: a signal's stop request, a waiting
// control command). Everything else a run does around its steps is a StepObserver, each in its own file in
// host/engine/observers/, built from the settings by make_step_observers (observers.cpp), the one place that
// says which observers a job has and in which order:
//   1. flops_profiler   arms the profiled step (before_step); rank 0 reports it (flops_profiler.hpp)
//   2. step_records     rank 0's progress bar, every rank's steps.rankN.jsonl, rank 0's metrics.jsonl
//   3. applied_steps    Note [Steps that apply nothing]: fails the job on a step that cannot apply, and at
//                       the end when no step applied
//   4. model_states     at the end, with partitioned parameters: the model-state figures (model_states.hpp)
//   5. checkpoint       saves when due or when the job stops, else lets an asynchronous save progress
//                       (checkpointing.hpp); at the end, drains one still being written
//   6. stop             Note [Stop at a step boundary]: asks to stop on a signal; says it stopped, on rank 0
//   7. step_lines       every steps_per_print steps, rank 0's line averaging the steps since the last one;
//                       the run's records (TrainResult::records)
//   8. storage_swap     Note [Storage swap]: the scheduled swaps and control commands after the step
// The loop calls on_start, before_step, ask and after_step of each observer in the list's order, and on_finish
// in the reverse order, as a stack unwinds. The order is the run's order of side effects, for these reasons:
//   - The profile's lines come before the progress bar is drawn (1 before 2). The profile's times are taken
//     by the step, before the loss all-reduce; rank 0 reports them after it.
//   - A step's record is in metrics.jsonl before a failing step stops the job (2 before 3), and a step that
//     cannot apply is never checkpointed (3 before 5).
//   - A stop saves its checkpoint first and then says so (5 before 6); a stopping step logs no averaged line
//     (the step's own record is the run's last) and swaps nothing.
//   - The step's line is logged before a swap after it (7 before 8), so that run.log reads in order. A swap
//     after a logged line counts in no line's throughput: the next window starts with the next step; a swap
//     after an unlogged step counts in its window's.
//   - At the end, the last asynchronous save is published before the model-state figures are logged, and
//     both before a job that applied nothing fails (on_finish reversed: 5, 4, 3).
// The loss all-reduce is the only collective the loop adds; an observer that acts on every rank at once (a
// checkpoint, a swap, a stop) decides from what the all-reduce gave every rank alike (StepReport), so that no
// rank waits in a collective another rank skipped.
#pragma once

#include <algorithm>
#include <cstdint>

#include "host/engine/checkpointing.hpp"
#include "host/telemetry/flops_profiler.hpp"
#include "host/telemetry/telemetry.hpp"

namespace zhost::engine {

// Milliseconds spent in each phase, summed over a step or over the steps since the last printed line.
struct StepTiming {
  double forward = 0, backward = 0, reduction = 0, step = 0;
  int64_t micro_batches = 0, steps = 0;
  void add(const StepTiming& other) {
    forward += other.forward;
    backward += other.backward;
    reduction += other.reduction;
    step += other.step;
    micro_batches += other.micro_batches;
    steps += other.steps;
  }
  // Per micro-batch (forward, backward, reduction) and per step, into `record`.
  void averages_into(StepRecord& record) const {
    const double micro = static_cast<double>(std::max<int64_t>(micro_batches, 1));
    record.forward_ms = forward / micro;
    record.backward_ms = backward / micro;
    record.reduction_ms = reduction / micro;
    record.step_ms = step / static_cast<double>(std::max<int64_t>(steps, 1));
  }
};

// What turns wall time into a record's throughput: the job's samples per step, tokens per sample, the model's
// FLOPs per token and the job's peak (Note [Model FLOPs utilization], peak_flops.hpp).
struct StepRates {
  int64_t samples_per_step = 0;  // train_batch_size
  int64_t seq_len = 0;
  double flops_per_token = 0;
  double peak_tflops = 0;
  // Samples, tokens and FLOPs per second and the wall time per step, over `steps` steps in `seconds`.
  void fill(StepRecord& record, double seconds, int64_t steps) const {
    record.samples_per_s = static_cast<double>(samples_per_step * steps) / seconds;
    record.tokens_per_s = record.samples_per_s * static_cast<double>(seq_len);
    record.flops_per_token = flops_per_token;
    record.tflops = flops_per_token * record.tokens_per_s / 1e12;
    record.mfu = peak_tflops > 0 ? record.tflops / peak_tflops : 0;
    record.step_time_ms = seconds * 1e3 / static_cast<double>(steps);
  }
};

// The next step, as the loop plans it; before_step may add to it.
struct StepPlan {
  int64_t step = 0;
  bool printed = false;              // steps_per_print or the last step: its line is logged
  ProfiledStep* profiled = nullptr;  // an observer's: the step times each block into it (the flops profiler)
};

// What one rank asks at a step boundary; the step's loss all-reduce carries it to every rank.
struct BoundaryRequests {
  bool stop = false;            // this rank caught a signal (Note [Stop at a step boundary])
  int64_t control_request = 0;  // rank 0: the number of the oldest waiting control command (Note [Control channel])
};

// One step, as every rank saw it once the ranks agreed.
struct StepReport {
  StepRecord record;            // the step's own record: loss (mean over ranks), rates, timers, memory, storages
  StepTiming timing;            // this rank's time in each phase of the step
  TrainingPosition position;    // where training stands after the step (what a checkpoint saves)
  bool stopping = false;        // a rank asked to stop: the loop ends after this boundary, with a checkpoint
  int64_t control_request = 0;  // the control command to serve after this step (rank 0's number), 0: none
};

struct TrainResult;

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // Before the first step: training starts at `start` (step 0, or a resumed checkpoint's position).
  virtual void on_start(const TrainingPosition& start) { (void)start; }
  virtual void before_step(StepPlan& plan) { (void)plan; }
  // At the boundary after this rank's step, before the loss all-reduce: what this observer asks of the job.
  virtual void ask(BoundaryRequests& requests) { (void)requests; }
  virtual void after_step(const StepReport& report) { (void)report; }
  // After the last step (or the stopping one), in reverse order; `result` has its step counts and
  // stopped_early, and observers add what they kept.
  virtual void on_finish(TrainResult& result) { (void)result; }
};

}  // namespace zhost::engine
