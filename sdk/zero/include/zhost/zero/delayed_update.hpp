// zhost/zero/delayed_update.hpp: ZeRO-Offload's delayed parameter update (DPU,
// zero.offload_optimizer.delayed_update): from step zero.offload_optimizer.delayed_update_start_step on, the
// offload tier's optimizer step of step t runs on a background thread while step t+1's forward and backward
// run on the weights from before it. DelayedTierStep is the whole mechanism over a tier's groups (stages 1
// and 2: one group, the partition; stage 3: its sub-groups); a stage gives it its gradients and a way to write
// weights into its parameters.
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
//     weights (stages 1/2: the all-gather of updated partitions; stage 3: its shards, copied from the host
//     buffers the step wrote), on the hook thread. Only then does it move g_t into the tier's accumulator (a
//     copy: the same bits as adding them there) and start step t's optimizer step in the background. So step
//     t+1's forward and backward read W_{t-1}: W_t = optimizer(W_{t-1}, g_t), the optimizer's states
//     advancing in step order with the usual bias correction (applied_steps + 1).
//   - The switch: step S, the first delayed step, has nothing in flight to apply. Its gradients g_S were
//     computed on W_{S-1} (step S - 1 was synchronous; W_0 when S = 1); W_S starts in the background, and
//     step S + 1 reads W_{S-1} again. From there on step t reads W_{t-2}. So step t's gradients are
//     computed on W_{t-1} for t <= S and on W_{t-2} for t > S; with S = 1 (the delay from the first step)
//     steps 1 and 2 both read W_0.
//   - Extrapolation (experimental.delayed_update_extrapolation = k > 0): what a boundary applies is
//     not W_{t-1} but E_{t-1} = W_{t-1} + k (W_{t-1} - W_{t-2}), the weights carried on along their last
//     update, computed in fp32 from the tier's master before and after the step in flight and then cast to
//     the compute dtype. So step t reads E_{t-2} for t > S + 1 (step S + 1 still reads W_{S-1}). The update
//     itself is unchanged: W_t = optimizer(W_{t-1}, g_t). For an optimizer whose step is proportional to its
//     learning rate (Adam, AdamW, Lion, SGD) E_t is W_{t-1} stepped at (1 + k) times step t's learning rate,
//     up to rounding. Whatever drains (the last step, save, load) applies W_t itself: final weights and
//     checkpoints are the optimizer's, never extrapolated. k = 0 is the plain rule; what k buys:
//     Note [Delayed momentum stability] (bench/dpu/stability.py).
//   - Lookahead (experimental.delayed_update_lookahead = c > 0; Adam and AdamW only): the boundary of
//     step t, which applies E_{t-1} (W_{t-1} when k = 0) while W_t is still being computed, moves it on by a
//     step of c times step t's learning rate along g_t, the gradients of the step in flight, scaled to unit
//     root mean square over the whole model. It applies, computed in fp32 and then cast to the compute dtype,
//         P_{t-1} = E_{t-1} - c lr_t sqrt(N) g_t / ||g_t||,
//     N the model's parameter count and ||g_t|| the global norm of the step prologue (so averaging, loss scale
//     and clipping cancel out). Adam moves a weight by about lr per step, and the share of W_t's update that
//     step t's own gradients bring, (1 - beta1) of the new momentum, is what E_{t-1} cannot carry on: c = 0.1 is
//     that share at beta1 = 0.9. Applied only where E is (not at step S's boundary, with nothing in flight), with
//     nothing added at a boundary whose step overflowed (it has no g_t). The update itself is unchanged, and
//     whatever drains applies W_t. What it buys, measured: docs/config.md, "Delayed parameter update".
//   - Overflow or a skipped step (fp16): step t-1's update is still applied at step t's boundary (E_{t-1}
//     with extrapolation); g_t is dropped and nothing starts, so step t+1 runs on the weights just applied.
//   - Last step (the host marks it, ZHOST_EXT_LAST_STEP): its update is applied before step() returns, so
//     the final weights include every step.
//   - Drained (waited for and applied) also before save_state and load_state, and on a step whose args carry
//     ZHOST_EXT_DRAIN (the host swaps the tier's storage after it, Note [Storage swap]): a checkpoint or a swap
//     sees W_t and the states of t, and the step after a save, a load or a swap runs on W_t (fresh), as step S
//     does. A job that saves or swaps at step k >= S therefore differs from one that does not after step k,
//     and equals one that saves at the same steps; a resumed job equals the one that saved, bit for bit
//     (before S a save or a swap changes nothing).
// Threads: only the optimizer step runs in the background, and it touches only the tier (its master, states
// and accumulator) and the buffers the updated (and extrapolated) weights are written into. The hook thread
// calls neither the tier nor those buffers while a step is in flight, and every collective stays on the hook
// thread. Each wait (join) is bounded by the step itself.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "zhost/cpp/plugin.hpp"
#include "zhost/partition.h"
#include "zhost/zero/plugin_calls.hpp"
#include "zhost/zero/step_prologue.hpp"

