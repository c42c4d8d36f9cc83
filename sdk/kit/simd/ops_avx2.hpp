// sdk/kit/simd/ops_avx2.hpp: internal to the kit's CPU kernels. Avx2Ops: 8 fp32 lanes, F16C for fp16,
// no masked tail (tails go to ScalarOps), bit for bit the conversions of ops_scalar.hpp. Include only from
// files compiled with -mavx2 -mfma -mf16c, called only when the CPU has them (internal linkage: see
// ops_scalar.hpp).
#pragma once

#include <immintrin.h>

#include "ops_scalar.hpp"

namespace zhost::simd {
namespace {

struct F32x8 {
  __m256 v;
};

inline F32x8 operator+(F32x8 a, F32x8 b) { return {_mm256_add_ps(a.v, b.v)}; }
inline F32x8 operator-(F32x8 a, F32x8 b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline F32x8 operator*(F32x8 a, F32x8 b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline F32x8 operator/(F32x8 a, F32x8 b) { return {_mm256_div_ps(a.v, b.v)}; }
inline F32x8 sqrt_of(F32x8 a) { return {_mm256_sqrt_ps(a.v)}; }
inline F32x8 sign_of(F32x8 a) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 positive = _mm256_and_ps(_mm256_cmp_ps(a.v, zero, _CMP_GT_OQ), _mm256_set1_ps(1.0f));
  const __m256 negative = _mm256_and_ps(_mm256_cmp_ps(a.v, zero, _CMP_LT_OQ), _mm256_set1_ps(-1.0f));
  return {_mm256_or_ps(positive, negative)};
}

// bf16_from_float on 8 lanes: round to nearest even, NaN made quiet.
inline __m128i bf16_from_floats(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i high = _mm256_srli_epi32(u, 16);
  const __m256i bias = _mm256_add_epi32(_mm256_and_si256(high, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7FFF));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
  const __m256i quiet_nan = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  const __m256i halves = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
  return _mm_packus_epi32(_mm256_castsi256_si128(halves), _mm256_extracti128_si256(halves, 1));
}

struct Avx2Ops {
  using F = F32x8;
  static constexpr int64_t kWidth = 8;
  static constexpr bool kMaskedTail = false;  // the tail goes to ScalarOps
  struct All {};

  static F splat(float x) { return {_mm256_set1_ps(x)}; }
  static F load(const float* src, All) { return {_mm256_loadu_ps(src)}; }
  static void store(float* dst, F x, All) { _mm256_storeu_ps(dst, x.v); }

  template <Elem E>
  static F load_elems(const void* src, int64_t i, All) {
    if constexpr (E == Elem::kF32) {
      return load(static_cast<const float*>(src) + i, All{});
    } else {
      const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(src) + i));
      if constexpr (E == Elem::kBf16) {
        return {_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16))};
      } else {
        return {_mm256_cvtph_ps(halves)};
      }
    }
  }

  template <Elem E>
  static void store_elems(void* dst, int64_t i, F x, All) {
    if constexpr (E == Elem::kF32) {
      store(static_cast<float*>(dst) + i, x, All{});
    } else {
      __m128i* halves = reinterpret_cast<__m128i*>(static_cast<uint16_t*>(dst) + i);
      if constexpr (E == Elem::kBf16) _mm_storeu_si128(halves, bf16_from_floats(x.v));
      if constexpr (E == Elem::kF16) _mm_storeu_si128(halves, _mm256_cvtps_ph(x.v, _MM_FROUND_TO_NEAREST_INT));
    }
  }
};

}  // namespace
}  // namespace zhost::simd
