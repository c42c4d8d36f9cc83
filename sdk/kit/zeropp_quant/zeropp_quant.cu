// sdk/kit/zeropp_quant/zeropp_quant.cu: the CUDA kernels of zhost/kit/zeropp_quant_cuda.hpp: one thread
// block per quantization block for quantize and quantize with error feedback (absmax on the bit patterns,
// reduced through warp shuffles and shared memory), grid-stride loops for dequantize and dequantize-and-add.
// Note [Block quantization arithmetic] with explicit round-to-nearest intrinsics (__fmul_rn, __fadd_rn,
// __fdiv_rn, __float2int_rn), so no FMA contraction or fast division changes a bit. On an H100 they gave the CPU
// kernels' bits in all 72 cases of tests/zeropp/quant_cuda_check.cu (bench/gpu/RESULTS.md, 2026-11-27).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "zhost/cpp/error.hpp"
#include "zhost/kit/zeropp_quant_cuda.hpp"

namespace zhost::zeropp::cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float to_float(__half x) { return __half2float(x); }

template <class T>
__device__ inline T from_float(float x);
template <>
__device__ inline float from_float<float>(float x) {
  return x;
}
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ inline __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

template <int kBits>
__device__ inline int stored_q(const uint8_t* data, int64_t i) {
  if (kBits == 8) return static_cast<int8_t>(data[i]);
  const int nibble = (i % 2 == 0) ? (data[i / 2] & 0xF) : (data[i / 2] >> 4);
  return (nibble ^ 8) - 8;
}

template <int kBits>
__device__ inline int quantized(float x, float prescale, float inverse) {
  const float q_max = kBits == 8 ? 127.0f : 7.0f;
  const float t = __fmul_rn(__fmul_rn(x, prescale), inverse);
  return __float2int_rn(fminf(fmaxf(t, -q_max), q_max));
}

// A quantization block's scale (Note [Block quantization arithmetic]) from the values value(i), i in [begin,
// end), computed by the whole thread block: absmax on the bit patterns, reduced through warp shuffles and
// shared memory.
struct BlockScale {
  float scale = 0, prescale = 1, inverse = 0;
  bool nonzero = false;  // finite, not all zeros: quantize (else every q is 0)
};

template <int kBits, class Value>
__device__ BlockScale block_scale(int64_t begin, int64_t end, Value value) {
  uint32_t largest = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    largest = max(largest, __float_as_uint(value(i)) & 0x7FFFFFFFu);
  }
  for (int offset = 16; offset > 0; offset /= 2) largest = max(largest, __shfl_xor_sync(0xFFFFFFFFu, largest, offset));
  __shared__ uint32_t warp_max[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = largest;
  __syncthreads();
  uint32_t a_bits = 0;
  for (int w = 0; w < kThreads / 32; ++w) a_bits = max(a_bits, warp_max[w]);

  const float q_max = kBits == 8 ? 127.0f : 7.0f;
  BlockScale s;
  if (a_bits >= 0x7F800000u) {
    s.scale = __uint_as_float(0x7FC00000u);
  } else if (a_bits != 0) {
    const float a = __uint_as_float(a_bits);
    s.scale = __fdiv_rn(a, q_max);
    s.prescale = a < 0x1p-64f ? 0x1p64f : 1.0f;
    s.inverse = __fdiv_rn(q_max, __fmul_rn(a, s.prescale));
    s.nonzero = true;
  }
  return s;
}

