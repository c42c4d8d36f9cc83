// sdk/kit/zeropp_quant/quant_nibbles.hpp: internal to the AVX2 and AVX-512 quantization paths (SSE4.1 and
// up): packing int8 values into int4 pairs, even element in the low nibble (docs/zeropp.md), and back.
// Internal linkage, as in sdk/kit/simd/ops_scalar.hpp.
#pragma once

#include <immintrin.h>

namespace zhost::zeropp::detail {
namespace {

// 16 int8 values in [-8, 7] (one per byte) -> 8 bytes of int4 pairs, in the low half of the result.
inline __m128i pack_nibbles(__m128i bytes) {
  const __m128i low = _mm_and_si128(bytes, _mm_set1_epi16(0x000F));
  const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi16(0x00F0));
  return _mm_packus_epi16(_mm_or_si128(low, high), _mm_setzero_si128());
}

// 8 bytes of int4 pairs (the low half of `packed`) -> 16 sign-extended int8 values.
inline __m128i unpack_nibbles(__m128i packed) {
  const __m128i words = _mm_cvtepu8_epi16(packed);
  const __m128i low = _mm_and_si128(words, _mm_set1_epi16(0x000F));
  const __m128i high = _mm_and_si128(_mm_slli_epi16(words, 4), _mm_set1_epi16(0x0F00));
  return _mm_sub_epi8(_mm_xor_si128(_mm_or_si128(low, high), _mm_set1_epi8(8)), _mm_set1_epi8(8));
}

}  // namespace
}  // namespace zhost::zeropp::detail
