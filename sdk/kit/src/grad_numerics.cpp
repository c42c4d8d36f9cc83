// sdk/kit/src/grad_numerics.cpp: overflow check, global norm, clipping and the master-to-model copy.
#include "zhost/kit/grad_numerics.hpp"

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/norm.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "grad_norm_kernels.hpp"
#include "isa_choice.hpp"
#include "kit_error.hpp"

#if ZHOST_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "grad_norm_cuda.hpp"
#endif

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

namespace {

using detail::Uint128;
constexpr int kFractionBits = 80;  // Note [Exact gradient norm]: every g^2 / 2^(2(e+1)) scaled to 2^80

// The norm passes of the selected ISA (the CPU kernels' choice, zhost/kit/cpu_isa.hpp).
detail::NormKernels norm_kernels() {
  const cpu_optim::Isa isa = detail::chosen_isa(std::nullopt, "exact gradient norm");
#if defined(ZHOST_CPU_OPTIM_X86)
  if (isa == cpu_optim::Isa::kAvx512) return detail::avx512_norm_kernels();
  if (isa == cpu_optim::Isa::kAvx2) return detail::avx2_norm_kernels();
#endif
  return detail::scalar_norm_kernels();
}

void require_norm_dtype(const at::Tensor& tensor) {
  const at::ScalarType type = tensor.scalar_type();
  if (type != at::kFloat && type != at::kBFloat16 && type != at::kHalf) {
    detail::fail(ZHOST_ERR_INVALID_ARGUMENT, "exact gradient norm: {} tensors are not supported (fp32, bf16, fp16)",
                 c10::toString(type));
  }
}

// Whether the device kernels take `tensor` where it is (grad_norm_cuda.hpp); else it is reduced on the host.
bool reduced_on_device(const at::Tensor& tensor) {
#if ZHOST_WITH_CUDA
  return tensor.is_cuda();
#else
  (void)tensor;
  return false;
#endif
}

// Reduces partial(const float* run, int64_t n) -> T over the values of every tensor the device kernels do
// not take (fp32, bf16 or fp16; a CUDA tensor in a build without them is copied to the host first) with
// combine(T, T), which must be exact and order-free (a max, an integer sum), so that the result does not
// depend on the split: a contiguous fp32 tensor is cut into runs over LibTorch's intra-op threads; a 16-bit
// one goes through fp32 copies of consecutive pieces.
template <class T, class Partial, class Combine>
T reduce_fp32_runs(at::TensorList tensors, T init, const Partial& partial, const Combine& combine) {
  constexpr int64_t kGrain = int64_t{1} << 18;  // elements a thread takes at least
  T result = init;
  for (const at::Tensor& tensor : tensors) {
    if (reduced_on_device(tensor)) continue;
    require_norm_dtype(tensor);
    const at::Tensor host = (tensor.device().is_cpu() ? tensor : tensor.cpu()).contiguous().reshape({-1});
    const at::ScalarType type = host.scalar_type();
    if (type == at::kFloat) {
      const float* data = host.data_ptr<float>();
      result = combine(result, at::parallel_reduce(
                                   0, host.numel(), kGrain, init,
                                   [&](int64_t begin, int64_t end, T ident) {
                                     return combine(ident, partial(data + begin, end - begin));
                                   },
                                   combine));
      continue;
    }
    constexpr int64_t kPiece = int64_t{1} << 16;
    for (int64_t start = 0; start < host.numel(); start += kPiece) {
      const at::Tensor piece = host.narrow(0, start, std::min(kPiece, host.numel() - start)).to(at::kFloat);
      result = combine(result, partial(piece.data_ptr<float>(), piece.numel()));
    }
  }
  return result;
}

// 2^(kFractionBits - 2(e+1)) for M = max_abs, e its binary exponent: M^2 scaled stays below 2^80.
int scale_exponent(float max_abs) { return kFractionBits - 2 * std::ilogb(max_abs) - 2; }

#if ZHOST_WITH_CUDA
// Runs launch(data, dtype, n, stream) for every CUDA tensor of `tensors` (contiguous, on the current stream of
// its device) into counters `accumulator` made by make(device) on the first one's device, and returns them on
// the host (one copy, which waits for the kernels); an undefined tensor when there is no CUDA tensor.
template <class Make, class Launch>
at::Tensor reduce_on_device(at::TensorList tensors, const Make& make, const Launch& launch) {
  at::Tensor accumulator;
  for (const at::Tensor& tensor : tensors) {
    if (!reduced_on_device(tensor)) continue;
    require_norm_dtype(tensor);
    if (!accumulator.defined()) accumulator = make(tensor.device());
    if (tensor.device() != accumulator.device()) {
      detail::fail(ZHOST_ERR_INVALID_ARGUMENT, "exact gradient norm: tensors on {} and {}", accumulator.device().str(),
                   tensor.device().str());
    }
    const at::Tensor flat = tensor.contiguous();
    const c10::cuda::CUDAGuard guard(flat.device());
    const detail::cuda::NormDtype type = flat.scalar_type() == at::kFloat      ? detail::cuda::NormDtype::kFloat
                                         : flat.scalar_type() == at::kBFloat16 ? detail::cuda::NormDtype::kBFloat16
                                                                               : detail::cuda::NormDtype::kHalf;
    launch(flat.const_data_ptr(), type, flat.numel(), c10::cuda::getCurrentCUDAStream(flat.device().index()).stream(),
           accumulator);
  }
  return accumulator.defined() ? accumulator.cpu() : accumulator;
}
#endif

}  // namespace

