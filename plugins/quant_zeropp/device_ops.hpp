// plugins/quant_zeropp/device_ops.hpp: what ZeRO++ does in the memory of the collective it serves: the
// quantization kernels, zero fills, copies and its own buffers, for host memory or a CUDA device.
//
// Note [ZeRO++ on the collective's device]: a served collective's buffers (packed chunks, sums, LoCo's
// errors, hpZ's copies) live where its send and recv live, and its kernels run there:
//   - host memory (kDLCPU, and pinned kDLCUDAHost): the kit's SIMD kernels (zhost/kit/zeropp_quant.hpp) on the
//     calling thread, done when the call returns;
//   - a CUDA device (kDLCUDA, only in builds with ZHOST_WITH_CUDA): the kit's CUDA kernels
//     (zhost/kit/zeropp_quant_cuda.hpp), fills and copies enqueued on the calling thread's current stream of
//     that device. The host's NCCL collectives order themselves against that stream (they wait for it before
//     they send, and a waited-on collective makes it wait for them), so the plugin never blocks the host
//     between a kernel and the collective that sends its output. A buffer freed at the end of a call goes
//     back to LibTorch's caching allocator, which hands it out again only to work on the same stream,
//     queued after everything that used it.
// Both paths run the same plugin code, with the same bits (the kernels agree bit for bit,
// tests/zeropp/quant_cuda_check.cu), so the CPU tests exercise the logic of both. The CUDA path is compile-
// checked here and has never run on a GPU: this project has none.
#pragma once

#include <c10/core/TensorOptions.h>
#include <dlpack/dlpack.h>

#include <cstdint>

#include "zhost/kit/zeropp_quant.hpp"

namespace zhost::zeropp {

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  // For the memory of `device`: one object per memory (static lifetime), so two buffers share a device exactly
  // when their DeviceOps are the same object. Throws sdk::PluginError(ZHOST_ERR_UNSUPPORTED) naming the device
  // when this build cannot serve it (a CUDA device without ZHOST_WITH_CUDA, or another kind of device).
  static const DeviceOps& of(DLDevice device);

  // As the functions of zhost/kit/zeropp_quant.hpp, every pointer into this device's memory.
  virtual void quantize(const void* src, Dtype type, int64_t n, const BlockFormat& format, void* data,
                        float* scales) const = 0;
  virtual void quantize_compensated(const void* src, Dtype type, int64_t n, const BlockFormat& format, float beta,
                                    float* error, void* data, float* scales) const = 0;
  virtual void dequantize(const void* data, const float* scales, int64_t n, const BlockFormat& format, void* dst,
                          Dtype type) const = 0;
  virtual void dequantize_add(const void* data, const float* scales, int64_t n, const BlockFormat& format,
                              float* sum) const = 0;
  virtual void zero(void* dst, int64_t bytes) const = 0;
  virtual void copy(void* dst, const void* src, int64_t bytes) const = 0;  // no overlap

  DLDevice device() const { return device_; }
  // Where at:: buffers of this device go.
  at::TensorOptions options() const;

 protected:
  explicit DeviceOps(DLDevice device) : device_(device) {}

 private:
  DLDevice device_;
};

// The CUDA device `index`'s operations (device_ops_cuda.cpp, only in builds with ZHOST_WITH_CUDA).
const DeviceOps& cuda_device_ops(int32_t index);

}  // namespace zhost::zeropp