namespace zhost::zero {

// The delayed update's keys as a stage reads them; the host declares them, with their defaults
// (host/config/schema/host_schema.cpp), as its rules check them.
struct DelayedUpdateOptions {
  bool enabled = false;      // zero.offload_optimizer.delayed_update
  int64_t start_step = 1;    // zero.offload_optimizer.delayed_update_start_step (S)
  double extrapolation = 0;  // experimental.delayed_update_extrapolation (k)
  double lookahead = 0;      // experimental.delayed_update_lookahead (c)
  bool predicts() const { return extrapolation != 0 || lookahead != 0; }  // a boundary applies E or P, not W
};
// Names the four keys among the stage's read keys (Note [Each key declared once], host/job/job_setup.cpp), and
// reads them.
void read_delayed_update_keys(sdk::DescriptorBuilder& builder);
DelayedUpdateOptions read_delayed_update_options(const sdk::Host& host);
// Throws ZHOST_ERR_CONFIG, saying what to set, when the delayed update is on and no tier runs the optimizer, and
// when the lookahead is set for an optimizer other than Adam or AdamW (its step size is Adam's).
void check_delayed_update_setup(const DelayedUpdateOptions& options, const OptimizerTier& tier,
                                const zhost_optimizer_desc& optimizer);
// ", delayed parameter update from step S[, weights extrapolated by k][, lookahead c]", for a stage's setup line.
std::string delayed_update_summary(const DelayedUpdateOptions& options);

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

// Note [Delayed parameter update] over the tier's groups 0..n-1. The stage reduces each group's gradients into
// accumulator(g), runs the step prologue on them, and calls step() at every boundary; it calls drain() before
// anything reads or replaces the tier's states (save_state, load_state) and states_replaced() after a load.
class DelayedTierStep {
 public:
  // Writes the weights of every group ([numel] each, the compute dtype, in host memory) into the parameters
  // (stages 1/2: the all-gather; stage 3: its shards); on the hook thread.
  using WriteWeights = std::function<void(const std::vector<at::Tensor>& weights)>;
  // Steps the tier now, as without the delay (before the start step): its accumulators hold the gradients.
  using StepNow = std::function<void(const kit::StepScalars& scalars)>;

  // `tier` runs the optimizer; `model_numel`: the parameters of the whole model (N of the lookahead);
  // `tier_accumulators[g]`: group g's, as add_group answered; `outputs[g]`: where the step in flight writes group
  // g's weights, in host memory (empty: allocated here, pinned when `copies` are separate). Throws
  // ZHOST_ERR_CONFIG when extrapolation or the lookahead needs a master the tier cannot read back.
  DelayedTierStep(const OptimizerTier& tier, const HostCopies& copies, const DelayedUpdateOptions& options,
                  int64_t model_numel, at::ScalarType compute_dtype, std::vector<at::Tensor> tier_accumulators,
                  std::vector<at::Tensor> outputs, WriteWeights write_weights);
  DelayedTierStep(DelayedTierStep&&) = delete;  // the background step holds `this`

  // [numel] fp32 host memory, zeros after each step: group g's gradients wait here for the step.
  const at::Tensor& accumulator(size_t g) const { return accumulators_[g]; }
  // The boundary of step args.step, after the step prologue on the accumulators decided `decision` (and filled
  // args.grad_norm); `scalars`: the step's (step_scalars). Returns whether weights were written into the
  // parameters (applied, or stepped now).
  bool step(const zhost_step_args& args, const StepDecision& decision, const kit::StepScalars& scalars,
            const StepNow& step_now);
  // Waits for the step in flight and applies the optimizer's own weights. Returns whether it wrote any.
  bool drain() { return apply(Weights::kExact, 0); }
  // The tier's states changed under it (a load): extrapolation reads its master again.
  void states_replaced() { master_before_current_ = false; }
  // The tier's bytes as last read while no step ran (a busy tier is never called).
  uint64_t tier_bytes() const { return tier_bytes_; }
  // Host memory of this mechanism: accumulators, the outputs it allocated, extrapolation's buffers.
  uint64_t buffer_bytes() const;

 private:
  // At a boundary (kBoundary) the step in flight's weights are applied extrapolated (and looked ahead by
  // `lookahead` times the accumulators), if so set; wherever it is drained (kExact) as the optimizer left them,
  // also when the parameters still hold a prediction.
  enum class Weights { kBoundary, kExact };
  bool apply(Weights how, double lookahead);
  void start(const kit::StepScalars& scalars);
  // The lookahead's factor on the accumulators at this boundary: c lr sqrt(N) / ||g||; 0 without one.
  double lookahead_factor(const zhost_step_args& args, const StepDecision& decision) const;
  // Where the background step leaves group g's E in fp32: the extrapolated weights themselves in fp32 jobs, else
  // the master read back (scratch until the next step).
  const at::Tensor& fp32_prediction(size_t g) const {
    return compute_dtype_ == at::kFloat ? extrapolated_[g] : master_after_[g];
  }

  OptimizerTier tier_;
  DelayedUpdateOptions options_;
  double sqrt_model_numel_ = 0;
  at::ScalarType compute_dtype_ = at::kFloat;
  WriteWeights write_weights_;
  std::vector<at::Tensor> accumulators_, tier_accumulators_;  // [numel] fp32 each
  std::vector<at::Tensor> outputs_;                           // [numel] compute dtype: W of the last step in flight
  uint64_t allocated_output_bytes_ = 0;
  // Extrapolation and lookahead, per group: the tier's fp32 master before the step in flight (current when the
  // last change to it was a delayed step), after it (16-bit jobs: read back from the tier), and E (P) in the
  // compute dtype.
  std::vector<at::Tensor> master_before_, master_after_, extrapolated_;
  bool master_before_current_ = false;
  bool extrapolated_applied_ = false;  // the parameters hold predicted weights, not the optimizer's
  uint64_t tier_bytes_ = 0;
  DelayedUpdate thread_;  // last: joined before the buffers it writes are destroyed
};

}  // namespace zhost::zero
