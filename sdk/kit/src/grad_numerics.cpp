// sdk/kit/src/grad_numerics.cpp: overflow check, global norm, clipping and the master-to-model copy.
#include "zhost/kit/grad_numerics.hpp"

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/norm.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kit_error.hpp"

namespace zhost::kit {
namespace {

void require_one_device(at::TensorList tensors, std::string_view what) {
  for (const at::Tensor& tensor : tensors) {
    if (!tensor.defined()) detail::fail(ZHOST_ERR_INVALID_ARGUMENT, "{}: a tensor in the list is undefined", what);
    if (tensor.device() != tensors.front().device()) {
      detail::fail(ZHOST_ERR_INVALID_ARGUMENT, "{}: tensors must be on one device, got {} and {}", what,
                   tensors.front().device().str(), tensor.device().str());
    }
  }
}

// The 2-norms of one tensor's consecutive chunks, as 0-dim fp64 tensors accumulated in fp64, so that the
// sum of their squares does not depend (beyond fp64 rounding) on how the elements are split into tensors:
// a partitioned optimizer's norm over flat shards then equals the data-parallel one over whole parameters
// to the last bit of the fp32 clip coefficient. Chunks bound the fp64 temporaries.
void append_chunk_norms(const at::Tensor& tensor, std::vector<at::Tensor>& norms) {
  constexpr int64_t kChunk = int64_t{1} << 24;
  const at::Tensor flat = tensor.reshape({-1});
  for (int64_t start = 0; start < flat.numel(); start += kChunk)
    norms.push_back(
        at::norm(flat.narrow(0, start, std::min(kChunk, flat.numel() - start)), at::Scalar(2), at::kDouble));
}

}  // namespace

bool has_inf_or_nan(at::TensorList tensors) {
  if (tensors.empty()) return false;
  require_one_device(tensors, "has_inf_or_nan");
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> all_finite;
  all_finite.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) all_finite.push_back(at::isfinite(tensor).all());
  return !at::stack(all_finite).all().item<bool>();
}

at::Tensor squared_norm(at::TensorList tensors) {
  if (tensors.empty()) return at::zeros({}, at::TensorOptions().dtype(at::kDouble));
  require_one_device(tensors, "squared_norm");
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> norms;
  norms.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) append_chunk_norms(tensor, norms);
  if (norms.empty()) return at::zeros({}, tensors.front().options().dtype(at::kDouble));
  const at::Tensor stacked = at::stack(norms);
  return stacked.mul(stacked).sum();
}

double global_grad_norm(at::TensorList tensors) { return std::sqrt(squared_norm(tensors).item<double>()); }

double clip_coefficient(double total_norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  const double coefficient = max_norm / (total_norm + 1e-6);
  return std::min(coefficient, 1.0);  // NaN stays NaN: std::min returns its first argument then
}

void scale_in_place(at::TensorList tensors, double factor) {
  if (factor == 1.0) return;
  at::NoGradGuard no_grad;
  for (const at::Tensor& tensor : tensors) tensor.mul_(factor);
}

double clip_grad_norm(at::TensorList tensors, double max_norm) {
  const double total_norm = global_grad_norm(tensors);
  const double coefficient = clip_coefficient(total_norm, max_norm);
  if (coefficient < 1.0) scale_in_place(tensors, coefficient);
  return total_norm;
}

void copy_master_to_model(const at::Tensor& model, const at::Tensor& master) {
  if (master.scalar_type() != at::kFloat || !c10::isFloatingType(model.scalar_type()) ||
      master.numel() != model.numel()) {
    detail::fail(ZHOST_ERR_INVALID_ARGUMENT,
                 "copy_master_to_model needs an fp32 master and a floating model tensor of as many elements, "
                 "got {} ({} elements) and {} ({} elements)",
                 c10::toString(master.scalar_type()), master.numel(), c10::toString(model.scalar_type()),
                 model.numel());
  }
  at::NoGradGuard no_grad;
  model.copy_(master.reshape(model.sizes()));
}

}  // namespace zhost::kit
