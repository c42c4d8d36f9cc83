// tests/zeropp/quant_cuda_check.cu: the CUDA quantization kernels (zhost/kit/zeropp_quant_cuda.hpp) against the
// CPU kernels (zhost/kit/zeropp_quant.hpp), bit for bit, on a GPU: quantize, dequantize, dequantize-and-add and
// quantize with error feedback (three rounds of LoCo on one error buffer) for fp32, bf16 and fp16, int8 and int4, odd
// sizes, with a zero block and a block holding an inf. A plain program, not a GoogleTest binary, so that nvcc alone
// builds it (tests/zeropp/CMakeLists.txt): exit 0 when every case agrees, 1 naming the first difference, 77 (ctest:
// skipped) when there is no CUDA device. This machine has none, so it has been built and linked here but has never run
// its comparisons.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "zhost/kit/zeropp_quant.hpp"
#include "zhost/kit/zeropp_quant_cuda.hpp"

namespace zq = zhost::zeropp;

namespace {

bool ok(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return true;
  std::fprintf(stderr, "quant_cuda_check: %s: %s\n", what, cudaGetErrorString(status));
  return false;
}

// A device copy of `bytes` host bytes (or `bytes` zero bytes when src is null); freed by the destructor.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n, const void* src = nullptr) : bytes(n) {
    if (!ok(cudaMalloc(&ptr, n ? n : 1), "cudaMalloc")) std::exit(1);
    if (src)
      ok(cudaMemcpy(ptr, src, n, cudaMemcpyHostToDevice), "copy to device");
    else
      ok(cudaMemset(ptr, 0, n ? n : 1), "cudaMemset");
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  std::vector<uint8_t> read() const {
    std::vector<uint8_t> out(bytes);
    if (!ok(cudaDeviceSynchronize(), "kernel") ||
        !ok(cudaMemcpy(out.data(), ptr, bytes, cudaMemcpyDeviceToHost), "copy back"))
      std::exit(1);
    return out;
  }
};

// Random finite values of `type` as raw bytes (16-bit types: random finite bit patterns of moderate exponent),
// a block of zeros at block 1 and an inf at the start of block 2 when the buffer has them.
std::vector<uint8_t> random_input(zq::Dtype type, int64_t n, int64_t block, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t width = type == zq::Dtype::kF32 ? 4 : 2;
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * width);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float x = normal(rng) * static_cast<float>(1 << (rng() % 8));
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    if (width == 4) {
      std::memcpy(&bytes[4 * i], &bits, 4);
    } else {
      uint16_t h = type == zq::Dtype::kBf16 ? static_cast<uint16_t>(bits >> 16)
                                            : static_cast<uint16_t>((rng() & 0x83FFu) | ((10 + rng() % 10) << 10));
      std::memcpy(&bytes[2 * i], &h, 2);
    }
  }
  if (n > block) std::memset(&bytes[block * width], 0, static_cast<size_t>(std::min(block, n - block)) * width);
  if (n > 2 * block) {
    const uint32_t inf32 = 0x7F800000u;
    const uint16_t inf16 = type == zq::Dtype::kBf16 ? 0x7F80u : 0x7C00u;
    if (width == 4)
      std::memcpy(&bytes[2 * block * 4], &inf32, 4);
    else
      std::memcpy(&bytes[2 * block * 2], &inf16, 2);
  }
  return bytes;
}

