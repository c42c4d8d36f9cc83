// plugins/quant_zeropp/packed_chunks.cpp: packing quantized chunks (see packed_chunks.hpp).
#include "plugins/quant_zeropp/packed_chunks.hpp"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <type_traits>

#include "zhost/cpp/error.hpp"
#include "zhost/kit/format.hpp"

namespace zhost::zeropp {
namespace {

size_t element_bytes(Dtype type) { return type == Dtype::kF32 ? 4 : 2; }

int64_t block_total(const ChunkPieces& pieces, const BlockFormat& format) {
  int64_t blocks = 0;
  for (int64_t n : pieces.lengths()) blocks += block_count(n, format);
  return blocks;
}

// Walks the pieces of a packed chunk (Byte: uint8_t or const uint8_t): f(piece's first element, its length,
// its data, its scales).
template <class Byte, class F>
Byte* for_each_piece(Byte* packed, const ChunkPieces& pieces, const BlockFormat& format, F&& f) {
  using Float = std::conditional_t<std::is_const_v<Byte>, const float, float>;
  auto* scales = reinterpret_cast<Float*>(packed);
  Byte* data = packed + 4 * block_total(pieces, format);
  int64_t first = 0;
  for (int64_t n : pieces.lengths()) {
    f(first, n, data, scales);
    first += n;
    data += data_bytes(n, format);
    scales += block_count(n, format);
  }
  return data;  // the end of the data
}

// pack() and pack_compensated(): `quantize_piece(first, n, data, scales)`, then zeros to the stride.
template <class Q>
void pack_with(const DeviceOps& ops, const ChunkPieces& pieces, const BlockFormat& format, uint8_t* out, int64_t stride,
               Q&& quantize_piece) {
  if (stride < packed_bytes(pieces, format))
    throw sdk::PluginError(ZHOST_ERR_INTERNAL, "quant_zeropp: a packed chunk does not fit its stride");
  uint8_t* end = for_each_piece(out, pieces, format, quantize_piece);
  if (end < out + stride) ops.zero(end, out + stride - end);
}

}  // namespace

ChunkPieces::ChunkPieces(const int64_t* starts, size_t count, int64_t begin, int64_t end) : numel_(end - begin) {
  // The tensor holding `begin`: the last start at or before it.
  size_t i = static_cast<size_t>(std::upper_bound(starts, starts + count, begin) - starts);
  int64_t at = begin;
  for (; i < count && starts[i] < end; ++i) {
    if (starts[i] > at) lengths_.push_back(starts[i] - at);
    at = starts[i];
  }
  if (end > at) lengths_.push_back(end - at);
}

int64_t packed_bytes(const ChunkPieces& pieces, const BlockFormat& format) {
  int64_t bytes = 4 * block_total(pieces, format);
  for (int64_t n : pieces.lengths()) bytes += data_bytes(n, format);
  return (bytes + 3) / 4 * 4;
}

ChunkPlan plan_chunks(const zhost_collective_args& args, int parts, int64_t part_elements, const BlockFormat& format) {
  const int64_t whole = parts * part_elements;
  const auto* segments = reinterpret_cast<const zhost_segments_ext*>(zhost_ext_find(args.ext, ZHOST_EXT_SEGMENTS));
  if (segments && segments->header.struct_size < sizeof(zhost_segments_ext)) segments = nullptr;
  if (segments) {
    bool ok = segments->count > 0 && segments->starts && segments->starts[0] == 0;
    for (size_t i = 1; ok && i < segments->count; ++i) ok = segments->starts[i] > segments->starts[i - 1];
    if (!ok || segments->starts[segments->count - 1] >= whole)
      throw sdk::PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                             kit::format("quant_zeropp: the segments of a collective of {} elements are not 0 then "
                                         "increasing starts below it (a bug in the plugin that started it)",
                                         whole));
  }
  ChunkPlan plan;
  for (int r = 0; r < parts; ++r) {
    plan.chunks.push_back(
        segments ? ChunkPieces(segments->starts, segments->count, r * part_elements, (r + 1) * part_elements)
                 : ChunkPieces(part_elements));
    plan.stride = std::max(plan.stride, packed_bytes(plan.chunks.back(), format));
  }
  return plan;
}

std::optional<Dtype> quantizable(DLDataType type) {
  if (type.lanes != 1) return std::nullopt;
  if (type.code == kDLFloat && type.bits == 32) return Dtype::kF32;
  if (type.code == kDLFloat && type.bits == 16) return Dtype::kF16;
  if (type.code == kDLBfloat && type.bits == 16) return Dtype::kBf16;
  return std::nullopt;
}

void pack(const DeviceOps& ops, const void* src, Dtype type, const ChunkPieces& pieces, const BlockFormat& format,
          uint8_t* out, int64_t stride) {
  const auto* in = static_cast<const uint8_t*>(src);
  pack_with(ops, pieces, format, out, stride, [&](int64_t first, int64_t n, uint8_t* data, float* scales) {
    ops.quantize(in + first * element_bytes(type), type, n, format, data, scales);
  });
}

void pack_compensated(const DeviceOps& ops, const void* src, Dtype type, const ChunkPieces& pieces,
                      const BlockFormat& format, float beta, float* error, uint8_t* out, int64_t stride) {
  const auto* in = static_cast<const uint8_t*>(src);
  pack_with(ops, pieces, format, out, stride, [&](int64_t first, int64_t n, uint8_t* data, float* scales) {
    ops.quantize_compensated(in + first * element_bytes(type), type, n, format, beta, error + first, data, scales);
  });
}

void unpack(const DeviceOps& ops, const uint8_t* packed, const ChunkPieces& pieces, const BlockFormat& format,
            void* dst, Dtype type) {
  auto* out = static_cast<uint8_t*>(dst);
  for_each_piece(packed, pieces, format, [&](int64_t first, int64_t n, const uint8_t* data, const float* scales) {
    ops.dequantize(data, scales, n, format, out + first * element_bytes(type), type);
  });
}

void unpack_add(const DeviceOps& ops, const uint8_t* packed, const ChunkPieces& pieces, const BlockFormat& format,
                float* sum) {
  for_each_piece(packed, pieces, format, [&](int64_t first, int64_t n, const uint8_t* data, const float* scales) {
    ops.dequantize_add(data, scales, n, format, sum + first);
  });
}

ByteBuffer::ByteBuffer(const DeviceOps& ops, int64_t bytes)
    : tensor(at::empty({bytes}, ops.options().dtype(at::kByte))), shape(bytes), ops_(&ops) {
  view.data = tensor.data_ptr();
  view.device = ops.device();
  view.ndim = 1;
  view.dtype = {kDLUInt, 8, 1};
  view.shape = &shape;
}

}  // namespace zhost::zeropp
