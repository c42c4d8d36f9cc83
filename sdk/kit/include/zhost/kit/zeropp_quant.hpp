// zhost/kit/zeropp_quant.hpp: the ZeRO++ quantization kernels on the CPU: symmetric int8 and int4 block
// quantization of fp32, bf16 and fp16 buffers (qwZ's weights, qgZ's gradients), dequantization into any of
// those types, dequantize-and-add into an fp32 sum (qgZ's intra-node reduction) and the padding arithmetic
// that lets any element count travel in equal parts. The block format (byte layout of data and scales) is
// described once, in docs/zeropp.md; the arithmetic is Note [Block quantization arithmetic] below.
//
// Vectorized with AVX-512 or AVX2 (scalar otherwise), chosen at run time by the same choice as the CPU
// optimizer (zhost/kit/cpu_isa.hpp, ZHOST_CPU_ISA). Every path gives the same bits. One call runs on the
// calling thread; blocks are independent, so a caller may split a buffer at block boundaries over threads.
// CUDA kernels with the same arithmetic: zhost/kit/zeropp_quant_cuda.hpp. The CPU ones are used by
// plugins/quant_zeropp.
//
// Note [Block quantization arithmetic]: a buffer of n elements is cut into blocks of block_size elements
// from its start; the last block may be shorter. Per block, with x the elements read exactly as fp32 and
// Q = 127 (int8) or 7 (int4):
//   a = max |x| (taken on the bit patterns, so the same on every path)
//   a == 0:               scale = 0, every q = 0                    (dequantizes to exact zeros)
//   a is inf or NaN:      scale = NaN, every q = 0                  (dequantizes to NaN: overflow stays visible)
//   otherwise:            scale = fp32(a / Q); p = 2^64 if a < 2^-64 else 1; inv = fp32(Q / (a * p));
//                         q = clamp(round_half_even(fp32(fp32(x * p) * inv)), -Q, Q)
// (p keeps inv finite for tiny blocks; x * p is exact.) Dequantization is d = fp32(q * scale), rounded to
// nearest even into the output type; dequantize-and-add is sum = fp32(sum + fp32(q * scale)). Separate fp32
// multiplies and adds, never fused, on every path (CUDA included), so all paths give the same bits.
//
// Error: for a block with finite a, every element satisfies
//   |d - x| <= a / (2Q) + 5 * 2^-24 * a + (Q + 1) * 2^-150        (fp32 d; the last term only matters
//                                                                  when the scale is an fp32 subnormal)
// and a 16-bit output adds its own rounding of d (half an ulp of d in that type). tests/zeropp checks
// exactly this bound against a float64 reference.
#pragma once

#include <cstdint>
#include <optional>

#include "zhost/kit/cpu_isa.hpp"

namespace zhost::zeropp {

using cpu_optim::Isa;

enum class Dtype { kF32, kBf16, kF16 };  // element type of an unquantized buffer
enum class Bits { kInt8 = 8, kInt4 = 4 };

// The default block size for weights (qwZ). DeepSpeed has no fixed one: its CUDAQuantizer
// (deepspeed/runtime/zero/partition_parameters.py) aims at groups below 8000 elements ("the optimal size is
// 4k") with numel % (8 * groups) == 0, which gives 4096 for a 4096 x 4096 weight. We take that 4096.
constexpr int64_t kDefaultBlockSize = 4096;

struct BlockFormat {
  Bits bits = Bits::kInt8;
  int64_t block_size = kDefaultBlockSize;  // 1 .. 2^24 elements; even for int4 (blocks start on a byte)
};

// Q: the largest |q|, 127 or 7.
int q_max(Bits bits);

// Throws sdk::PluginError(ZHOST_ERR_INVALID_ARGUMENT) naming the problem when `format` is not usable.
void check_format(const BlockFormat& format);

// Blocks (= scales) of a buffer of n elements: ceil(n / block_size).
int64_t block_count(int64_t n, const BlockFormat& format);

// Bytes of quantized data of n elements: n (int8), ceil(n / 2) (int4).
int64_t data_bytes(int64_t n, const BlockFormat& format);

// How a buffer of n elements splits into `parts` equal parts of whole blocks (an all-to-all's or
// all-gather's pieces): each part holds part_elements = block_size * ceil(ceil(n / parts) / block_size)
// elements; the buffer is padded with zeros from n to padded_elements = parts * part_elements. Zeros
// quantize to zeros and add nothing to a sum, so any n works, with no fallback to an unquantized path.
struct PaddedSplit {
  int64_t part_elements = 0;
  int64_t padded_elements = 0;
  int64_t part_blocks = 0;  // scales per part
  int64_t part_bytes = 0;   // data bytes per part
};
PaddedSplit padded_split(int64_t n, int64_t parts, const BlockFormat& format);

struct QuantOptions {
  std::optional<Isa> isa;  // empty: cpu_optim::selected_isa(); one this CPU lacks throws (ZHOST_ERR_UNSUPPORTED)
};

// Quantizes n elements of src (type src_type) into data (data_bytes(n) bytes) and scales
// (block_count(n) floats). Requantizing an fp32 sum is quantize(sum, Dtype::kF32, ...).
void quantize(const void* src, Dtype src_type, int64_t n, const BlockFormat& format, void* data, float* scales,
              const QuantOptions& options = {});

// dst (n elements of dst_type) = the dequantized values.
void dequantize(const void* data, const float* scales, int64_t n, const BlockFormat& format, void* dst, Dtype dst_type,
                const QuantOptions& options = {});

// sum[i] += the dequantized value of element i, in fp32.
void dequantize_add(const void* data, const float* scales, int64_t n, const BlockFormat& format, float* sum,
                    const QuantOptions& options = {});

// Note [LoCo error feedback]: qgZ's gradients lose what int4 cannot say; LoCo (Xie et al., "LoCo: Low-Bit
// Communication Adaptor for Large-scale Model Training", 2024; DeepSpeed's `zeropp_loco_param`) sends that loss
// with the next reduction of the same buffer instead. Per element, with e the buffer's error (zero at first)
// and beta in [0, 1):
//   c = fp32(x + e)                       the compensated value, x read exactly as fp32
//   q, scale = quantize(c)                Note [Block quantization arithmetic]
//   d = fp32(q * scale)                   what the receiver will add up
//   e = fp32(fp32(beta * e) + fp32(fp32(1 - beta) * fp32(c - d)))
// Separate multiplies and adds, as above. A block whose c holds inf or NaN (an overflowed fp16 step) sets its
// e to 0, so one bad step does not poison the feedback. Why it helps: with r = c - d what a send lost, each
// send delivers d = x + e_old - r, and r = (e_new - beta * e_old) / (1 - beta); over T sends of one buffer
// (e starting at 0) the d add up to the sum of the x minus e_T / (1 - beta). Every e is a mix of past r, each
// within half a quantization step, so the error of the sum stays within half a step / (1 - beta) however
// large T grows, where plain quantization's can grow with T (tests/zeropp checks both, up to fp32 rounding).
//
// quantize_compensated: quantize(x + error) into data/scales as quantize() does, and update error (n fp32
// values, in and out) by the rule above.
void quantize_compensated(const void* src, Dtype src_type, int64_t n, const BlockFormat& format, float beta,
                          float* error, void* data, float* scales, const QuantOptions& options = {});

}  // namespace zhost::zeropp
