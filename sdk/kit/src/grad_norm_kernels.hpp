// sdk/kit/src/grad_norm_kernels.hpp: internal to zhost_kit. The two passes of Note [Exact gradient norm]
// (zhost/kit/grad_numerics.hpp) over fp32 runs, written once as loops the compiler vectorizes, and compiled
// once per ISA (grad_norm_{scalar,avx2,avx512}.cpp, the ISAs of zhost/kit/cpu_isa.hpp) behind a table.
//
// Every path gives the same result, bit for bit, because nothing in it rounds:
//   - max_abs_bits: the largest bit pattern of |x| (an unsigned max, in any order);
//   - square_sum: each element's floor(x^2 * scale) (an integer below 2^80, Note [Exact gradient norm]) as
//     two fp64 integers below 2^40, high = floor(v / 2^40) and low = floor(v - high * 2^40): every step is
//     exact (x^2 of an fp32 fits fp64's 53 bits; scale, 2^40 and 2^-40 are powers of two; v - high * 2^40
//     is the low bits of v), so the lanes may add them in any order. A block of at most 4096 elements keeps
//     each lane sum below 2^52, exact in fp64, before it joins the 128-bit total.
// Internal linkage, as the ZeRO++ kernels: each ISA file compiles its own copy with its own flags.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace zhost::kit::detail {

__extension__ typedef unsigned __int128 Uint128;  // GCC and Clang's 128-bit integer

struct NormKernels {
  uint32_t (*max_abs_bits)(const float* x, int64_t n);             // max of (bits of x[i]) & 0x7FFFFFFF; 0 for n = 0
  Uint128 (*square_sum)(const float* x, int64_t n, double scale);  // sum of floor(x[i]^2 * scale)
};

// One per ISA file; the x86 ones exist only in x86-64 builds (ZHOST_CPU_OPTIM_X86).
NormKernels scalar_norm_kernels();
NormKernels avx2_norm_kernels();
NormKernels avx512_norm_kernels();

namespace {

inline uint32_t max_abs_bits_loop(const float* x, int64_t n) {
  uint32_t largest = 0;
#pragma omp simd reduction(max : largest)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof(bits));
    bits &= 0x7FFFFFFFu;
    largest = bits > largest ? bits : largest;
  }
  return largest;
}

inline Uint128 square_sum_loop(const float* x, int64_t n, double scale) {
  constexpr int64_t kBlock = 4096;  // lane sums stay below 4096 * 2^40 = 2^52
  constexpr double kTwoTo40 = 1099511627776.0, kTwoToMinus40 = 1.0 / kTwoTo40;
  Uint128 total = 0;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = std::min(n, begin + kBlock);
    double high_sum = 0, low_sum = 0;
#pragma omp simd reduction(+ : high_sum, low_sum)
    for (int64_t i = begin; i < end; ++i) {
      const double v = static_cast<double>(x[i]) * static_cast<double>(x[i]) * scale;  // < 2^80, exact
      const double high = std::floor(v * kTwoToMinus40);                               // < 2^40
      high_sum += high;
      low_sum += std::floor(v - high * kTwoTo40);  // v - high * 2^40 is exact, in [0, 2^40)
    }
    total += (static_cast<Uint128>(static_cast<uint64_t>(high_sum)) << 40) + static_cast<uint64_t>(low_sum);
  }
  return total;
}

inline NormKernels norm_kernel_table() { return NormKernels{max_abs_bits_loop, square_sum_loop}; }

}  // namespace
}  // namespace zhost::kit::detail
