// zhost/zero/delayed_update.hpp: ZeRO-Offload's delayed parameter update (DPU,
// zero.offload_optimizer.delayed_update): from step zero.offload_optimizer.delayed_update_start_step on, the
// offload tier's optimizer step of step t runs on a background thread while step t+1's forward and backward
// run on the weights from before it.
//
// Note [Delayed parameter update]: the one-step-stale rule, exactly. W_t are the weights after t applied
// steps (W_0 the initial ones), g_t the reduced gradients of step t; steps are the job's steps (metrics.jsonl's
// `step`, zhost_step_args.step), and S >= 1 is zero.offload_optimizer.delayed_update_start_step. The indices
// assume no skipped step (fp16 overflow: its item below says what a skipped step does); S counts job steps,
// skipped ones included.
//   - Before S: a step t < S steps synchronously, as without the delay: W_t = optimizer(W_{t-1}, g_t) is
//     applied before step() returns, so step t+1 reads W_t. Its gradients pass through the stage's own
//     accumulator (below) into the tier's, a copy of the same bits, so up to step S - 1 the job equals the
//     job without the delay bit for bit.
//   - From S on: step t >= S is delayed. Its gradients go into the stage's own fp32 accumulator, never into
//     the tier's, which the step in flight (t-1) reads and zeroes. step() of step t runs the step prologue
//     (Note [Step prologue]: overflow, exact norm, clipping) on them alone, as without DPU.
//   - Boundary: then step() waits for step t-1's optimizer step, if one is in flight, and applies its
//     weights (stages 1/2: the all-gather of updated partitions), on the hook thread. Only then does it move
//     g_t into the tier's accumulator (a copy: the same bits as adding them there) and start step t's
//     optimizer step in the background. So step t+1's forward and backward read W_{t-1}: W_t =
//     optimizer(W_{t-1}, g_t), the optimizer's states advancing in step order with the usual bias correction
//     (applied_steps + 1).
//   - The switch: step S, the first delayed step, has nothing in flight to apply. Its gradients g_S were
//     computed on W_{S-1} (step S - 1 was synchronous; W_0 when S = 1); W_S starts in the background, and
//     step S + 1 reads W_{S-1} again. From there on step t reads W_{t-2}. So step t's gradients are
//     computed on W_{t-1} for t <= S and on W_{t-2} for t > S; with S = 1 (the delay from the first step)
//     steps 1 and 2 both read W_0.
//   - Extrapolation (zero.offload_optimizer.delayed_update_extrapolation = k > 0): what a boundary applies is
//     not W_{t-1} but E_{t-1} = W_{t-1} + k (W_{t-1} - W_{t-2}), the weights carried on along their last
//     update, computed in fp32 from the tier's master before and after the step in flight and then cast to
//     the compute dtype. So step t reads E_{t-2} for t > S + 1 (step S + 1 still reads W_{S-1}). The update
//     itself is unchanged: W_t = optimizer(W_{t-1}, g_t). For an optimizer whose step is proportional to its
//     learning rate (Adam, AdamW, Lion, SGD) E_t is W_{t-1} stepped at (1 + k) times step t's learning rate,
//     up to rounding. Whatever drains (the last step, save, load) applies W_t itself: final weights and
//     checkpoints are the optimizer's, never extrapolated. k = 0 is the plain rule; what k buys:
//     Note [Delayed momentum stability] (bench/dpu/stability.py).
//   - Overflow or a skipped step (fp16): step t-1's update is still applied at step t's boundary (E_{t-1}
//     with extrapolation); g_t is dropped and nothing starts, so step t+1 runs on the weights just applied.
//   - Last step (the host marks it, ZHOST_EXT_LAST_STEP): its update is applied before step() returns, so
//     the final weights include every step.
//   - Drained (waited for and applied) also before save_state and load_state: a checkpoint
//     holds W_t and the states of t, and the step after a save or a load runs on W_t (fresh), as step S
//     does. A job that saves at step k >= S therefore differs from one that does not after step k; a
//     resumed job equals the one that saved, bit for bit (before S a save changes nothing).
// Threads: only the optimizer step runs in the background, and it touches only the tier (its master, states
// and accumulator) and the buffers the updated (and extrapolated) weights are written into. The hook thread
// calls neither the tier nor those buffers while a step is in flight, and every collective stays on the hook
// thread. Each wait (join) is bounded by the step itself.
#pragma once

#include <exception>
#include <functional>
#include <thread>

namespace zhost::zero {

class DelayedUpdate {
 public:
  DelayedUpdate() = default;
  // Joins a step still in flight (a job that failed): its update is dropped.
  ~DelayedUpdate();
  DelayedUpdate(const DelayedUpdate&) = delete;
  DelayedUpdate& operator=(const DelayedUpdate&) = delete;

  // Runs `step` (the tier's optimizer step) on a background thread; none may be in flight.
  void start(std::function<void()> step);
  // Waits for the step in flight. Returns false when none was; rethrows the step's failure.
  bool wait();

 private:
  std::thread thread_;
  std::exception_ptr failure_;  // written by the background thread, read after join
};

}  // namespace zhost::zero
