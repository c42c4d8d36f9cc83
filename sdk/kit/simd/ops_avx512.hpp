// sdk/kit/simd/ops_avx512.hpp: internal to the kit's CPU kernels. Avx512Ops: 16 fp32 lanes, masked loads
// and stores for the tail, bit for bit the conversions of ops_scalar.hpp. Include only from files compiled
// with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma, called only when the CPU has them (internal
// linkage: see ops_scalar.hpp).
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (`__m512i __Y = __Y;`), which
// -Wmaybe-uninitialized flags once inlined (GCC bug 105593, fixed in GCC 13): silenced for the header only.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "ops_scalar.hpp"

namespace zhost::simd {
namespace {

struct F32x16 {
  __m512 v;
};

inline F32x16 operator+(F32x16 a, F32x16 b) { return {_mm512_add_ps(a.v, b.v)}; }
inline F32x16 operator-(F32x16 a, F32x16 b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline F32x16 operator*(F32x16 a, F32x16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline F32x16 operator/(F32x16 a, F32x16 b) { return {_mm512_div_ps(a.v, b.v)}; }
inline F32x16 sqrt_of(F32x16 a) { return {_mm512_sqrt_ps(a.v)}; }
inline F32x16 sign_of(F32x16 a) {
  const __m512 zero = _mm512_setzero_ps();
  const __mmask16 positive = _mm512_cmp_ps_mask(a.v, zero, _CMP_GT_OQ);
  const __mmask16 negative = _mm512_cmp_ps_mask(a.v, zero, _CMP_LT_OQ);
  return {_mm512_mask_blend_ps(positive, _mm512_maskz_mov_ps(negative, _mm512_set1_ps(-1.0f)), _mm512_set1_ps(1.0f))};
}

// bf16_from_float on 16 lanes: round to nearest even, NaN made quiet.
inline __m256i bf16_from_floats(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i high = _mm512_srli_epi32(u, 16);
  const __m512i bias = _mm512_add_epi32(_mm512_and_si512(high, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7FFF));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __m512i halves = _mm512_mask_or_epi32(rounded, is_nan, high, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(halves);
}

struct Avx512Ops {
  using F = F32x16;
  static constexpr int64_t kWidth = 16;
  static constexpr bool kMaskedTail = true;
  struct All {};
  using Tail = __mmask16;  // the first `count` lanes of a block
  static Tail tail_lanes(int64_t count) { return static_cast<__mmask16>((1u << count) - 1u); }

  static F splat(float x) { return {_mm512_set1_ps(x)}; }
  static F load(const float* src, All) { return {_mm512_loadu_ps(src)}; }
  static F load(const float* src, Tail lanes) { return {_mm512_maskz_loadu_ps(lanes, src)}; }
  static void store(float* dst, F x, All) { _mm512_storeu_ps(dst, x.v); }
  static void store(float* dst, F x, Tail lanes) { _mm512_mask_storeu_ps(dst, lanes, x.v); }

  static __m256i load_halves(const uint16_t* src, All) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  }
  static __m256i load_halves(const uint16_t* src, Tail lanes) { return _mm256_maskz_loadu_epi16(lanes, src); }
  static void store_halves(uint16_t* dst, __m256i x, All) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), x); }
  static void store_halves(uint16_t* dst, __m256i x, Tail lanes) { _mm256_mask_storeu_epi16(dst, lanes, x); }

  template <Elem E, class Lanes>
  static F load_elems(const void* src, int64_t i, Lanes lanes) {
    if constexpr (E == Elem::kF32) {
      return load(static_cast<const float*>(src) + i, lanes);
    } else {
      const __m256i halves = load_halves(static_cast<const uint16_t*>(src) + i, lanes);
      if constexpr (E == Elem::kBf16) {
        return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16))};
      } else {
        return {_mm512_cvtph_ps(halves)};
      }
    }
  }

  template <Elem E, class Lanes>
  static void store_elems(void* dst, int64_t i, F x, Lanes lanes) {
    if constexpr (E == Elem::kF32) {
      store(static_cast<float*>(dst) + i, x, lanes);
    } else {
      uint16_t* halves = static_cast<uint16_t*>(dst) + i;
      if constexpr (E == Elem::kBf16) store_halves(halves, bf16_from_floats(x.v), lanes);
      if constexpr (E == Elem::kF16) store_halves(halves, _mm512_cvtps_ph(x.v, _MM_FROUND_TO_NEAREST_INT), lanes);
    }
  }
};

}  // namespace
}  // namespace zhost::simd
