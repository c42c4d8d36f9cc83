// tests/support/half_reference.hpp: the tests' own bf16 and fp16 conversions, by value (exact decoding,
// round to nearest even from the value and its neighbours), independent of the kit's bit-level conversions
// (sdk/kit/simd/ops_scalar.hpp) that they check.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace zhost::testing {

inline uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

inline float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

inline double decode_bf16(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

// Exact value of an fp16 pattern (inf and NaN: not needed).
inline double decode_f16(uint16_t h) {
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  const double magnitude = exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

// For rounding: as decode_bf16, but the inf pattern reads as 2^128, the next value if the exponent went
// on, which is what rounding near the top of the range needs.
inline double decode_bf16_extended(uint16_t h) {
  return (h & 0x7FFF) == 0x7F80 ? std::ldexp(1.0, 128) : decode_bf16(h);
}

// Round to nearest even, by value: of the two bf16 values around |x| (the truncated pattern and the
// next), the nearer, on a tie the even one; the midpoint of two neighbours is exact in double. NaN:
// quiet NaN with the sign and the top payload bits.
inline uint16_t round_to_bf16(float x) {
  const uint32_t u = bits_of(x);
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x40);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint16_t low = static_cast<uint16_t>((u & 0x7FFFFFFF) >> 16);  // largest magnitude <= |x|
  const double magnitude = std::fabs(static_cast<double>(x));
  if (std::isinf(x) || decode_bf16(low) == magnitude) return sign | low;
  const uint16_t high = static_cast<uint16_t>(low + 1);
  const double mid = (decode_bf16(low) + decode_bf16_extended(high)) / 2;
  if (magnitude < mid) return sign | low;
  if (magnitude > mid) return sign | high;
  return sign | ((low & 1) ? high : low);
}

// Round to nearest even; NaN: quiet NaN with the sign and the top payload bits (as VCVTPS2PH makes
// them). By value, not by bits: the multiple of the fp16 spacing around |x| nearest to |x|, ties to even
// by nearbyint (the default rounding mode), then encoded.
inline uint16_t round_to_f16(float x) {
  const uint32_t u = bits_of(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  if (std::isnan(x)) return static_cast<uint16_t>(sign | 0x7E00 | ((u >> 13) & 0x3FF));
  static const std::vector<double> powers_of_two = [] {  // 2^k for k in [-24, 15], indexed k + 24
    std::vector<double> powers;
    for (int k = -24; k <= 15; ++k) powers.push_back(std::ldexp(1.0, k));
    return powers;
  }();
  const double magnitude = std::fabs(static_cast<double>(x));
  if (magnitude >= 65536) return sign | 0x7C00;
  // The fp16 values in [2^e, 2^(e+1)) are spaced 2^(e-10); below 2^-14 (subnormals) 2^-24.
  const int e = std::max(static_cast<int>((u >> 23) & 0xFF) - 127, -14);
  const int spacing = e - 10;
  const double units = std::nearbyint(magnitude / powers_of_two[static_cast<size_t>(spacing + 24)]);
  if (units * powers_of_two[static_cast<size_t>(spacing + 24)] >= 65536) return sign | 0x7C00;
  // Pattern: exponent field (spacing + 25) and mantissa units - 1024; units = 2048 (rounded up to the
  // next power of two) carries into the exponent, and for subnormals (spacing -24) it reads as units.
  return static_cast<uint16_t>(sign | (((spacing + 25) << 10) + static_cast<int>(units) - 1024));
}

}  // namespace zhost::testing
