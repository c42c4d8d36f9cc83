// tests/zeropp/quant_kernels_test.cpp: the ZeRO++ quantization kernels (zhost/kit/zeropp_quant.hpp) against
// a float64 reference on odd sizes, for every input and output type, int8 and int4, on every ISA path this
// CPU has; bit agreement between the paths; zero, tiny and non-finite blocks; the byte layout of
// docs/zeropp.md; padded splits and a qgZ-style reduction (dequantize, add in fp32, requantize); argument
// checks; error feedback (LoCo).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/support/half_reference.hpp"
#include "tests/support/scoped_env.hpp"
#include "zhost/cpp/error.hpp"
#include "zhost/kit/zeropp_quant.hpp"

namespace zhost::zeropp {
namespace {

using zhost::testing::bits_of;
using zhost::testing::decode_bf16;
using zhost::testing::decode_f16;
using zhost::testing::float_of;
using zhost::testing::round_to_bf16;
using zhost::testing::round_to_f16;

constexpr Dtype kDtypes[] = {Dtype::kF32, Dtype::kBf16, Dtype::kF16};
constexpr Bits kBits[] = {Bits::kInt8, Bits::kInt4};
constexpr int64_t kSizes[] = {1, 7, 31, 1000003};

const char* dtype_name(Dtype type) { return type == Dtype::kF32 ? "fp32" : (type == Dtype::kBf16 ? "bf16" : "fp16"); }

// A buffer of n elements of one type, as raw bytes, read back by value in double.
struct Buffer {
  Dtype type = Dtype::kF32;
  std::vector<uint8_t> bytes;

  Buffer(Dtype t, int64_t n) : type(t), bytes(static_cast<size_t>(n) * (t == Dtype::kF32 ? 4 : 2)) {}
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }

