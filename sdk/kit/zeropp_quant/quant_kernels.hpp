// sdk/kit/zeropp_quant/quant_kernels.hpp: internal to zhost_zeropp_quant. Note [Block quantization
// arithmetic] (zhost/kit/zeropp_quant.hpp) written once as templates over an ISA's "quant Ops", the
// per-block loops that apply it, and the kernel table each ISA file defines.
//
// A quant Ops extends a lane Ops of sdk/kit/simd/ with: U, a vector of uint32 lanes; abs_max(acc, x, lanes),
// the lane-wise max of acc and the bit pattern of |x|; reduce_max(acc); store_q<B>(data, i, t, lanes), which
// clamps t to [-Q, Q], rounds it half to even and stores it as int8 or packed int4 at element i; and
// load_q<B>(data, i, lanes), the stored integers as floats. An int4 element i lives in byte i / 2 (even i:
// low nibble); SIMD blocks start at even i, so a byte is never split between two stores. ScalarQuantOps
// below is the one-lane quant Ops: the scalar path and the AVX2 tails.
//
// Internal linkage throughout, as in sdk/kit/simd/ops_scalar.hpp: each ISA file compiles its own copy.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../simd/ops_scalar.hpp"
#include "zhost/kit/zeropp_quant.hpp"

namespace zhost::zeropp::detail {

// The kernels of one ISA over a whole buffer: [element type][bits] (index: int(Dtype), 0 int8 / 1 int4).
using QuantizeFn = void (*)(const void* src, int64_t n, int64_t block, uint8_t* data, float* scales);
using DequantizeFn = void (*)(const uint8_t* data, const float* scales, int64_t n, int64_t block, void* dst);
using AddFn = void (*)(const uint8_t* data, const float* scales, int64_t n, int64_t block, float* sum);

struct KernelTable {
  QuantizeFn quantize[3][2];
  DequantizeFn dequantize[3][2];
  AddFn add[2];
};

// One per ISA file; the x86 ones exist only in x86-64 builds (ZHOST_CPU_OPTIM_X86).
KernelTable scalar_kernels();
KernelTable avx2_kernels();
KernelTable avx512_kernels();

namespace {

constexpr float q_max_of(Bits bits) { return bits == Bits::kInt8 ? 127.0f : 7.0f; }

struct ScalarQuantOps : simd::ScalarOps {
  using U = uint32_t;
  static U zero_u() { return 0; }
  static U abs_max(U acc, float x, All) { return std::max(acc, simd::bits_of(x) & 0x7FFFFFFFu); }
  static uint32_t reduce_max(U acc) { return acc; }

