// plugins/quant_zeropp/packed_chunks.hpp: one quantized chunk as it travels, and how a collective's buffer is
// cut into chunks. A chunk is quantized in pieces (Note [Blocks within a tensor]), each piece's blocks starting
// at its first element; the packed chunk holds the scales of every block, then each piece's data (an int4
// piece starts on a byte), then zeros up to the collective's stride: the largest packed chunk among its parts,
// a multiple of 4 bytes, so that every part sits at a fixed offset of an all-gather's or all-to-all's byte
// buffer. The block format (data and scales) is docs/zeropp.md's; any element count travels without padding
// elements or a fallback.
//
//   packed chunk: [ fp32 scales of every block ][ data of piece 0 ][ data of piece 1 ] ... [ zeros to stride ]
//
// Note [Blocks within a tensor]: a collective's flat buffer can be several tensors end to end (stage 3's unit:
// a block's parameters), which the host names with ZHOST_EXT_SEGMENTS (zhost/host.h). A quantization block
// that ran across two of them would take its scale from the larger: a norm vector of values near 1 next to a
// weight matrix of values near 0.02 would leave the matrix's values in that block with 2-3 of int8's levels.
// So a chunk is quantized in pieces, its part of each tensor, as DeepSpeed quantizes each parameter apart.
// Without the extension the chunk is one piece.
#pragma once

#include <ATen/core/Tensor.h>
#include <dlpack/dlpack.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "plugins/quant_zeropp/device_ops.hpp"
#include "zhost/host.h"
#include "zhost/kit/zeropp_quant.hpp"

namespace zhost::zeropp {

// The pieces a chunk is quantized in: their lengths, in order.
class ChunkPieces {
 public:
  explicit ChunkPieces(int64_t n) : lengths_{n}, numel_(n) {}
  // [begin, end) of a buffer whose tensors start at starts[0..count) (0, ascending).
  ChunkPieces(const int64_t* starts, size_t count, int64_t begin, int64_t end);
  const std::vector<int64_t>& lengths() const { return lengths_; }
  int64_t numel() const { return numel_; }

 private:
  std::vector<int64_t> lengths_;
  int64_t numel_ = 0;
};

// Bytes of the packed chunk before its zeros (a multiple of 4).
int64_t packed_bytes(const ChunkPieces& pieces, const BlockFormat& format);

// The chunks of one collective: `parts` parts of part_elements each of a buffer of parts x part_elements
// elements, cut by the args' ZHOST_EXT_SEGMENTS when present (checked: a malformed one throws
// ZHOST_ERR_INVALID_ARGUMENT), and the stride between them on the wire.
struct ChunkPlan {
  std::vector<ChunkPieces> chunks;
  int64_t stride = 0;
};
ChunkPlan plan_chunks(const zhost_collective_args& args, int parts, int64_t part_elements, const BlockFormat& format);

// The kernels' element type for a DLPack dtype; empty for types ZeRO++ does not quantize.
std::optional<Dtype> quantizable(DLDataType type);

// Every buffer below is in the memory of `ops` (Note [ZeRO++ on the collective's device], device_ops.hpp).
// out (stride bytes, at least packed_bytes) = the packed chunk of the pieces' elements at src.
void pack(const DeviceOps& ops, const void* src, Dtype type, const ChunkPieces& pieces, const BlockFormat& format,
          uint8_t* out, int64_t stride);
// As pack(), of src + error, updating error (numel fp32 values): Note [LoCo error feedback]
// (zhost/kit/zeropp_quant.hpp).
void pack_compensated(const DeviceOps& ops, const void* src, Dtype type, const ChunkPieces& pieces,
                      const BlockFormat& format, float beta, float* error, uint8_t* out, int64_t stride);
// dst (numel elements of `type`) = the chunk's dequantized values.
void unpack(const DeviceOps& ops, const uint8_t* packed, const ChunkPieces& pieces, const BlockFormat& format,
            void* dst, Dtype type);
// sum[i] += the chunk's dequantized value i (fp32).
void unpack_add(const DeviceOps& ops, const uint8_t* packed, const ChunkPieces& pieces, const BlockFormat& format,
                float* sum);

// A flat byte buffer for packed chunks in the memory of `ops`, and a DLTensor describing it, for the host's
// collectives.
class ByteBuffer {
 public:
  ByteBuffer(const DeviceOps& ops, int64_t bytes);
  uint8_t* data() { return tensor.data_ptr<uint8_t>(); }
  const DeviceOps& ops() const { return *ops_; }  // where it lives
  at::Tensor tensor;                              // uint8, on ops' device
  DLTensor view{};                                // valid while this buffer lives (its shape points into `shape`)
  int64_t shape = 0;
  ByteBuffer(const ByteBuffer&) = delete;
  ByteBuffer& operator=(const ByteBuffer&) = delete;

 private:
  const DeviceOps* ops_;  // static lifetime (DeviceOps::of)
};

}  // namespace zhost::zeropp
