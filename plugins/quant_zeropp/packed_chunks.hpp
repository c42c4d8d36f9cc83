// plugins/quant_zeropp/packed_chunks.hpp: one quantized chunk as it travels: its block scales, then its
// data, padded to a multiple of 4 bytes, so that chunks of equal element counts have equal byte counts and
// can be cut out of an all-gather's or all-to-all's byte buffer at fixed offsets. The block format (data and
// scales) is docs/zeropp.md's; each chunk is quantized on its own, its blocks starting at its first element,
// so any element count travels without padding elements or a fallback.
//
//   packed chunk of n elements: [ fp32 scales: block_count(n) ][ data: data_bytes(n) ][ 0-3 zero bytes ]
#pragma once

#include <ATen/core/Tensor.h>
#include <dlpack/dlpack.h>

#include <cstdint>
#include <optional>

#include "zhost/kit/zeropp_quant.hpp"

namespace zhost::zeropp {

// Bytes of one packed chunk of n elements.
int64_t packed_bytes(int64_t n, const BlockFormat& format);

// The kernels' element type for a DLPack dtype; empty for types ZeRO++ does not quantize.
std::optional<Dtype> quantizable(DLDataType type);

// out (packed_bytes(n) bytes) = the packed chunk of the n elements at src.
void pack(const void* src, Dtype type, int64_t n, const BlockFormat& format, uint8_t* out);
// As pack(), of src + error, updating error (n fp32 values): Note [LoCo error feedback] (zhost/kit/zeropp_quant.hpp).
void pack_compensated(const void* src, Dtype type, int64_t n, const BlockFormat& format, float beta, float* error,
                      uint8_t* out);
// dst (n elements of `type`) = the chunk's dequantized values.
void unpack(const uint8_t* packed, int64_t n, const BlockFormat& format, void* dst, Dtype type);
// sum[i] += the chunk's dequantized value i (fp32).
void unpack_add(const uint8_t* packed, int64_t n, const BlockFormat& format, float* sum);

// A flat byte buffer for packed chunks and a DLTensor describing it, for the host's collectives.
struct ByteBuffer {
  explicit ByteBuffer(int64_t bytes);
  uint8_t* data() { return tensor.data_ptr<uint8_t>(); }
  at::Tensor tensor;  // uint8, host memory
  DLTensor view{};    // valid while this buffer lives (its shape points into `shape`)
  int64_t shape = 0;
  ByteBuffer(const ByteBuffer&) = delete;
  ByteBuffer& operator=(const ByteBuffer&) = delete;
};

}  // namespace zhost::zeropp