// Whether element i of two buffers of `type` holds the same bits; any NaN equals any NaN (payloads may differ).
bool is_nan(zq::Dtype type, const uint8_t* p) {
  if (type == zq::Dtype::kF32) {
    float x;
    std::memcpy(&x, p, 4);
    return x != x;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  const uint16_t exponent = type == zq::Dtype::kBf16 ? 0x7F80u : 0x7C00u;
  return (h & exponent) == exponent && (h & 0x7FFFu & ~exponent) != 0;
}

// The first element where a and b (n elements of `type`) differ, or -1.
int64_t first_difference(zq::Dtype type, const void* a, const void* b, int64_t n) {
  const size_t width = type == zq::Dtype::kF32 ? 4 : 2;
  for (int64_t i = 0; i < n; ++i) {
    const auto* x = static_cast<const uint8_t*>(a) + static_cast<size_t>(i) * width;
    const auto* y = static_cast<const uint8_t*>(b) + static_cast<size_t>(i) * width;
    if (std::memcmp(x, y, width) != 0 && !(is_nan(type, x) && is_nan(type, y))) return i;
  }
  return -1;
}

int differs(const char* name, const char* what, int64_t where) {
  std::fprintf(stderr, "quant_cuda_check: %s: %s: element %lld differs from the CPU kernel's\n", name, what,
               static_cast<long long>(where));
  return 1;
}

int check_case(zq::Dtype type, zq::Bits bits, int64_t n, int64_t block_size) {
  const zq::BlockFormat format{bits, block_size};
  const size_t width = type == zq::Dtype::kF32 ? 4 : 2;
  const int64_t blocks = zq::block_count(n, format), data_bytes = zq::data_bytes(n, format);
  const std::vector<uint8_t> input = random_input(type, n, block_size, static_cast<uint32_t>(n + block_size));
  char name[128];
  std::snprintf(name, sizeof(name), "type %d, int%d, n %lld, block %lld", static_cast<int>(type),
                static_cast<int>(bits), static_cast<long long>(n), static_cast<long long>(block_size));

  std::vector<uint8_t> cpu_data(static_cast<size_t>(data_bytes));
  std::vector<float> cpu_scales(static_cast<size_t>(blocks));
  zq::quantize(input.data(), type, n, format, cpu_data.data(), cpu_scales.data());
  DeviceBuffer src(input.size(), input.data()), data(cpu_data.size()), scales(4 * cpu_scales.size());
  zq::cuda::quantize(src.ptr, type, n, format, data.ptr, static_cast<float*>(scales.ptr), nullptr);
  const std::vector<uint8_t> gpu_data = data.read(), gpu_scale_bytes = scales.read();
  if (int64_t at = first_difference(zq::Dtype::kF32, cpu_scales.data(), gpu_scale_bytes.data(), blocks); at >= 0)
    return differs(name, "quantize's scales", at);
  if (gpu_data != cpu_data)
    return differs(name, "quantize's data (byte)",
                   std::mismatch(cpu_data.begin(), cpu_data.end(), gpu_data.begin()).first - cpu_data.begin());

  std::vector<uint8_t> cpu_out(static_cast<size_t>(n) * width);
  zq::dequantize(cpu_data.data(), cpu_scales.data(), n, format, cpu_out.data(), type);
  DeviceBuffer out(cpu_out.size());
  zq::cuda::dequantize(data.ptr, static_cast<const float*>(scales.ptr), n, format, out.ptr, type, nullptr);
  const std::vector<uint8_t> gpu_out = out.read();
  if (int64_t at = first_difference(type, cpu_out.data(), gpu_out.data(), n); at >= 0)
    return differs(name, "dequantize", at);

  std::vector<float> cpu_sum(static_cast<size_t>(n), 0.25f);
  DeviceBuffer sum(4 * cpu_sum.size(), cpu_sum.data());
  zq::dequantize_add(cpu_data.data(), cpu_scales.data(), n, format, cpu_sum.data());
  zq::cuda::dequantize_add(data.ptr, static_cast<const float*>(scales.ptr), n, format, static_cast<float*>(sum.ptr),
                           nullptr);
  const std::vector<uint8_t> gpu_sum = sum.read();
  if (int64_t at = first_difference(zq::Dtype::kF32, cpu_sum.data(), gpu_sum.data(), n); at >= 0)
    return differs(name, "dequantize_add", at);

  // LoCo: three sends of the same buffer, each compensated by the error the one before left.
  std::vector<float> cpu_error(static_cast<size_t>(n), 0.0f);
  DeviceBuffer error(4 * cpu_error.size());
  for (int round = 0; round < 3; ++round) {
    zq::quantize_compensated(input.data(), type, n, format, 0.8f, cpu_error.data(), cpu_data.data(), cpu_scales.data());
    zq::cuda::quantize_compensated(src.ptr, type, n, format, 0.8f, static_cast<float*>(error.ptr), data.ptr,
                                   static_cast<float*>(scales.ptr), nullptr);
    const std::vector<uint8_t> gpu_error = error.read(), gpu_loco_data = data.read(), gpu_loco_scales = scales.read();
    if (int64_t at = first_difference(zq::Dtype::kF32, cpu_error.data(), gpu_error.data(), n); at >= 0)
      return differs(name, "quantize_compensated's error", at);
    if (int64_t at = first_difference(zq::Dtype::kF32, cpu_scales.data(), gpu_loco_scales.data(), blocks); at >= 0)
      return differs(name, "quantize_compensated's scales", at);
    if (gpu_loco_data != cpu_data)
      return differs(name, "quantize_compensated's data (byte)",
                     std::mismatch(cpu_data.begin(), cpu_data.end(), gpu_loco_data.begin()).first - cpu_data.begin());
  }
  return 0;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("quant_cuda_check: no CUDA device: skipped (built and linked only)\n");
    return 77;
  }
  int cases = 0;
  for (const zq::Dtype type : {zq::Dtype::kF32, zq::Dtype::kBf16, zq::Dtype::kF16})
    for (const zq::Bits bits : {zq::Bits::kInt8, zq::Bits::kInt4})
      for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{31}, int64_t{1000003}})
        for (const int64_t block : {int64_t{4}, int64_t{512}, int64_t{4096}}) {
          if (check_case(type, bits, n, block) != 0) return 1;
          ++cases;
        }
  std::printf("quant_cuda_check: %d cases, CUDA and CPU kernels agree bit for bit\n", cases);
  return 0;
}