  template <Bits B>
  static void store_q(uint8_t* data, int64_t i, float t, All) {
    const float q_max = q_max_of(B);
    const int q = static_cast<int>(__builtin_rintf(t < -q_max ? -q_max : (t > q_max ? q_max : t)));
    if constexpr (B == Bits::kInt8) {
      data[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
    } else if (i % 2 == 0) {
      data[i / 2] = static_cast<uint8_t>(q & 0xF);
    } else {
      data[i / 2] = static_cast<uint8_t>(data[i / 2] | ((q & 0xF) << 4));
    }
  }

  template <Bits B>
  static float load_q(const uint8_t* data, int64_t i, All) {
    if constexpr (B == Bits::kInt8) {
      return static_cast<float>(static_cast<int8_t>(data[i]));
    } else {
      const int nibble = (i % 2 == 0) ? (data[i / 2] & 0xF) : (data[i / 2] >> 4);
      return static_cast<float>((nibble ^ 8) - 8);
    }
  }
};

// ---- Spans: SIMD blocks of Ops::kWidth lanes, then the tail (masked, or one lane at a time) ----

// body(i, lanes) over [begin, end); Tail is ScalarQuantOps for ISAs without masked tails.
template <class Ops, class Tail, class Body>
inline void for_lanes(int64_t begin, int64_t end, Body&& body) {
  int64_t i = begin;
  for (; i + Ops::kWidth <= end; i += Ops::kWidth) body(Ops{}, i, typename Ops::All{});
  if (i == end) return;
  if constexpr (Ops::kMaskedTail) {
    body(Ops{}, i, Ops::tail_lanes(end - i));
  } else {
    for (; i < end; ++i) body(Tail{}, i, typename Tail::All{});
  }
}

// The largest |x| bit pattern of elements [begin, end) of src.
template <class Ops, simd::Elem E>
uint32_t abs_max_bits(const void* src, int64_t begin, int64_t end) {
  typename Ops::U acc = Ops::zero_u();
  uint32_t tail = 0;
  for_lanes<Ops, ScalarQuantOps>(begin, end, [&](auto ops, int64_t i, auto lanes) {
    using O = decltype(ops);
    if constexpr (std::is_same_v<O, Ops>) {
      acc = Ops::abs_max(acc, Ops::template load_elems<E>(src, i, lanes), lanes);
    } else {
      tail = O::abs_max(tail, O::template load_elems<E>(src, i, lanes), lanes);
    }
  });
  return std::max(Ops::reduce_max(acc), tail);
}

// One block's scale and the factors its elements are multiplied by (Note [Block quantization arithmetic]).
struct BlockScale {
  float scale = 0;
  bool quantize = false;  // false: every q is 0
  float prescale = 1;
  float inverse = 0;
};

inline BlockScale block_scale(uint32_t abs_max_bits, Bits bits) {
  BlockScale s;
  if (abs_max_bits == 0) return s;
  if (abs_max_bits >= 0x7F800000u) {
    s.scale = simd::float_of(0x7FC00000u);  // inf or NaN in the block
    return s;
  }
  const float a = simd::float_of(abs_max_bits);
  s.scale = a / q_max_of(bits);
  s.quantize = true;
  s.prescale = a < 0x1p-64f ? 0x1p64f : 1.0f;
  s.inverse = q_max_of(bits) / (a * s.prescale);
  return s;
}

template <class Ops, simd::Elem E, Bits B>
void quantize_buffer(const void* src, int64_t n, int64_t block, uint8_t* data, float* scales) {
  for (int64_t begin = 0, b = 0; begin < n; begin += block, ++b) {
    const int64_t end = std::min(n, begin + block);
    const BlockScale s = block_scale(abs_max_bits<Ops, E>(src, begin, end), B);
    scales[b] = s.scale;
    if (!s.quantize) {
      for_lanes<Ops, ScalarQuantOps>(begin, end, [&](auto ops, int64_t i, auto lanes) {
        using O = decltype(ops);
        O::template store_q<B>(data, i, O::splat(0.0f), lanes);
      });
      continue;
    }
    for_lanes<Ops, ScalarQuantOps>(begin, end, [&](auto ops, int64_t i, auto lanes) {
      using O = decltype(ops);
      const auto x = O::template load_elems<E>(src, i, lanes);
      O::template store_q<B>(data, i, (x * O::splat(s.prescale)) * O::splat(s.inverse), lanes);
    });
  }
}

template <class Ops, simd::Elem E, Bits B>
void dequantize_buffer(const uint8_t* data, const float* scales, int64_t n, int64_t block, void* dst) {
  for (int64_t begin = 0, b = 0; begin < n; begin += block, ++b) {
    const float scale = scales[b];
    for_lanes<Ops, ScalarQuantOps>(begin, std::min(n, begin + block), [&](auto ops, int64_t i, auto lanes) {
      using O = decltype(ops);
      O::template store_elems<E>(dst, i, O::template load_q<B>(data, i, lanes) * O::splat(scale), lanes);
    });
  }
}

template <class Ops, Bits B>
void add_buffer(const uint8_t* data, const float* scales, int64_t n, int64_t block, float* sum) {
  for (int64_t begin = 0, b = 0; begin < n; begin += block, ++b) {
    const float scale = scales[b];
    for_lanes<Ops, ScalarQuantOps>(begin, std::min(n, begin + block), [&](auto ops, int64_t i, auto lanes) {
      using O = decltype(ops);
      const auto term = O::template load_q<B>(data, i, lanes) * O::splat(scale);
      O::store(sum + i, O::load(sum + i, lanes) + term, lanes);
    });
  }
}

// The KernelTable of an ISA file whose quant Ops is Ops.
template <class Ops>
KernelTable kernel_table() {
  using simd::Elem;
  return {{{&quantize_buffer<Ops, Elem::kF32, Bits::kInt8>, &quantize_buffer<Ops, Elem::kF32, Bits::kInt4>},
           {&quantize_buffer<Ops, Elem::kBf16, Bits::kInt8>, &quantize_buffer<Ops, Elem::kBf16, Bits::kInt4>},
           {&quantize_buffer<Ops, Elem::kF16, Bits::kInt8>, &quantize_buffer<Ops, Elem::kF16, Bits::kInt4>}},
          {{&dequantize_buffer<Ops, Elem::kF32, Bits::kInt8>, &dequantize_buffer<Ops, Elem::kF32, Bits::kInt4>},
           {&dequantize_buffer<Ops, Elem::kBf16, Bits::kInt8>, &dequantize_buffer<Ops, Elem::kBf16, Bits::kInt4>},
           {&dequantize_buffer<Ops, Elem::kF16, Bits::kInt8>, &dequantize_buffer<Ops, Elem::kF16, Bits::kInt4>}},
          {&add_buffer<Ops, Bits::kInt8>, &add_buffer<Ops, Bits::kInt4>}};
}

}  // namespace
}  // namespace zhost::zeropp::detail
