// zhost/kit/zeropp_quant_cuda.hpp: the ZeRO++ quantization kernels of zhost/kit/zeropp_quant.hpp for CUDA
// device memory: the same block format (docs/zeropp.md) and the same arithmetic (Note [Block quantization
// arithmetic]: separate IEEE multiplies and adds, round half to even), so they are meant to give the CPU
// kernels' bits (NaN payloads aside). Built only with ZHOST_WITH_CUDA (target zhost_zeropp_quant_cuda).
// Bit for bit with the CPU kernels on an H100 (tests/zeropp/quant_cuda_check.cu, bench/gpu/RESULTS.md).
//
// Every call enqueues its kernel on `stream` (a cudaStream_t; nullptr: the legacy default stream) and
// returns without waiting. Arguments are checked as on the CPU; a failed launch throws sdk::PluginError
// (ZHOST_ERR_INTERNAL) with CUDA's message.
#pragma once

#include <cstdint>

#include "zhost/kit/zeropp_quant.hpp"

namespace zhost::zeropp::cuda {

void quantize(const void* src, Dtype src_type, int64_t n, const BlockFormat& format, void* data, float* scales,
              void* stream);

void dequantize(const void* data, const float* scales, int64_t n, const BlockFormat& format, void* dst, Dtype dst_type,
                void* stream);

void dequantize_add(const void* data, const float* scales, int64_t n, const BlockFormat& format, float* sum,
                    void* stream);

// Note [LoCo error feedback]: quantize(src + error) and update error (n fp32 values in device memory).
void quantize_compensated(const void* src, Dtype src_type, int64_t n, const BlockFormat& format, float beta,
                          float* error, void* data, float* scales, void* stream);

}  // namespace zhost::zeropp::cuda
