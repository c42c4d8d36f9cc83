// sdk/zero/src/step_prologue.cpp: overflow, exact global norm and the step's gradient factor (Note
// [Step prologue]).
#include "zhost/zero/step_prologue.hpp"

#include <ATen/core/Tensor.h>
#include <ATen/ops/tensor.h>

#include <cmath>
#include <vector>

#include "zhost/kit/grad_numerics.hpp"
#include "zhost/zero/plugin_calls.hpp"

namespace zhost::zero {

StepDecision step_prologue(const sdk::Host& host, at::TensorList reduced, int world_size, const at::Device& device,
                           zhost_step_args& args) {
  return step_prologue(
      host, kit::max_abs(reduced), [&](float global_max) { return kit::square_sum_limbs(reduced, global_max); },
      world_size, device, args);
}

StepDecision step_prologue(const sdk::Host& host, float local_max_abs,
                           const std::function<kit::SquareSumLimbs(float global_max)>& local_limbs, int world_size,
                           const at::Device& device, zhost_step_args& args) {
  StepDecision decision;
  // 1. The largest magnitude over all ranks (+inf for any inf or NaN: overflow on every rank alike).
  at::Tensor max_abs = at::tensor({local_max_abs}, at::TensorOptions().dtype(at::kFloat)).to(device);
  all_reduce(host, max_abs, ZHOST_REDUCE_MAX);
  const float global_max = max_abs.item<float>();
  if (!std::isfinite(global_max)) {
    args.grad_norm = INFINITY;
    args.overflow = 1;
    decision.overflow = true;
    return decision;
  }
  // 2. The fixed-point sum of squares, summed exactly over ranks.
  const kit::SquareSumLimbs mine = local_limbs(global_max);
  at::Tensor limbs = at::tensor(std::vector<int64_t>(mine.limb, mine.limb + kit::kSquareSumLimbs),
                                at::TensorOptions().dtype(at::kLong))
                         .to(device);
  all_reduce(host, limbs, ZHOST_REDUCE_SUM);
  limbs = limbs.cpu();
  kit::SquareSumLimbs summed;
  for (int i = 0; i < kit::kSquareSumLimbs; ++i) summed.limb[i] = limbs.data_ptr<int64_t>()[i];
  // 3. The norm of the averaged, unscaled gradients, and the step's factor.
  const double unscale = 1.0 / (world_size * args.loss_scale);
  const double norm = kit::exact_norm(summed, global_max) * unscale;
  args.grad_norm = norm;
  args.overflow = 0;
  decision.unscale = unscale;
  decision.grad_scale = unscale * kit::clip_coefficient(norm, args.clip_norm);
  return decision;
}

kit::StepScalars step_scalars(const zhost_step_args& args, const StepDecision& decision,
                              const kit::OptimizerSpec& spec) {
  kit::StepScalars scalars{args.applied_steps + 1, args.lr, decision.grad_scale, spec.beta1, spec.beta2};
  if (args.struct_size >= ZHOST_STRUCT_SIZE(zhost_step_args, beta2)) {
    scalars.beta1 = args.beta1;
    scalars.beta2 = args.beta2;
  }
  return scalars;
}

}  // namespace zhost::zero
