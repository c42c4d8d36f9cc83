// plugins/zero_common/plugin_calls.hpp: what every ZeRO stage plugin asks of the host the same way: the
// collectives it runs (one args idiom, the scalar all-reduce of the gradient norm, waiting for and
// abandoning asynchronous work), and the offload tier that runs its optimizer (zero.offload_optimizer),
// over the tier ABI (zhost/offload.h). Shared by stages 1, 2 and 3.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "zhost/cpp/plugin.hpp"
#include "zhost/offload.h"

namespace zhost::zero {

// Arguments for one collective of the given intent (sum; `block` -1 when it is about no block).
zhost_collective_args collective_args(zhost_collective_intent intent, int32_t block = -1);

// Sums `value` (a small tensor, e.g. a squared norm) over all ranks, in place.
void all_reduce_sum(const sdk::Host& host, at::Tensor& value);

// Completes an asynchronous collective; `work` is null afterwards. Throws on failure.
void wait_for(const sdk::Host& host, zhost_work*& work);

// Completes `work` ignoring its outcome, for destructors: never leave a collective in flight; its failure
// was (or will be) reported by whoever waited for it.
void abandon(const sdk::Host& host, zhost_work*& work) noexcept;

// The tier named by zero.offload_optimizer.device, or none. Each optimizer group (a partition, a
// sub-group) is one key: the tier keeps its fp32 master and states, and an fp32 gradient accumulator the
// plugin adds reduced gradients into.
class OptimizerTier {
 public:
  OptimizerTier() = default;  // none
  // Asks the host (at setup: tiers are installed after the instances are created); throws with what to
  // set when the named tier only stores buffers.
  static OptimizerTier find(const sdk::Host& host);
  bool active() const { return ref_.instance != nullptr; }
  const char* name() const { return ref_.name; }

  // Hands group `key` its starting fp32 master (copied); returns the group's gradient accumulator (fp32,
  // host memory, zeros), valid for the job.
  at::Tensor add_group(uint64_t key, const zhost_optimizer_desc& optimizer, const at::Tensor& master) const;
  // One optimizer step of group `key` on accumulator * grad_scale (averaging, unscaling and clipping
  // folded in); writes the updated values, in `params_out`'s dtype, and zeroes the accumulator.
  void step(uint64_t key, int64_t step, double lr, double grad_scale, const at::Tensor& params_out) const;
  // Bytes the tier holds (host memory and storage) for all its groups.
  uint64_t bytes() const;

 private:
  explicit OptimizerTier(const sdk::Host& host) : host_(host) {}
  sdk::Host host_{nullptr, nullptr};
  zhost_tier_ref ref_{};
};

}  // namespace zhost::zero
