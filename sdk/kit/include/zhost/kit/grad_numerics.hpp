// zhost/kit/grad_numerics.hpp: the numerics around an optimizer step: overflow check, global gradient
// norm and clipping (PyTorch's clip_grad_norm_), and writing fp32 masters back into 16-bit model tensors.
//
// Tensors may be of any shape and floating dtype, on one device (CPU or CUDA). Functions returning a
// host value synchronize once per call, not once per tensor. Across data-parallel ranks, all-reduce
// squared_norm() (sum) and take the square root; all-reduce the overflow flag (max).
#pragma once

#include <ATen/core/ATen_fwd.h>  // at::Tensor, at::TensorList, forward-declared

namespace zhost::kit {

// True when any element of any tensor is inf or NaN.
bool has_inf_or_nan(at::TensorList tensors);

// sum over tensors of sum(t^2), as a 0-dim fp64 tensor on the tensors' device (CPU when the list is
// empty), without a host sync, accumulated in fp64 (16-bit and fp32 tensors are read into fp64), so that
// it is the same however the elements are split into tensors or shards. inf/NaN when an element is.
at::Tensor squared_norm(at::TensorList tensors);

// sqrt(squared_norm(tensors)) on the host.
double global_grad_norm(at::TensorList tensors);

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
