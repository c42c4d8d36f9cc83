// plugins/quant_zeropp/device_ops_cuda.cpp: a CUDA device's operations (Note [ZeRO++ on the collective's
// device] in device_ops.hpp): the kit's CUDA kernels, fills and copies on the calling thread's current
// stream of the device. Built only with ZHOST_WITH_CUDA; compile-checked on this project's machines
// (tests/zeropp/CMakeLists.txt), never run on a GPU.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>

#include "plugins/quant_zeropp/device_ops.hpp"
#include "zhost/cpp/error.hpp"
#include "zhost/kit/zeropp_quant_cuda.hpp"

namespace zhost::zeropp {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw sdk::PluginError(ZHOST_ERR_INTERNAL,
                           std::string("quant_zeropp: ") + what + ": " + cudaGetErrorString(status));
}

class CudaDeviceOps final : public DeviceOps {
 public:
  explicit CudaDeviceOps(int32_t index) : DeviceOps(DLDevice{kDLCUDA, index}), index_(index) {}

  void quantize(const void* src, Dtype type, int64_t n, const BlockFormat& format, void* data,
                float* scales) const override {
    const c10::cuda::CUDAGuard guard(index_);
    cuda::quantize(src, type, n, format, data, scales, stream());
  }
  void quantize_compensated(const void* src, Dtype type, int64_t n, const BlockFormat& format, float beta, float* error,
                            void* data, float* scales) const override {
    const c10::cuda::CUDAGuard guard(index_);
    cuda::quantize_compensated(src, type, n, format, beta, error, data, scales, stream());
  }
  void dequantize(const void* data, const float* scales, int64_t n, const BlockFormat& format, void* dst,
                  Dtype type) const override {
    const c10::cuda::CUDAGuard guard(index_);
    cuda::dequantize(data, scales, n, format, dst, type, stream());
  }
  void dequantize_add(const void* data, const float* scales, int64_t n, const BlockFormat& format,
                      float* sum) const override {
    const c10::cuda::CUDAGuard guard(index_);
    cuda::dequantize_add(data, scales, n, format, sum, stream());
  }
  void zero(void* dst, int64_t bytes) const override {
    const c10::cuda::CUDAGuard guard(index_);
    check(cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), stream()), "zero fill on the device");
  }
  void copy(void* dst, const void* src, int64_t bytes) const override {
    const c10::cuda::CUDAGuard guard(index_);
    check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream()),
          "copy on the device");
  }

 private:
  cudaStream_t stream() const {
    return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(index_)).stream();
  }
  int32_t index_;
};

}  // namespace

const DeviceOps& cuda_device_ops(int32_t index) {
  constexpr int32_t kMaxDevices = 64;
  static std::array<std::unique_ptr<CudaDeviceOps>, kMaxDevices> ops;
  static std::mutex mutex;
  if (index < 0 || index >= kMaxDevices)
    throw sdk::PluginError(ZHOST_ERR_INVALID_ARGUMENT, "quant_zeropp: CUDA device index " + std::to_string(index) +
                                                           " is outside 0.." + std::to_string(kMaxDevices - 1));
  std::lock_guard<std::mutex> lock(mutex);
  if (!ops[static_cast<size_t>(index)]) ops[static_cast<size_t>(index)] = std::make_unique<CudaDeviceOps>(index);
  return *ops[static_cast<size_t>(index)];
}

}  // namespace zhost::zeropp