  double at(int64_t i) const {
    if (type == Dtype::kF32) {
      float x;
      std::memcpy(&x, bytes.data() + 4 * i, 4);
      return x;
    }
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    return type == Dtype::kBf16 ? decode_bf16(h) : decode_f16(h);
  }
  uint16_t half_at(int64_t i) const {
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    return h;
  }
  void set_bits(int64_t i, uint32_t pattern) {
    if (type == Dtype::kF32) {
      std::memcpy(bytes.data() + 4 * i, &pattern, 4);
    } else {
      const auto h = static_cast<uint16_t>(pattern);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
};

// Exponent field width and bias, mantissa width of each type.
struct Layout {
  int mantissa_bits;
  int exponent_max;  // largest finite exponent field
};
Layout layout_of(Dtype type) {
  if (type == Dtype::kF32) return {23, 254};
  if (type == Dtype::kBf16) return {7, 254};
  return {10, 30};
}

// Random finite values: per block a top exponent field (mostly mid-range; a few blocks near the top of the
// type's range or among subnormals), each element up to 12 binades below it, random mantissa and sign.
// Block 1 (when there is one) is all zeros, with negative zeros. Without `extremes`, no block near the top.
Buffer random_values(Dtype type, int64_t n, int64_t block, uint32_t seed, bool extremes = true) {
  std::mt19937 rng(seed);
  const Layout lay = layout_of(type);
  const int mid = type == Dtype::kF16 ? 15 : 127;
  Buffer buffer(type, n);
  for (int64_t begin = 0, b = 0; begin < n; begin += block, ++b) {
    const int pick = static_cast<int>(rng() % 16);
    int top = mid - 10 + static_cast<int>(rng() % 16);
    if (pick == 0 && extremes) top = lay.exponent_max;
    if (pick == 1) top = 1;
    for (int64_t i = begin; i < std::min(n, begin + block); ++i) {
      const int exponent = std::max(0, top - static_cast<int>(rng() % 13));
      const auto mantissa = static_cast<uint32_t>(rng() & ((1u << lay.mantissa_bits) - 1));
      const auto sign = static_cast<uint32_t>(rng() & 1u);
      uint32_t pattern = (sign << (lay.mantissa_bits + (type == Dtype::kF16 ? 5 : 8))) |
                         (static_cast<uint32_t>(exponent) << lay.mantissa_bits) | mantissa;
      if (b == 1) pattern = sign << (type == Dtype::kF32 ? 31 : 15);
      buffer.set_bits(i, pattern);
    }
  }
  return buffer;
}

// Half an ulp of v in `type` (fp32 results are checked by the fp32 bound itself: 0).
double half_ulp(Dtype type, double v) {
  if (type == Dtype::kF32 || v == 0) return 0;
  const int precision = type == Dtype::kBf16 ? 8 : 11;
  const int min_exponent = type == Dtype::kBf16 ? -126 : -14;
  const int exponent = std::max(std::ilogb(v), min_exponent);
  return std::ldexp(0.5, exponent - precision + 1);
}

// The value a dequantized fp32 d must have in `type`: d rounded to nearest even by the tests' reference.
double rounded_to(Dtype type, float d) {
  if (type == Dtype::kF32) return d;
  return type == Dtype::kBf16 ? decode_bf16(round_to_bf16(d)) : decode_f16(round_to_f16(d));
}

int stored_q(const std::vector<uint8_t>& data, Bits bits, int64_t i) {
  if (bits == Bits::kInt8) return static_cast<int8_t>(data[static_cast<size_t>(i)]);
  const int nibble = (i % 2 == 0) ? (data[static_cast<size_t>(i / 2)] & 0xF) : (data[static_cast<size_t>(i / 2)] >> 4);
  return nibble >= 8 ? nibble - 16 : nibble;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (const Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (cpu_optim::isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

// What one quantize + dequantize round gives on one path.
struct Round {
  std::vector<uint8_t> data;
  std::vector<float> scales;
  std::vector<Buffer> outputs;  // per output type, kDtypes order
  std::vector<float> sums;      // dequantize_add onto `start`
};

Round run_round(const Buffer& input, int64_t n, const BlockFormat& format, Isa isa, const std::vector<float>& start) {
  const QuantOptions options{isa};
  Round round;
  round.data.assign(static_cast<size_t>(data_bytes(n, format)), 0xAB);  // garbage: every byte must be written
  round.scales.assign(static_cast<size_t>(block_count(n, format)), -1.0f);
  quantize(input.data(), input.type, n, format, round.data.data(), round.scales.data(), options);
  for (const Dtype out : kDtypes) {
    round.outputs.emplace_back(out, n);
    dequantize(round.data.data(), round.scales.data(), n, format, round.outputs.back().data(), out, options);
  }
  round.sums = start;
  dequantize_add(round.data.data(), round.scales.data(), n, format, round.sums.data(), options);
  return round;
}

std::vector<float> random_sums(int64_t n) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> sums(static_cast<size_t>(n));
  for (float& s : sums) s = dist(rng);
  return sums;
}

// Block sizes tried with each element count: DeepSpeed-like default, odd (int8) or small even, and one
// that does not divide the SIMD widths.
std::vector<int64_t> block_sizes(Bits bits) {
  return bits == Bits::kInt8 ? std::vector<int64_t>{kDefaultBlockSize, 1, 7, 1000}
                             : std::vector<int64_t>{kDefaultBlockSize, 2, 30, 1000};
}

// ---- The arithmetic against float64, per ISA path ----

class ZeroppQuantMath : public ::testing::TestWithParam<Isa> {};

// For each block (a = max |x| in double, Q = 127 or 7):
//   scale == fp32(a / Q) exactly (correctly rounded; a NaN for non-finite blocks is tested elsewhere);
//   |q - x Q / a| <= 1/2 + 1e-4 (rounding to nearest, up to the fp32 error of x * (Q / a));
//   dequantized fp32 d == fp32(q * scale), and |d - x| <= a / (2Q) + 5 * 2^-24 * a + (Q + 1) * 2^-150;
//   each 16-bit output == d rounded to nearest even by the tests' reference, and, in the input's own type,
//   |out - x| <= that bound + half an ulp of d in that type;
//   dequantize_add: sum == fp32(start + d).
TEST_P(ZeroppQuantMath, MatchesFloat64ReferenceOnOddSizesForEveryType) {
  const Isa isa = GetParam();
  if (!cpu_optim::isa_supported(isa)) {
    GTEST_SKIP() << "this CPU lacks " << cpu_optim::isa_name(isa)
                 << " (best here: " << cpu_optim::isa_name(cpu_optim::best_isa()) << ")";
  }
  for (const Bits bits : kBits) {
    const double q_max_value = q_max(bits);
    for (const Dtype type : kDtypes) {
      for (const int64_t n : kSizes) {
        for (const int64_t block : block_sizes(bits)) {
          if (n == 1000003 && block != kDefaultBlockSize) continue;  // other blocks: the short sizes cover them
          SCOPED_TRACE(std::string(dtype_name(type)) + " int" + std::to_string(static_cast<int>(bits)) +
                       " n=" + std::to_string(n) + " block=" + std::to_string(block));
          const BlockFormat format{bits, block};
          const Buffer input = random_values(type, n, block, static_cast<uint32_t>(n + block));
          const std::vector<float> start = random_sums(n);
          const Round round = run_round(input, n, format, isa, start);
          int64_t failures = 0;
          for (int64_t begin = 0, b = 0; begin < n && failures < 5; begin += block, ++b) {
            const int64_t end = std::min(n, begin + block);
            double a = 0;
            for (int64_t i = begin; i < end; ++i) a = std::max(a, std::fabs(input.at(i)));
            const float scale = round.scales[static_cast<size_t>(b)];
            if (scale != static_cast<float>(a / q_max_value)) {
              ADD_FAILURE() << "block " << b << ": scale " << scale << ", expected " << a / q_max_value;
              ++failures;
            }
            const double bound =
                a / (2 * q_max_value) + 5 * std::ldexp(a, -24) + (q_max_value + 1) * std::ldexp(1.0, -150);
            for (int64_t i = begin; i < end && failures < 5; ++i) {
              const double x = input.at(i);
              const int q = stored_q(round.data, bits, i);
              const double exact_q = a == 0 ? 0 : x * q_max_value / a;
              const float d = static_cast<float>(round.outputs[0].at(i));
              const double out = round.outputs[static_cast<size_t>(type)].at(i);
              const bool ok = std::fabs(q - exact_q) <= 0.5 + 1e-4 && std::abs(q) <= q_max_value &&
                              d == static_cast<float>(q * static_cast<double>(scale)) && std::fabs(d - x) <= bound &&
                              std::fabs(out - x) <= bound + half_ulp(type, d) &&
                              round.outputs[1].at(i) == rounded_to(Dtype::kBf16, d) &&
                              round.outputs[2].at(i) == rounded_to(Dtype::kF16, d) &&
                              round.sums[static_cast<size_t>(i)] == start[static_cast<size_t>(i)] + d;
              if (!ok) {
                ADD_FAILURE() << "element " << i << ": x " << x << ", a " << a << ", q " << q << " (exact " << exact_q
                              << "), d " << d << ", out " << out << ", bound " << bound << ", sum "
                              << round.sums[static_cast<size_t>(i)] << " from " << start[static_cast<size_t>(i)];
                ++failures;
              }
            }
          }
          if (bits == Bits::kInt4 && n % 2 == 1) {
            EXPECT_EQ(round.data.back() >> 4, 0) << "the unused high nibble of an odd-length buffer must be 0";
          }
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) { return cpu_optim::isa_name(info.param); }

}  // namespace
}  // namespace zhost::zeropp

namespace zhost::cpu_optim {
void PrintTo(Isa isa, std::ostream* os) { *os << isa_name(isa); }  // test names say the path, not its bytes
}  // namespace zhost::cpu_optim

namespace zhost::zeropp {
namespace {

INSTANTIATE_TEST_SUITE_P(Paths, ZeroppQuantMath, ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512),
                         isa_param_name);

// ---- Agreement between paths ----

TEST(ZeroppQuant, EveryPathGivesTheSameBits) {
  const std::vector<Isa> isas = supported_isas();
  if (isas.size() < 2) GTEST_SKIP() << "only the scalar path runs on this CPU";
  for (const Bits bits : kBits) {
    for (const Dtype type : kDtypes) {
      for (const int64_t n : kSizes) {
        for (const int64_t block : block_sizes(bits)) {
          if (n == 1000003 && block != kDefaultBlockSize) continue;
          const BlockFormat format{bits, block};
          Buffer input = random_values(type, n, block, static_cast<uint32_t>(3 * n + block));
          if (n > 2 * block) {  // a non-finite block: an inf, a NaN
            input.set_bits(2 * block, type == Dtype::kF32 ? 0x7F800000u : (type == Dtype::kBf16 ? 0x7F80u : 0x7C00u));
            input.set_bits(2 * block + 1,
                           type == Dtype::kF32 ? 0xFFC00001u : (type == Dtype::kBf16 ? 0xFFC1u : 0xFE01u));
          }
          const std::vector<float> start = random_sums(n);
          const Round reference = run_round(input, n, format, Isa::kScalar, start);
          for (const Isa isa : isas) {
            SCOPED_TRACE(std::string(cpu_optim::isa_name(isa)) + " vs scalar, " + dtype_name(type) + " int" +
                         std::to_string(static_cast<int>(bits)) + " n=" + std::to_string(n) +
                         " block=" + std::to_string(block));
            const Round round = run_round(input, n, format, isa, start);
            ASSERT_EQ(round.data, reference.data);
            ASSERT_EQ(std::memcmp(round.scales.data(), reference.scales.data(), 4 * round.scales.size()), 0);
            for (size_t k = 0; k < round.outputs.size(); ++k)
              ASSERT_EQ(round.outputs[k].bytes, reference.outputs[k].bytes);
            ASSERT_EQ(std::memcmp(round.sums.data(), reference.sums.data(), 4 * round.sums.size()), 0);
          }
        }
      }
    }
  }
}

// ---- Special blocks ----

TEST(ZeroppQuant, ZeroBlocksGiveZeroScaleAndExactZeros) {
  for (const Isa isa : supported_isas()) {
    for (const Bits bits : kBits) {
      for (const Dtype type : kDtypes) {
        SCOPED_TRACE(std::string(cpu_optim::isa_name(isa)) + " " + dtype_name(type));
        const int64_t n = 45;
        const BlockFormat format{bits, 20};
        Buffer input(type, n);
        for (int64_t i = 1; i < n; i += 2) input.set_bits(i, type == Dtype::kF32 ? 0x80000000u : 0x8000u);  // -0.0
        std::vector<uint8_t> data(static_cast<size_t>(data_bytes(n, format)), 0xFF);
        std::vector<float> scales(3, 1.0f);
        quantize(input.data(), type, n, format, data.data(), scales.data(), {isa});
        for (const float s : scales) EXPECT_EQ(bits_of(s), 0u) << "scale must be +0";
        for (const uint8_t byte : data) EXPECT_EQ(byte, 0);
        for (const Dtype out : kDtypes) {
          Buffer output(out, n);
          std::fill(output.bytes.begin(), output.bytes.end(), uint8_t{0xFF});
          dequantize(data.data(), scales.data(), n, format, output.data(), out, {isa});
          for (const uint8_t byte : output.bytes) ASSERT_EQ(byte, 0) << "dequantized zeros must be +0";
        }
      }
    }
  }
}

TEST(ZeroppQuant, BlockWithInfOrNaNGetsNaNScaleAndDequantizesToNaN) {
  for (const Isa isa : supported_isas()) {
    const BlockFormat format{Bits::kInt8, 16};
    std::vector<float> input(40, 1.5f);
    input[3] = std::numeric_limits<float>::infinity();
    input[20] = std::numeric_limits<float>::quiet_NaN();
    std::vector<int8_t> data(40);
    std::vector<float> scales(3);
    quantize(input.data(), Dtype::kF32, 40, format, data.data(), scales.data(), {isa});
    EXPECT_TRUE(std::isnan(scales[0]) && std::isnan(scales[1])) << cpu_optim::isa_name(isa);
    EXPECT_EQ(scales[2], 1.5f / 127);
    std::vector<float> output(40);
    dequantize(data.data(), scales.data(), 40, format, output.data(), Dtype::kF32, {isa});
    for (int i = 0; i < 32; ++i) EXPECT_TRUE(std::isnan(output[static_cast<size_t>(i)])) << "element " << i;
    for (int i = 32; i < 40; ++i) EXPECT_EQ(output[static_cast<size_t>(i)], 1.5f);
  }
}

TEST(ZeroppQuant, RoundsHalfToEvenAndKeepsSubnormalBlocksWithinTheBound) {
  for (const Isa isa : supported_isas()) {
    // a = 127, so x * Q / a = x exactly: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> 0, -1.5 -> -2.
    const std::vector<float> ties = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f};
    std::vector<int8_t> q(ties.size());
    float scale = 0;
    quantize(ties.data(), Dtype::kF32, 6, {Bits::kInt8, 6}, q.data(), &scale, {isa});
    EXPECT_EQ(q, (std::vector<int8_t>{127, 0, 2, 2, 0, -2})) << cpu_optim::isa_name(isa);
    // A block of fp32 subnormals (a < 2^-64 takes the prescaled path): error within the stated bound.
    const std::vector<float> tiny = {float_of(0x00000001u), float_of(0x80000003u), float_of(0x007FFFFFu),
                                     float_of(0x00012345u)};
    const double a = float_of(0x007FFFFFu);
    std::vector<int8_t> tq(4);
    std::vector<float> out(4);
    quantize(tiny.data(), Dtype::kF32, 4, {Bits::kInt8, 4}, tq.data(), &scale, {isa});
    dequantize(tq.data(), &scale, 4, {Bits::kInt8, 4}, out.data(), Dtype::kF32, {isa});
    EXPECT_EQ(tq[2], 127);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_LE(std::fabs(static_cast<double>(out[i]) - tiny[i]),
                a / 254 + 5 * std::ldexp(a, -24) + 128 * std::ldexp(1.0, -150));
    }
  }
}

// ---- The byte layout of docs/zeropp.md ----

TEST(ZeroppQuant, ByteLayoutIsTheDocumentedOne) {
  // int4, block 4: block 0 = {7, -7, 1, 0} (a = 7, scale 1), block 1 = {-2} (a = 2, scale 2/7, q = -7).
  const std::vector<float> values = {7.0f, -7.0f, 1.0f, 0.0f, -2.0f};
  std::vector<uint8_t> data(3, 0xEE);
  std::vector<float> scales(2);
  quantize(values.data(), Dtype::kF32, 5, {Bits::kInt4, 4}, data.data(), scales.data());
  EXPECT_EQ(data, (std::vector<uint8_t>{0x97, 0x01, 0x09}));  // low nibble first; -7 = 0x9; the last high nibble 0
  EXPECT_EQ(scales, (std::vector<float>{1.0f, 2.0f / 7}));
  // int8: one two's-complement byte per element.
  std::vector<uint8_t> data8(5);
  quantize(values.data(), Dtype::kF32, 5, {Bits::kInt8, 5}, data8.data(), scales.data());
  EXPECT_EQ(data8, (std::vector<uint8_t>{0x7F, 0x81, 0x12, 0x00, 0xDC}));  // 127, -127, 18 (18.14), 0, -36 (-36.29)
  EXPECT_EQ(scales[0], 7.0f / 127);
}

// ---- Padding and a qgZ-style reduction ----

TEST(ZeroppQuant, PaddedSplitGivesEqualPartsOfWholeBlocksForAnySize) {
  for (const Bits bits : kBits) {
    for (const int64_t block : {int64_t{2}, int64_t{30}, kDefaultBlockSize}) {
      for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{31}, int64_t{4097}, int64_t{1000003}}) {
        for (int64_t parts = 1; parts <= 8; ++parts) {
          const BlockFormat format{bits, block};
          const PaddedSplit split = padded_split(n, parts, format);
          EXPECT_GE(split.padded_elements, n);
          EXPECT_EQ(split.padded_elements, split.part_elements * parts);
          EXPECT_EQ(split.part_elements % block, 0);
          EXPECT_LT(split.part_elements - (n + parts - 1) / parts, block) << "more padding than needed";
          EXPECT_EQ(split.part_blocks, block_count(split.part_elements, format));
          EXPECT_EQ(split.part_bytes, data_bytes(split.part_elements, format));
        }
      }
    }
  }
  EXPECT_THROW(padded_split(10, 0, {}), sdk::PluginError);
}

// Four "ranks" hold bf16 gradients of an odd length; each quantizes its padded buffer to int4 in parts;
// the part every rank sends to rank r is dequantized and added in fp32 in rank order, then requantized to
// int4 (qgZ's intra-node step). The result is within the summed per-step bounds of the float64 sum, and
// quantizing part by part gives the same bytes as the whole padded buffer at once.
TEST(ZeroppQuant, Int4ReductionThroughPaddedPartsStaysWithinTheBound) {
  const int64_t n = 100003;
  const int64_t ranks = 4;
  const BlockFormat format{Bits::kInt4, 512};
  const PaddedSplit split = padded_split(n, ranks, format);
  std::vector<Buffer> grads;
  for (int64_t r = 0; r < ranks; ++r) {
    Buffer padded(Dtype::kBf16, split.padded_elements);  // zeros
    const Buffer values = random_values(Dtype::kBf16, n, format.block_size, static_cast<uint32_t>(11 + r), false);
    std::copy(values.bytes.begin(), values.bytes.end(), padded.bytes.begin());
    grads.push_back(std::move(padded));
  }
  std::vector<std::vector<uint8_t>> data(static_cast<size_t>(ranks));
  std::vector<std::vector<float>> scales(static_cast<size_t>(ranks));
  for (int64_t r = 0; r < ranks; ++r) {
    auto& d = data[static_cast<size_t>(r)];
    auto& s = scales[static_cast<size_t>(r)];
    d.resize(static_cast<size_t>(split.part_bytes * ranks));
    s.resize(static_cast<size_t>(split.part_blocks * ranks));
    for (int64_t p = 0; p < ranks; ++p) {
      quantize(grads[static_cast<size_t>(r)].bytes.data() + 2 * p * split.part_elements, Dtype::kBf16,
               split.part_elements, format, d.data() + p * split.part_bytes, s.data() + p * split.part_blocks);
    }
    std::vector<uint8_t> whole(d.size());
    std::vector<float> whole_scales(s.size());
    quantize(grads[static_cast<size_t>(r)].data(), Dtype::kBf16, split.padded_elements, format, whole.data(),
             whole_scales.data());
    ASSERT_EQ(whole, d);
    ASSERT_EQ(whole_scales, s);
  }
  for (int64_t part = 0; part < ranks; ++part) {
    std::vector<float> sum(static_cast<size_t>(split.part_elements), 0.0f);
    for (int64_t r = 0; r < ranks; ++r) {
      dequantize_add(data[static_cast<size_t>(r)].data() + part * split.part_bytes,
                     scales[static_cast<size_t>(r)].data() + part * split.part_blocks, split.part_elements, format,
                     sum.data());
    }
    std::vector<uint8_t> requantized(static_cast<size_t>(split.part_bytes));
    std::vector<float> requantized_scales(static_cast<size_t>(split.part_blocks));
    quantize(sum.data(), Dtype::kF32, split.part_elements, format, requantized.data(), requantized_scales.data());
    std::vector<float> result(sum.size());
    dequantize(requantized.data(), requantized_scales.data(), split.part_elements, format, result.data(), Dtype::kF32);
    for (int64_t begin = 0; begin < split.part_elements; begin += format.block_size) {
      // Per-block bound: each rank's quantization, the fp32 sum, and the requantization.
      double rank_bounds = 0;
      double sum_abs_max = 0;
      for (int64_t r = 0; r < ranks; ++r) {
        double a = 0;
        for (int64_t i = begin; i < begin + format.block_size; ++i) {
          a = std::max(a, std::fabs(grads[static_cast<size_t>(r)].at(part * split.part_elements + i)));
        }
        rank_bounds += a / 14 + 5 * std::ldexp(a, -24);
      }
      for (int64_t i = begin; i < begin + format.block_size; ++i) {
        sum_abs_max = std::max(sum_abs_max, std::fabs(static_cast<double>(sum[static_cast<size_t>(i)])));
      }
      const double bound = rank_bounds + ranks * std::ldexp(sum_abs_max + rank_bounds, -24) + sum_abs_max / 14 +
                           5 * std::ldexp(sum_abs_max, -24) + 64 * std::ldexp(1.0, -150);
      for (int64_t i = begin; i < begin + format.block_size; ++i) {
        double exact = 0;
        for (int64_t r = 0; r < ranks; ++r) exact += grads[static_cast<size_t>(r)].at(part * split.part_elements + i);
        ASSERT_LE(std::fabs(result[static_cast<size_t>(i)] - exact), bound) << "part " << part << " element " << i;
        if (part * split.part_elements + i >= n) {
          ASSERT_EQ(result[static_cast<size_t>(i)], 0.0f) << "padding must stay 0";
        }
      }
    }
  }
}

// ---- Arguments ----

zhost_status_code code_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const sdk::PluginError& e) {
    return e.code();
  }
  return ZHOST_OK;
}

TEST(ZeroppQuant, RejectsBadFormatsArgumentsAndIsas) {
  float x = 1;
  uint8_t q = 0;
  float s = 0;
  EXPECT_EQ(code_of([&] { quantize(&x, Dtype::kF32, 1, {Bits::kInt8, 0}, &q, &s); }), ZHOST_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of([&] { quantize(&x, Dtype::kF32, 1, {Bits::kInt4, 3}, &q, &s); }), ZHOST_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of([&] {
              quantize(&x, Dtype::kF32, 1, {static_cast<Bits>(2), 4}, &q, &s);
            }),
            ZHOST_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of([&] { quantize(&x, Dtype::kF32, -1, {}, &q, &s); }), ZHOST_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of([&] { quantize(nullptr, Dtype::kF32, 1, {}, &q, &s); }), ZHOST_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of([&] { dequantize(&q, &s, 1, {}, &x, static_cast<Dtype>(9)); }), ZHOST_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of([&] { quantize(nullptr, Dtype::kF32, 0, {}, nullptr, nullptr); }), ZHOST_OK) << "n = 0 is a no-op";
  {
    zhost::testing::ScopedEnv env("ZHOST_CPU_ISA", "sse9");
    EXPECT_EQ(code_of([&] { quantize(&x, Dtype::kF32, 1, {}, &q, &s); }), ZHOST_ERR_UNSUPPORTED);
  }
  for (const Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (cpu_optim::isa_supported(isa)) continue;
    EXPECT_EQ(code_of([&] { quantize(&x, Dtype::kF32, 1, {}, &q, &s, {isa}); }), ZHOST_ERR_UNSUPPORTED);
  }
}

// ---- error feedback (Note [LoCo error feedback]) ----------------------------------------------------------------

// quantize_compensated against the rule written out here with separate fp32 operations: the data and scales
// are quantize()'s of x + e (checked above against float64), the new error is beta * e + (1 - beta) * (c - d).
// Sizes span several of the kernel's passes (65536 elements) and end in a partial block.
TEST(ZeroppErrorFeedback, FollowsTheDocumentedRuleForEveryTypeAndWidth) {
  for (const Dtype type : kDtypes) {
    for (const Bits bits : kBits) {
      for (const float beta : {0.0f, 0.8f}) {
        for (const int64_t n : {int64_t{7}, int64_t{140001}}) {
          SCOPED_TRACE(std::string(dtype_name(type)) + " int" + std::to_string(static_cast<int>(bits)) + " beta " +
                       std::to_string(beta) + " n " + std::to_string(n));
          const BlockFormat format{bits, 512};
          const Buffer x = random_values(type, n, format.block_size, 7, false);
          std::mt19937 rng(11);
          std::uniform_real_distribution<float> noise(-0.01f, 0.01f);
          std::vector<float> error(static_cast<size_t>(n));
          for (float& e : error) e = noise(rng);
          std::vector<float> compensated(error.size());
          for (int64_t i = 0; i < n; ++i) compensated[i] = static_cast<float>(x.at(i)) + error[i];

          std::vector<uint8_t> data(static_cast<size_t>(data_bytes(n, format)));
          std::vector<float> scales(static_cast<size_t>(block_count(n, format)));
          std::vector<float> updated = error;
          quantize_compensated(x.data(), type, n, format, beta, updated.data(), data.data(), scales.data());

          std::vector<uint8_t> want_data(data.size());
          std::vector<float> want_scales(scales.size()), sent(error.size());
          quantize(compensated.data(), Dtype::kF32, n, format, want_data.data(), want_scales.data());
          dequantize(want_data.data(), want_scales.data(), n, format, sent.data(), Dtype::kF32);
          ASSERT_EQ(data, want_data);
          ASSERT_EQ(std::memcmp(scales.data(), want_scales.data(), 4 * scales.size()), 0);
          for (int64_t i = 0; i < n; ++i) {
            const float lost = compensated[i] - sent[i];
            const float kept = beta * error[i];
            const float taken = (1.0f - beta) * lost;
            const float want = kept + taken;
            ASSERT_EQ(bits_of(updated[i]), bits_of(want)) << "element " << i;
          }
        }
      }
    }
  }
}

// The reason LoCo exists: sending the same int4 buffer T times, the dequantized sums drift from T x by a
// bounded amount with feedback (half a step / (1 - beta), plus fp32 rounding), and by up to T times the
// rounding error without it.
TEST(ZeroppErrorFeedback, KeepsTheSumOfManySendsWithinOneStep) {
  const BlockFormat format{Bits::kInt4, 512};
  const int64_t n = 512;
  const int sends = 2000;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>((i % 13) - 6) / 6.0f * 0.9f + 0.037f;  // |x| <= 0.937
  const double a = 0.937;
  const double half_step = a / 14;
  std::vector<uint8_t> data(static_cast<size_t>(data_bytes(n, format)));
  std::vector<float> scales(1), sent(static_cast<size_t>(n));
  auto worst_drift = [&](bool feedback, float beta) {
    std::vector<float> error(static_cast<size_t>(n), 0.0f);
    std::vector<double> total(static_cast<size_t>(n), 0.0);
    for (int t = 0; t < sends; ++t) {
      if (feedback)
        quantize_compensated(x.data(), Dtype::kF32, n, format, beta, error.data(), data.data(), scales.data());
      else
        quantize(x.data(), Dtype::kF32, n, format, data.data(), scales.data());
      dequantize(data.data(), scales.data(), n, format, sent.data(), Dtype::kF32);
      for (int64_t i = 0; i < n; ++i) total[i] += sent[i];
    }
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(total[i] - sends * static_cast<double>(x[i])));
    return worst;
  };
  // fp32 rounding of c and of the error update: a few ulps of a per send.
  const double rounding = sends * 4 * std::ldexp(a, -24);
  for (const float beta : {0.0f, 0.8f}) {
    // c = x + e reaches |x| + half a step, so its step is up to 1 + 1/14 times x's.
    const double bound = half_step * (1 + 1.0 / 14) / (1 - beta) + rounding / (1 - beta);
    EXPECT_LE(worst_drift(true, beta), bound) << "beta " << beta;
  }
  EXPECT_GT(worst_drift(false, 0), 100 * half_step) << "without feedback the drift grows with the sends";
}

// A block holding inf or NaN (an overflowed step) restarts its own error at 0; the other blocks follow the rule.
TEST(ZeroppErrorFeedback, NonFiniteBlockRestartsOnlyItsOwnError) {
  const BlockFormat format{Bits::kInt8, 4};
  float x[8] = {1, 2, std::numeric_limits<float>::infinity(), 3, 0.5f, -0.25f, 0.125f, 1};
  float error[8] = {0.1f, 0.1f, 0.1f, 0.1f, 0.01f, 0.01f, 0.01f, 0.01f};
  uint8_t data[8];
  float scales[2];
  quantize_compensated(x, Dtype::kF32, 8, format, 0.5f, error, data, scales);
  EXPECT_TRUE(std::isnan(scales[0]));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(bits_of(error[i]), 0u) << i;
  EXPECT_FALSE(std::isnan(scales[1]));
  for (int i = 4; i < 8; ++i) {
    EXPECT_TRUE(std::isfinite(error[i]));
    EXPECT_LE(std::fabs(error[i]), 0.01f) << i;  // a mix of 0.01 and a loss below half a step (1.01 / 254)
  }
}

TEST(ZeroppErrorFeedback, RejectsBetaOutsideZeroToOne) {
  float x = 1, e = 0, s = 0;
  uint8_t q = 0;
  for (const float beta : {-0.1f, 1.0f, std::numeric_limits<float>::quiet_NaN()}) {
    EXPECT_EQ(code_of([&] { quantize_compensated(&x, Dtype::kF32, 1, {}, beta, &e, &q, &s); }),
              ZHOST_ERR_INVALID_ARGUMENT)
        << beta;
  }
  EXPECT_EQ(code_of([&] { quantize_compensated(&x, Dtype::kF32, 1, {}, 0.5f, nullptr, &q, &s); }),
            ZHOST_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace zhost::zeropp
