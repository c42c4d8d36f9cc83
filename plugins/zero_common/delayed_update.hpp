// plugins/zero_common/delayed_update.hpp: ZeRO-Offload's delayed parameter update (DPU,
// zero.offload_optimizer.delayed_update): the offload tier's optimizer step of step t runs on a background
// thread while step t+1's forward and backward run on the weights from before it.
//
// Note [Delayed parameter update]: the one-step-stale rule, exactly. W_t are the weights after t applied
// steps (W_0 the initial ones), g_t the reduced gradients of step t.
//   - Gradients: step t's reduced gradients go into the stage's own fp32 accumulator, never into the tier's,
//     which the step in flight (t-1) reads and zeroes. step() of step t runs the step prologue (Note [Step
//     prologue]: overflow, exact norm, clipping) on them alone, as without DPU.
//   - Boundary: then step() waits for step t-1's optimizer step, if one is in flight, and applies its
//     weights (stages 1/2: the all-gather of updated partitions), on the hook thread. Only then does it move
//     g_t into the tier's accumulator (a copy: the same bits as adding them there) and start step t's
//     optimizer step in the background. So step t+1's forward and backward read W_{t-1}: a gradient g_t
//     is computed on W_{t-2} (on W_0 for steps 1 and 2), and W_t = optimizer(W_{t-1}, g_t), the optimizer's
//     states advancing in step order with the usual bias correction (applied_steps + 1).
//   - Overflow or a skipped step (fp16): step t-1's update is still applied at step t's boundary; g_t is
//     dropped and nothing starts, so step t+1 runs on W_{t-1}, the current weights.
//   - First step: nothing to apply. Last step (the host marks it, ZHOST_EXT_LAST_STEP): its update is applied
//     before step() returns, so the final weights include every step.
//   - Drained (waited for and applied) also before save_state, load_state and gather_param: a checkpoint
//     holds W_t and the states of t, and the step after a save or a load runs on W_t (fresh). A job that
//     saves at step k therefore differs from one that does not after step k; a resumed job equals the one
//     that saved, bit for bit.
// Threads: only the optimizer step runs in the background, and it touches only the tier (its master, states
// and accumulator) and the buffer the tier writes the updated weights into. The hook thread calls neither
// the tier nor that buffer while a step is in flight, and every collective stays on the hook thread. Each
// wait (join) is bounded by the step itself.
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
