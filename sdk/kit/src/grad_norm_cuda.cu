// sdk/kit/src/grad_norm_cuda.cu: the kernels of grad_norm_cuda.hpp. Grid-stride loops; each thread keeps its
// own maximum or counters, which warp shuffles, shared memory and one atomic per block combine. Integer
// maxima and sums are exact in any order; the fp64 steps are exact as the host's are (grad_norm_kernels.hpp):
// x^2 of an fp32 fits fp64's 53 bits, scale and the split points are powers of two, and each remainder is
// the low bits of a value already exact.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "grad_norm_cuda.hpp"
#include "zhost/cpp/error.hpp"

namespace zhost::kit::detail::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxBlocks = 4096;

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float to_float(__half x) { return __half2float(x); }

template <class T>
__global__ void max_abs_bits_kernel(const T* x, int64_t n, unsigned int* largest) {
  unsigned int mine = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    mine = max(mine, __float_as_uint(to_float(x[i])) & 0x7FFFFFFFu);
  for (int offset = 16; offset > 0; offset /= 2) mine = max(mine, __shfl_down_sync(0xFFFFFFFFu, mine, offset));
  __shared__ unsigned int warps[kWarps];
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) mine = max(mine, warps[w]);
    atomicMax(largest, mine);
  }
}

template <class T>
__global__ void square_sum_parts_kernel(const T* x, int64_t n, double scale, unsigned long long* parts) {
  unsigned long long top = 0, middle = 0, bottom = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double f = to_float(x[i]);
    const double v = __dmul_rn(__dmul_rn(f, f), scale);                 // < 2^80, exact
    const double high = floor(__dmul_rn(v, 0x1p-54));                   // < 2^26
    const double rest = __dsub_rn(v, __dmul_rn(high, 0x1p54));          // exact, < 2^54
    const double mid = floor(__dmul_rn(rest, 0x1p-27));                 // < 2^27
    const double low = floor(__dsub_rn(rest, __dmul_rn(mid, 0x1p27)));  // < 2^27
    top += static_cast<unsigned long long>(high);
    middle += static_cast<unsigned long long>(mid);
    bottom += static_cast<unsigned long long>(low);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    top += __shfl_down_sync(0xFFFFFFFFu, top, offset);
    middle += __shfl_down_sync(0xFFFFFFFFu, middle, offset);
    bottom += __shfl_down_sync(0xFFFFFFFFu, bottom, offset);
  }
  __shared__ unsigned long long warps[3][kWarps];
  if (threadIdx.x % 32 == 0) {
    warps[0][threadIdx.x / 32] = top;
    warps[1][threadIdx.x / 32] = middle;
    warps[2][threadIdx.x / 32] = bottom;
  }
  __syncthreads();
  if (threadIdx.x < 3) {
    unsigned long long sum = 0;
    for (int w = 0; w < kWarps; ++w) sum += warps[threadIdx.x][w];
    if (sum != 0) atomicAdd(parts + threadIdx.x, sum);
  }
}

int blocks_for(int64_t n) { return static_cast<int>(std::min(kMaxBlocks, (n + kThreads - 1) / kThreads)); }

void check_launch(const char* what) {
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess)
    throw sdk::PluginError(ZHOST_ERR_INTERNAL, std::string("exact gradient norm: ") + what +
                                                   " on CUDA failed: " + cudaGetErrorString(error));
}

// Calls launch(const T*) with x as its element type.
template <class Launch>
void with_type(const void* x, NormDtype type, const Launch& launch) {
  switch (type) {
    case NormDtype::kFloat:
      return launch(static_cast<const float*>(x));
    case NormDtype::kBFloat16:
      return launch(static_cast<const __nv_bfloat16*>(x));
    case NormDtype::kHalf:
      return launch(static_cast<const __half*>(x));
  }
}

}  // namespace

void max_abs_bits(const void* x, NormDtype type, int64_t n, uint32_t* largest, void* stream) {
  if (n <= 0) return;
  with_type(x, type, [&](const auto* typed) {
    max_abs_bits_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        typed, n, reinterpret_cast<unsigned int*>(largest));
  });
  check_launch("the largest magnitude");
}

void add_square_sum_parts(const void* x, NormDtype type, int64_t n, double scale, uint64_t* parts, void* stream) {
  if (n <= 0) return;
  with_type(x, type, [&](const auto* typed) {
    square_sum_parts_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        typed, n, scale, reinterpret_cast<unsigned long long*>(parts));
  });
  check_launch("the sum of squares");
}

}  // namespace zhost::kit::detail::cuda
