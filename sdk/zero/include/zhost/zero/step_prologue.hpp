// zhost/zero/step_prologue.hpp: the numerics before every ZeRO stage's optimizer step (stages 0-3,
// with or without an offload tier), written once.
//
// Note [Step prologue]: each rank holds a disjoint part of the reduced gradients (its partition, its
// shards; each element is the sum over ranks of loss-scaled gradients, Note [One summation order]). The
// prologue
//   1. finds overflow (an inf or NaN anywhere, on any rank) and the global norm, exactly and independent of
//      how the elements are split (Note [Exact gradient norm] in zhost/kit/grad_numerics.hpp): two
//      all-reduces of a few scalars;
//   2. reports the norm of the averaged, unscaled gradients, norm(sum) / (world * loss_scale), in
//      args.grad_norm (inf on overflow, with args.overflow = 1: every rank skips the step alike);
//   3. returns the one factor the optimizer applies to each reduced element, grad_scale =
//      1 / (world * loss_scale) * clip coefficient, so that averaging, unscaling and clipping are one fp32
//      multiply inside the step (Note [One optimizer arithmetic]) for the kit's Optimizer and every tier.
// The same bits of reduced gradients thus give the same grad_scale and the same weights at every stage.
#pragma once

#include <ATen/core/ATen_fwd.h>
#include <c10/core/Device.h>

#include <functional>

#include "zhost/cpp/plugin.hpp"
#include "zhost/kit/grad_numerics.hpp"
#include "zhost/kit/optimizer.hpp"
#include "zhost/partition.h"

namespace zhost::zero {

struct StepDecision {
  bool overflow = false;
  double grad_scale = 0;  // factor for each reduced element; meaningful without overflow
  double unscale = 0;     // 1 / (world * loss_scale): grad_scale before clipping; meaningful without overflow
};

// `reduced`: this rank's part of the reduced gradients (any floating dtype; host memory or the device).
// `device`: where the collectives' scalars live (the training device: NCCL moves device tensors only).
// Fills args.grad_norm and args.overflow.
StepDecision step_prologue(const sdk::Host& host, at::TensorList reduced, int world_size, const at::Device& device,
                           zhost_step_args& args);
// The same for a rank whose part is not all in memory (Note [Gradients in storage]): its max |g| (+inf for an
// inf or NaN) and a function that returns its limbs at the global max.
StepDecision step_prologue(const sdk::Host& host, float local_max_abs,
                           const std::function<kit::SquareSumLimbs(float global_max)>& local_limbs, int world_size,
                           const at::Device& device, zhost_step_args& args);

// The optimizer's scalars for this step: applied_steps + 1, args.lr, decision.grad_scale and the step's betas
// (args.beta1/beta2 since ABI 1.1, which a momentum schedule may change every step; from a 1.0 host, `spec`'s).
kit::StepScalars step_scalars(const zhost_step_args& args, const StepDecision& decision,
                              const kit::OptimizerSpec& spec);

}  // namespace zhost::zero