float max_abs(at::TensorList tensors) {
  const detail::NormKernels kernels = norm_kernels();
  uint32_t largest = reduce_fp32_runs(
      tensors, uint32_t{0}, [&](const float* run, int64_t n) { return kernels.max_abs_bits(run, n); },
      [](uint32_t a, uint32_t b) { return std::max(a, b); });
#if ZHOST_WITH_CUDA
  const at::Tensor on_device = reduce_on_device(
      tensors, [](at::Device device) { return at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(device)); },
      [](const void* x, detail::cuda::NormDtype type, int64_t n, void* stream, at::Tensor& bits) {
        detail::cuda::max_abs_bits(x, type, n, reinterpret_cast<uint32_t*>(bits.data_ptr<int32_t>()), stream);
      });
  if (on_device.defined()) largest = std::max(largest, static_cast<uint32_t>(on_device.data_ptr<int32_t>()[0]));
#endif
  if (largest >= 0x7F800000u) return INFINITY;  // inf, or NaN: overflow
  float result;
  std::memcpy(&result, &largest, sizeof(result));
  return result;
}

SquareSumLimbs square_sum_limbs(at::TensorList tensors, float max_abs) {
  SquareSumLimbs limbs;
  if (!(max_abs > 0) || !std::isfinite(max_abs)) return limbs;    // all zero (or overflow: not used)
  const double scale = std::ldexp(1.0, scale_exponent(max_abs));  // a power of two in [2^-176, 2^376]
  const detail::NormKernels kernels = norm_kernels();
  Uint128 sum = reduce_fp32_runs(
      tensors, Uint128{0}, [&](const float* run, int64_t n) { return kernels.square_sum(run, n, scale); },
      [](Uint128 a, Uint128 b) { return a + b; });
#if ZHOST_WITH_CUDA
  const at::Tensor parts = reduce_on_device(
      tensors, [](at::Device device) { return at::zeros({3}, at::TensorOptions().dtype(at::kLong).device(device)); },
      [&](const void* x, detail::cuda::NormDtype type, int64_t n, void* stream, at::Tensor& counters) {
        detail::cuda::add_square_sum_parts(x, type, n, scale, reinterpret_cast<uint64_t*>(counters.data_ptr<int64_t>()),
                                           stream);
      });
  if (parts.defined()) {
    const auto* part = reinterpret_cast<const uint64_t*>(parts.data_ptr<int64_t>());
    sum += (static_cast<Uint128>(part[0]) << 54) + (static_cast<Uint128>(part[1]) << 27) + part[2];
  }
#endif
  // Four limbs hold one rank's sum (below 2^127); the fifth is headroom for the carries of many ranks.
  for (int i = 0; i < 4; ++i) limbs.limb[i] = static_cast<int64_t>((sum >> (32 * i)) & 0xFFFFFFFFu);
  return limbs;
}

double exact_norm(const SquareSumLimbs& summed, float max_abs) {
  if (!(max_abs > 0) || !std::isfinite(max_abs)) return max_abs > 0 ? INFINITY : 0.0;
  // The limbs of every rank were added: carry them into one 160-bit value, then to fp64 from the top.
  Uint128 carry = 0;
  uint32_t words[kSquareSumLimbs + 2] = {};
  for (int i = 0; i < kSquareSumLimbs; ++i) {
    carry += static_cast<Uint128>(static_cast<uint64_t>(summed.limb[i]));
    words[i] = static_cast<uint32_t>(carry & 0xFFFFFFFFu);
    carry >>= 32;
  }
  words[kSquareSumLimbs] = static_cast<uint32_t>(carry & 0xFFFFFFFFu);
  words[kSquareSumLimbs + 1] = static_cast<uint32_t>(carry >> 32);
  double total = 0;
  for (int i = kSquareSumLimbs + 1; i >= 0; --i) total = total * 4294967296.0 + static_cast<double>(words[i]);
  return std::sqrt(std::ldexp(total, -scale_exponent(max_abs)));
}

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
