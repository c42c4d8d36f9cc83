// plugins/quant_zeropp/packed_chunks.cpp: packing quantized chunks (see packed_chunks.hpp).
#include "plugins/quant_zeropp/packed_chunks.hpp"

#include <ATen/ops/empty.h>

#include <cstring>

namespace zhost::zeropp {

int64_t packed_bytes(int64_t n, const BlockFormat& format) {
  const int64_t bytes = 4 * block_count(n, format) + data_bytes(n, format);
  return (bytes + 3) / 4 * 4;
}

std::optional<Dtype> quantizable(DLDataType type) {
  if (type.lanes != 1) return std::nullopt;
  if (type.code == kDLFloat && type.bits == 32) return Dtype::kF32;
  if (type.code == kDLFloat && type.bits == 16) return Dtype::kF16;
  if (type.code == kDLBfloat && type.bits == 16) return Dtype::kBf16;
  return std::nullopt;
}

namespace {

// The data of a packed chunk (after its scales), its padding zeroed.
uint8_t* chunk_data(uint8_t* out, int64_t n, const BlockFormat& format) {
  const int64_t scale_bytes = 4 * block_count(n, format);
  const int64_t data = data_bytes(n, format);
  std::memset(out + scale_bytes + data, 0, static_cast<size_t>(packed_bytes(n, format) - scale_bytes - data));
  return out + scale_bytes;
}

}  // namespace

void pack(const void* src, Dtype type, int64_t n, const BlockFormat& format, uint8_t* out) {
  quantize(src, type, n, format, chunk_data(out, n, format), reinterpret_cast<float*>(out));
}

void pack_compensated(const void* src, Dtype type, int64_t n, const BlockFormat& format, float beta, float* error,
                      uint8_t* out) {
  quantize_compensated(src, type, n, format, beta, error, chunk_data(out, n, format), reinterpret_cast<float*>(out));
}

void unpack(const uint8_t* packed, int64_t n, const BlockFormat& format, void* dst, Dtype type) {
  dequantize(packed + 4 * block_count(n, format), reinterpret_cast<const float*>(packed), n, format, dst, type);
}

void unpack_add(const uint8_t* packed, int64_t n, const BlockFormat& format, float* sum) {
  dequantize_add(packed + 4 * block_count(n, format), reinterpret_cast<const float*>(packed), n, format, sum);
}

ByteBuffer::ByteBuffer(int64_t bytes) : tensor(at::empty({bytes}, at::kByte)), shape(bytes) {
  view.data = tensor.data_ptr();
  view.device = {kDLCPU, 0};
  view.ndim = 1;
  view.dtype = {kDLUInt, 8, 1};
  view.shape = &shape;
}

}  // namespace zhost::zeropp