// One thread block per quantization block.
template <class T, int kBits>
__global__ void quantize_kernel(const T* src, int64_t n, int64_t block, uint8_t* data, float* scales) {
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * block;
  const int64_t end = min(n, begin + block);
  const BlockScale s = block_scale<kBits>(begin, end, [&](int64_t i) { return to_float(src[i]); });
  if (threadIdx.x == 0) scales[blockIdx.x] = s.scale;
  if (kBits == 8) {
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const int q = s.nonzero ? quantized<8>(to_float(src[i]), s.prescale, s.inverse) : 0;
      data[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
  } else {  // pairs; block and begin are even
    for (int64_t i = begin + 2 * threadIdx.x; i < end; i += 2 * blockDim.x) {
      const int low = s.nonzero ? quantized<4>(to_float(src[i]), s.prescale, s.inverse) : 0;
      const int high = (s.nonzero && i + 1 < end) ? quantized<4>(to_float(src[i + 1]), s.prescale, s.inverse) : 0;
      data[i / 2] = static_cast<uint8_t>((low & 0xF) | ((high & 0xF) << 4));
    }
  }
}

// Note [LoCo error feedback] for one element: its q, and its error updated from the compensated value c.
template <int kBits>
__device__ inline int compensated_q(float c, const BlockScale& s, float keep, float take, float* e) {
  const int q = s.nonzero ? quantized<kBits>(c, s.prescale, s.inverse) : 0;
  if (isnan(s.scale)) {
    *e = 0.0f;  // a block with inf or NaN restarts its error
  } else {
    const float sent = __fmul_rn(static_cast<float>(q), s.scale);
    *e = __fadd_rn(__fmul_rn(keep, *e), __fmul_rn(take, __fsub_rn(c, sent)));
  }
  return q;
}

// One thread block per quantization block: the compensated values c = x + e are formed twice (for the scale,
// then for q), the same bits both times, so no scratch buffer is needed.
template <class T, int kBits>
__global__ void quantize_compensated_kernel(const T* src, int64_t n, int64_t block, float keep, float take,
                                            float* error, uint8_t* data, float* scales) {
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * block;
  const int64_t end = min(n, begin + block);
  auto compensated = [&](int64_t i) { return __fadd_rn(to_float(src[i]), error[i]); };
  const BlockScale s = block_scale<kBits>(begin, end, compensated);
  if (threadIdx.x == 0) scales[blockIdx.x] = s.scale;
  if (kBits == 8) {
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const int q = compensated_q<8>(compensated(i), s, keep, take, &error[i]);
      data[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
  } else {  // pairs; block and begin are even
    for (int64_t i = begin + 2 * threadIdx.x; i < end; i += 2 * blockDim.x) {
      const int low = compensated_q<4>(compensated(i), s, keep, take, &error[i]);
      const int high = i + 1 < end ? compensated_q<4>(compensated(i + 1), s, keep, take, &error[i + 1]) : 0;
      data[i / 2] = static_cast<uint8_t>((low & 0xF) | ((high & 0xF) << 4));
    }
  }
}

template <class T, int kBits>
__global__ void dequantize_kernel(const uint8_t* data, const float* scales, int64_t n, int64_t block, T* dst) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = from_float<T>(__fmul_rn(static_cast<float>(stored_q<kBits>(data, i)), scales[i / block]));
  }
}

template <int kBits>
__global__ void add_kernel(const uint8_t* data, const float* scales, int64_t n, int64_t block, float* sum) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    sum[i] = __fadd_rn(sum[i], __fmul_rn(static_cast<float>(stored_q<kBits>(data, i)), scales[i / block]));
  }
}

void check_launch(const char* what) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    throw sdk::PluginError(ZHOST_ERR_INTERNAL, std::string("zeropp cuda ") + what + ": " + cudaGetErrorString(status));
  }
}

void check_call(int64_t n, const BlockFormat& format, const void* data, const float* scales, const void* values) {
  check_format(format);
  if (n < 0 || (n > 0 && (data == nullptr || scales == nullptr || values == nullptr))) {
    throw sdk::PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                           "zeropp cuda: negative element count or null buffer (" + std::to_string(n) + " elements)");
  }
}

unsigned elementwise_grid(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
}

// f(T{}) with T the CUDA type of `type`.
template <class F>
void with_type(Dtype type, F&& f) {
  switch (type) {
    case Dtype::kF32:
      return f(float{});
    case Dtype::kBf16:
      return f(__nv_bfloat16{});
    case Dtype::kF16:
      return f(__half{});
  }
  throw sdk::PluginError(ZHOST_ERR_INVALID_ARGUMENT, "zeropp cuda: unknown element type");
}

}  // namespace

