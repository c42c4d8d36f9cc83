// sdk/kit/src/grad_norm_loops.hpp: internal to zhost_kit, included only by grad_norm_{scalar,avx2,avx512}.cpp
// (compiled with -fopenmp-simd): the loops behind the NormKernels table, whose arithmetic
// grad_norm_kernels.hpp explains.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "grad_norm_kernels.hpp"

namespace zhost::kit::detail {
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
