// sdk/kit/zeropp_quant/quant_avx512.cpp: the AVX-512 path of the ZeRO++ quantization kernels: 16 lanes,
// masked loads and stores for the tails. Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma;
// called only when the CPU has them.
#include "../simd/ops_avx512.hpp"
#include "quant_kernels.hpp"
#include "quant_nibbles.hpp"

namespace zhost::zeropp::detail {
namespace {

struct Avx512QuantOps : simd::Avx512Ops {
  using U = __m512i;
  static U zero_u() { return _mm512_setzero_si512(); }
  template <class Lanes>
  static U abs_max(U acc, F x, Lanes) {  // tail lanes were loaded as zeros
    return _mm512_max_epu32(acc, _mm512_and_si512(_mm512_castps_si512(x.v), _mm512_set1_epi32(0x7FFFFFFF)));
  }
  static uint32_t reduce_max(U acc) {  // not _mm512_reduce_max_epu32: GCC 12 warns inside it (bug 105593)
    alignas(64) uint32_t lanes[16];
    _mm512_store_si512(lanes, acc);
    uint32_t largest = 0;
    for (const uint32_t lane : lanes) largest = std::max(largest, lane);
    return largest;
  }

  // Bytes a store or load of these lanes touches.
  static __mmask16 byte_mask(Bits bits, Tail lanes) {
    const int count = __builtin_popcount(lanes);
    return static_cast<__mmask16>((1u << (bits == Bits::kInt8 ? count : (count + 1) / 2)) - 1u);
  }

  template <Bits B, class Lanes>
  static void store_q(uint8_t* data, int64_t i, F t, Lanes lanes) {
    const __m512 q_max = _mm512_set1_ps(q_max_of(B));
    const __m512 clamped = _mm512_min_ps(_mm512_max_ps(t.v, _mm512_sub_ps(_mm512_setzero_ps(), q_max)), q_max);
    const __m128i bytes =
        _mm512_cvtepi32_epi8(_mm512_cvt_roundps_epi32(clamped, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m128i out = B == Bits::kInt8 ? bytes : pack_nibbles(bytes);
    uint8_t* dst = B == Bits::kInt8 ? data + i : data + i / 2;
    if constexpr (std::is_same_v<Lanes, All>) {
      if constexpr (B == Bits::kInt8) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), out);
      } else {
        _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), out);
      }
    } else {
      _mm_mask_storeu_epi8(dst, byte_mask(B, lanes), out);
    }
  }

  template <Bits B, class Lanes>
  static F load_q(const uint8_t* data, int64_t i, Lanes lanes) {
    const uint8_t* src = B == Bits::kInt8 ? data + i : data + i / 2;
    __m128i raw;
    if constexpr (std::is_same_v<Lanes, All>) {
      raw = B == Bits::kInt8 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(src))
                             : _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src));
    } else {
      raw = _mm_maskz_loadu_epi8(byte_mask(B, lanes), src);
    }
    const __m128i bytes = B == Bits::kInt8 ? raw : unpack_nibbles(raw);
    return {_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes))};
  }
};

}  // namespace

KernelTable avx512_kernels() { return kernel_table<Avx512QuantOps>(); }

}  // namespace zhost::zeropp::detail
