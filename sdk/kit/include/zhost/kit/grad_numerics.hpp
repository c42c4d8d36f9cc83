// zhost/kit/grad_numerics.hpp: the numerics around an optimizer step: overflow check, global gradient
// norm and clipping (PyTorch's clip_grad_norm_), and writing fp32 masters back into 16-bit model tensors.
//
// Tensors may be of any shape and floating dtype, on one device (CPU or CUDA). Functions returning a
// host value synchronize once per call, not once per tensor. Across data-parallel ranks, all-reduce
// squared_norm() (sum) and take the square root; all-reduce the overflow flag (max).
#pragma once

#include <ATen/core/ATen_fwd.h>  // at::Tensor, at::TensorList, forward-declared

#include <cstdint>

namespace zhost::kit {

// True when any element of any tensor is inf or NaN.
bool has_inf_or_nan(at::TensorList tensors);

// sum over tensors of sum(t^2), as a 0-dim fp64 tensor on the tensors' device (CPU when the list is
// empty), without a host sync, accumulated in fp64 (16-bit and fp32 tensors are read into fp64), so that
// it is the same however the elements are split into tensors or shards. inf/NaN when an element is.
at::Tensor squared_norm(at::TensorList tensors);

// sqrt(squared_norm(tensors)) on the host.
double global_grad_norm(at::TensorList tensors);

// Note [Exact gradient norm]: the global norm a ZeRO stage clips with must not depend on how the
// gradients are split over ranks, partitions or tensors, or a partitioned stage clips by a factor a few
// ulps away from stage 0's and the weights part ways. Floating-point sums depend on their order, so the
// sum of squares is computed in fixed point, where addition is exact and associative:
//   1. every rank finds max|g| over its elements (max_abs; an inf or NaN means overflow) and the ranks
//      take the maximum M, exactly (a max does not round);
//   2. with e = the binary exponent of M (M < 2^(e+1)), every element contributes
//      floor(g^2 * 2^(80 - 2(e+1))), an integer below 2^80, computed exactly (g^2 of an fp32 is exact in
//      fp64); a rank adds its contributions in 128-bit integers (exact for < 2^47 elements) and cuts the
//      sum into 32-bit limbs (SquareSumLimbs);
//   3. the ranks sum the limbs as int64 (exact, in any order, for < 2^31 ranks) and exact_norm() turns
//      them into the norm. Each element is truncated below 2^-80 M^2, so the result is within a relative
//      2^-40 of the true norm for up to 2^40 elements, and identical bit for bit however the elements
//      were split.
// Costs two passes over the gradients - vectorized on the host (sdk/kit/src/grad_norm_kernels.hpp), CUDA kernels
// where the gradients are on a GPU (grad_norm_cuda.hpp), with the same integers - and two tiny all-reduces.
constexpr int kSquareSumLimbs = 5;
struct SquareSumLimbs {
  int64_t limb[kSquareSumLimbs] = {};  // limb[i] holds bits [32i, 32i + 32) of the fixed-point sum
};

// max |x| over all elements of all tensors (0 for none); +inf when any element is inf or NaN.
float max_abs(at::TensorList tensors);

// Step 2 for this rank's elements, scaled by `max_abs` (the maximum over all ranks, finite).
SquareSumLimbs square_sum_limbs(at::TensorList tensors, float max_abs);

// Step 3: the norm from the limbs summed over all ranks, and the same `max_abs`.
double exact_norm(const SquareSumLimbs& summed, float max_abs);

// PyTorch's clip_grad_norm_ factor: max_norm / (total_norm + 1e-6), clamped to at most 1. Returns 1 when
// clipping is off (max_norm <= 0, DeepSpeed's gradient_clipping = 0). An inf norm gives 0 and a NaN norm
// NaN, as in PyTorch: check for overflow first.
double clip_coefficient(double total_norm, double max_norm);

// Multiplies every tensor in place by `factor` (nothing happens when factor == 1).
void scale_in_place(at::TensorList tensors, double factor);

// Clips in place to max_norm as torch.nn.utils.clip_grad_norm_ does; returns the norm before clipping.
double clip_grad_norm(at::TensorList tensors, double max_norm);

// Writes the fp32 master into a 16-bit (bf16 or fp16) or fp32 model tensor of the same number of
// elements, rounding to nearest even (at::Tensor::copy_); fp16 overflows to inf beyond 65504.
// `model` may be a view (e.g. a partition of a flat 16-bit buffer); `master` is reshaped to it.
void copy_master_to_model(const at::Tensor& model, const at::Tensor& master);

}  // namespace zhost::kit
