// sdk/kit/zeropp_quant/zeropp_quant.cpp: the front of the ZeRO++ quantization kernels: format and argument
// checks, the sizes of the block format and its padded splits, and the choice of ISA path (the CPU
// optimizer's, zhost/kit/cpu_isa.hpp). The kernels live in quant_{scalar,avx2,avx512}.cpp.
#include "zhost/kit/zeropp_quant.hpp"

#include "../src/isa_choice.hpp"
#include "../src/kit_error.hpp"
#include "quant_kernels.hpp"

namespace zhost::zeropp {
namespace {

using kit::detail::fail;

constexpr int64_t kMaxBlockSize = int64_t{1} << 24;

detail::KernelTable kernels(const QuantOptions& options) {
  const Isa isa = kit::detail::chosen_isa(options.isa, "zeropp quantization");
#if defined(ZHOST_CPU_OPTIM_X86)
  if (isa == Isa::kAvx512) return detail::avx512_kernels();
  if (isa == Isa::kAvx2) return detail::avx2_kernels();
#endif
  return detail::scalar_kernels();
}

int dtype_index(Dtype type) {
  if (type != Dtype::kF32 && type != Dtype::kBf16 && type != Dtype::kF16) {
    fail(ZHOST_ERR_INVALID_ARGUMENT, "zeropp quantization: unknown element type {}", static_cast<int>(type));
  }
  return static_cast<int>(type);
}

int bits_index(Bits bits) { return bits == Bits::kInt8 ? 0 : 1; }

// Checks the format, n and the buffers every call takes.
void check_call(int64_t n, const BlockFormat& format, const void* data, const float* scales, const void* values) {
  check_format(format);
  if (n < 0) fail(ZHOST_ERR_INVALID_ARGUMENT, "zeropp quantization: element count {} is negative", n);
  if (n > 0 && (data == nullptr || scales == nullptr || values == nullptr)) {
    fail(ZHOST_ERR_INVALID_ARGUMENT, "zeropp quantization: null data, scales or values buffer for {} elements", n);
  }
}

}  // namespace

int q_max(Bits bits) { return bits == Bits::kInt8 ? 127 : 7; }

void check_format(const BlockFormat& format) {
  if (format.bits != Bits::kInt8 && format.bits != Bits::kInt4) {
    fail(ZHOST_ERR_INVALID_ARGUMENT, "zeropp quantization: {} bits per value; use 8 or 4",
         static_cast<int>(format.bits));
  }
  if (format.block_size < 1 || format.block_size > kMaxBlockSize) {
    fail(ZHOST_ERR_INVALID_ARGUMENT, "zeropp quantization: block size {} is outside 1 .. {}", format.block_size,
         kMaxBlockSize);
  }
  if (format.bits == Bits::kInt4 && format.block_size % 2 != 0) {
    fail(ZHOST_ERR_INVALID_ARGUMENT,
         "zeropp quantization: int4 blocks must have an even size so that each starts on a byte, got {}",
         format.block_size);
  }
}

int64_t block_count(int64_t n, const BlockFormat& format) {
  check_format(format);
  return (n + format.block_size - 1) / format.block_size;
}

int64_t data_bytes(int64_t n, const BlockFormat& format) {
  check_format(format);
  return format.bits == Bits::kInt8 ? n : (n + 1) / 2;
}

PaddedSplit padded_split(int64_t n, int64_t parts, const BlockFormat& format) {
  check_format(format);
  if (n < 0 || parts < 1) {
    fail(ZHOST_ERR_INVALID_ARGUMENT, "zeropp quantization: cannot split {} elements into {} parts", n, parts);
  }
  PaddedSplit split;
  split.part_blocks = ((n + parts - 1) / parts + format.block_size - 1) / format.block_size;
  split.part_elements = split.part_blocks * format.block_size;
  split.padded_elements = split.part_elements * parts;
  split.part_bytes = data_bytes(split.part_elements, format);
  return split;
}

void quantize(const void* src, Dtype src_type, int64_t n, const BlockFormat& format, void* data, float* scales,
              const QuantOptions& options) {
  check_call(n, format, data, scales, src);
  const detail::QuantizeFn kernel = kernels(options).quantize[dtype_index(src_type)][bits_index(format.bits)];
  if (n > 0) kernel(src, n, format.block_size, static_cast<uint8_t*>(data), scales);
}

void dequantize(const void* data, const float* scales, int64_t n, const BlockFormat& format, void* dst, Dtype dst_type,
                const QuantOptions& options) {
  check_call(n, format, data, scales, dst);
  const detail::DequantizeFn kernel = kernels(options).dequantize[dtype_index(dst_type)][bits_index(format.bits)];
  if (n > 0) kernel(static_cast<const uint8_t*>(data), scales, n, format.block_size, dst);
}

void dequantize_add(const void* data, const float* scales, int64_t n, const BlockFormat& format, float* sum,
                    const QuantOptions& options) {
  check_call(n, format, data, scales, sum);
  const detail::AddFn kernel = kernels(options).add[bits_index(format.bits)];
  if (n > 0) kernel(static_cast<const uint8_t*>(data), scales, n, format.block_size, sum);
}

}  // namespace zhost::zeropp
