// plugins/quant_zeropp/device_ops.cpp: the host-memory operations and the choice by device (Note [ZeRO++ on
// the collective's device] in device_ops.hpp).
#include "plugins/quant_zeropp/device_ops.hpp"

#include <cstring>
#include <string>

#include "zhost/cpp/error.hpp"

namespace zhost::zeropp {
namespace {

class HostMemoryOps final : public DeviceOps {
 public:
  HostMemoryOps() : DeviceOps(DLDevice{kDLCPU, 0}) {}
  void quantize(const void* src, Dtype type, int64_t n, const BlockFormat& format, void* data,
                float* scales) const override {
    zeropp::quantize(src, type, n, format, data, scales);
  }
  void quantize_compensated(const void* src, Dtype type, int64_t n, const BlockFormat& format, float beta, float* error,
                            void* data, float* scales) const override {
    zeropp::quantize_compensated(src, type, n, format, beta, error, data, scales);
  }
  void dequantize(const void* data, const float* scales, int64_t n, const BlockFormat& format, void* dst,
                  Dtype type) const override {
    zeropp::dequantize(data, scales, n, format, dst, type);
  }
  void dequantize_add(const void* data, const float* scales, int64_t n, const BlockFormat& format,
                      float* sum) const override {
    zeropp::dequantize_add(data, scales, n, format, sum);
  }
  void zero(void* dst, int64_t bytes) const override { std::memset(dst, 0, static_cast<size_t>(bytes)); }
  void copy(void* dst, const void* src, int64_t bytes) const override {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
};

}  // namespace

const DeviceOps& DeviceOps::of(DLDevice device) {
  static const HostMemoryOps host_memory;
  if (device.device_type == kDLCPU || device.device_type == kDLCUDAHost) return host_memory;
  if (device.device_type == kDLCUDA) return cuda_device_ops(device.device_id);
  throw sdk::PluginError(ZHOST_ERR_UNSUPPORTED, "quant_zeropp: collectives of DLPack device type " +
                                                    std::to_string(device.device_type) +
                                                    " are not served (host memory and CUDA devices are)");
}

at::TensorOptions DeviceOps::options() const {
  if (device_.device_type == kDLCUDA)
    return at::TensorOptions().device(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_.device_id)));
  return at::TensorOptions().device(at::kCPU);
}

#ifndef ZHOST_WITH_CUDA
const DeviceOps& cuda_device_ops(int32_t index) {
  throw sdk::PluginError(ZHOST_ERR_UNSUPPORTED,
                         "quant_zeropp: a collective of CUDA device " + std::to_string(index) +
                             " reached a build without CUDA (configure with -DZHOST_WITH_CUDA=ON and a CUDA "
                             "LibTorch), or turn ZeRO++ off");
}
#endif

}  // namespace zhost::zeropp
