// sdk/kit/zeropp_quant/quant_avx2.cpp: the AVX2 path of the ZeRO++ quantization kernels: 8 lanes, tails one
// element at a time (ScalarQuantOps). Compiled with -mavx2 -mfma -mf16c; called only when the CPU has them.
#include <cstring>

#include "../simd/ops_avx2.hpp"
#include "quant_kernels.hpp"
#include "quant_nibbles.hpp"

namespace zhost::zeropp::detail {
namespace {

struct Avx2QuantOps : simd::Avx2Ops {
  using U = __m256i;
  static U zero_u() { return _mm256_setzero_si256(); }
  static U abs_max(U acc, F x, All) {
    return _mm256_max_epu32(acc, _mm256_and_si256(_mm256_castps_si256(x.v), _mm256_set1_epi32(0x7FFFFFFF)));
  }
  static uint32_t reduce_max(U acc) {
    const __m128i half = _mm_max_epu32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    const __m128i quarter = _mm_max_epu32(half, _mm_shuffle_epi32(half, _MM_SHUFFLE(1, 0, 3, 2)));
    return static_cast<uint32_t>(
        _mm_cvtsi128_si32(_mm_max_epu32(quarter, _mm_shuffle_epi32(quarter, _MM_SHUFFLE(2, 3, 0, 1)))));
  }

  template <Bits B>
  static void store_q(uint8_t* data, int64_t i, F t, All) {
    const __m256 q_max = _mm256_set1_ps(q_max_of(B));
    const __m256 clamped = _mm256_min_ps(_mm256_max_ps(t.v, _mm256_sub_ps(_mm256_setzero_ps(), q_max)), q_max);
    const __m256i q = _mm256_cvtps_epi32(_mm256_round_ps(clamped, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    const __m128i bytes = _mm_packs_epi16(words, words);  // 8 int8 values in the low 8 bytes
    if constexpr (B == Bits::kInt8) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(data + i), bytes);
    } else {
      const int packed = _mm_cvtsi128_si32(pack_nibbles(bytes));  // 4 bytes of pairs
      std::memcpy(data + i / 2, &packed, 4);
    }
  }

  template <Bits B>
  static F load_q(const uint8_t* data, int64_t i, All) {
    __m128i bytes;
    if constexpr (B == Bits::kInt8) {
      bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(data + i));
    } else {
      int packed;
      std::memcpy(&packed, data + i / 2, 4);
      bytes = unpack_nibbles(_mm_cvtsi32_si128(packed));  // 8 values in the low half
    }
    return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes))};
  }
};

}  // namespace

KernelTable avx2_kernels() { return kernel_table<Avx2QuantOps>(); }

}  // namespace zhost::zeropp::detail