void quantize(const void* src, Dtype src_type, int64_t n, const BlockFormat& format, void* data, float* scales,
              void* stream) {
  check_call(n, format, data, scales, src);
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>(block_count(n, format));
  auto* s = static_cast<cudaStream_t>(stream);
  auto* bytes = static_cast<uint8_t*>(data);
  with_type(src_type, [&](auto zero) {
    using T = decltype(zero);
    const T* values = static_cast<const T*>(src);
    if (format.bits == Bits::kInt8) {
      quantize_kernel<T, 8><<<blocks, kThreads, 0, s>>>(values, n, format.block_size, bytes, scales);
    } else {
      quantize_kernel<T, 4><<<blocks, kThreads, 0, s>>>(values, n, format.block_size, bytes, scales);
    }
  });
  check_launch("quantize");
}

void dequantize(const void* data, const float* scales, int64_t n, const BlockFormat& format, void* dst, Dtype dst_type,
                void* stream) {
  check_call(n, format, data, scales, dst);
  if (n == 0) return;
  auto* s = static_cast<cudaStream_t>(stream);
  const auto* bytes = static_cast<const uint8_t*>(data);
  with_type(dst_type, [&](auto zero) {
    using T = decltype(zero);
    T* out = static_cast<T*>(dst);
    if (format.bits == Bits::kInt8) {
      dequantize_kernel<T, 8><<<elementwise_grid(n), kThreads, 0, s>>>(bytes, scales, n, format.block_size, out);
    } else {
      dequantize_kernel<T, 4><<<elementwise_grid(n), kThreads, 0, s>>>(bytes, scales, n, format.block_size, out);
    }
  });
  check_launch("dequantize");
}

void dequantize_add(const void* data, const float* scales, int64_t n, const BlockFormat& format, float* sum,
                    void* stream) {
  check_call(n, format, data, scales, sum);
  if (n == 0) return;
  auto* s = static_cast<cudaStream_t>(stream);
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (format.bits == Bits::kInt8) {
    add_kernel<8><<<elementwise_grid(n), kThreads, 0, s>>>(bytes, scales, n, format.block_size, sum);
  } else {
    add_kernel<4><<<elementwise_grid(n), kThreads, 0, s>>>(bytes, scales, n, format.block_size, sum);
  }
  check_launch("dequantize_add");
}

void quantize_compensated(const void* src, Dtype src_type, int64_t n, const BlockFormat& format, float beta,
                          float* error, void* data, float* scales, void* stream) {
  check_call(n, format, data, scales, src);
  if (!(beta >= 0.0f && beta < 1.0f)) {
    throw sdk::PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                           "zeropp cuda error feedback: beta " + std::to_string(beta) + " is outside [0, 1)");
  }
  if (n > 0 && error == nullptr) {
    throw sdk::PluginError(ZHOST_ERR_INVALID_ARGUMENT, "zeropp cuda error feedback: null error buffer");
  }
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>(block_count(n, format));
  auto* s = static_cast<cudaStream_t>(stream);
  auto* bytes = static_cast<uint8_t*>(data);
  const float keep = beta, take = 1.0f - beta;  // as the CPU path forms them
  with_type(src_type, [&](auto zero) {
    using T = decltype(zero);
    const T* values = static_cast<const T*>(src);
    if (format.bits == Bits::kInt8) {
      quantize_compensated_kernel<T, 8>
          <<<blocks, kThreads, 0, s>>>(values, n, format.block_size, keep, take, error, bytes, scales);
    } else {
      quantize_compensated_kernel<T, 4>
          <<<blocks, kThreads, 0, s>>>(values, n, format.block_size, keep, take, error, bytes, scales);
    }
  });
  check_launch("quantize_compensated");
}

}  // namespace zhost::zeropp::cuda
