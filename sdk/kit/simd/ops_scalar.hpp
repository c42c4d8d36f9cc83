// sdk/kit/simd/ops_scalar.hpp: internal to the kit's CPU kernels (the fused optimizer, the ZeRO++
// quantizer). The element types they read and write (fp32, bf16, fp16), bit-exact scalar conversions
// between them, and ScalarOps, the one-lane "Ops": the scalar paths and the AVX2 tails use it. The SIMD
// Ops (ops_avx2.hpp, ops_avx512.hpp) match these conversions bit for bit.
//
// An Ops struct gives a lane type F with + - * / sqrt_of sign_of, splat, loads and stores of fp32 lanes,
// and load_elems<E>/store_elems<E> of any element type, for all lanes of a block (All) or, where
// kMaskedTail, the first lanes of one (Tail).
//
// Everything here has internal linkage (anonymous namespace) on purpose: each ISA file compiles its own
// copy with its own instruction set, and the linker must never merge an AVX-512 copy into the scalar path.
// For the same reason these headers use builtins, not <cmath>'s inline functions.
#pragma once

#include <cstdint>
#include <cstring>

namespace zhost::simd {

enum class Elem { kF32, kBf16, kF16 };  // an element type in memory

namespace {

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

inline float float_from_bf16(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

// Round to nearest even; a NaN stays a NaN with its sign and top payload bits, made quiet.
inline uint16_t bf16_from_float(float x) {
  const uint32_t u = bits_of(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// Exact, as F16C's VCVTPH2PS (a signaling NaN comes out quiet).
inline float float_from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) {  // inf, NaN
    return float_of(sign | 0x7F800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u));
  }
  if (exponent == 0) return float_of(sign | bits_of(static_cast<float>(mantissa) * 0x1p-24f));
  return float_of(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

// Round to nearest even, as F16C's VCVTPS2PH with imm8 0: overflow goes to inf, fp16 subnormals are
// kept; a NaN stays a NaN with its sign and top payload bits, made quiet.
inline uint16_t f16_from_float(float x) {
  const uint32_t u = bits_of(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t magnitude = u & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  if (magnitude >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: inf
  if (magnitude >= 0x38800000u) {                                              // >= 2^-14: normal
    const uint32_t rounded = magnitude + 0xFFFu + ((magnitude >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded >> 13) - ((127u - 15u) << 10)));
  }
  // fp16 subnormal or zero: the value in units of 2^-24, rounded to an integer.
  const uint32_t exponent = magnitude >> 23;
  if (exponent < 102) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to zero
  const uint32_t mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - exponent;  // 14 .. 24
  uint32_t units = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (units & 1u))) ++units;
  return static_cast<uint16_t>(sign | units);
}

// ---- The lane operations of a plain float ----

inline float sqrt_of(float x) { return __builtin_sqrtf(x); }
// torch.sign: 1, -1, or 0 for zeros and NaN.
inline float sign_of(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }

// One lane at a time: the scalar path, and the tails of SIMD paths without masked loads.
struct ScalarOps {
  using F = float;
  static constexpr int64_t kWidth = 1;
  static constexpr bool kMaskedTail = false;
  struct All {};  // every lane of a block (here the only one)

  static float splat(float x) { return x; }
  static float load(const float* src, All) { return *src; }
  static void store(float* dst, float x, All) { *dst = x; }

  // Element i of src (of type E), exactly as an fp32.
  template <Elem E>
  static float load_elems(const void* src, int64_t i, All) {
    if constexpr (E == Elem::kF32) {
      return static_cast<const float*>(src)[i];
    } else if constexpr (E == Elem::kBf16) {
      return float_from_bf16(static_cast<const uint16_t*>(src)[i]);
    } else {
      return float_from_f16(static_cast<const uint16_t*>(src)[i]);
    }
  }

  // Element i of dst (of type E) = x, rounded to nearest even.
  template <Elem E>
  static void store_elems(void* dst, int64_t i, float x, All) {
    if constexpr (E == Elem::kF32) static_cast<float*>(dst)[i] = x;
    if constexpr (E == Elem::kBf16) static_cast<uint16_t*>(dst)[i] = bf16_from_float(x);
    if constexpr (E == Elem::kF16) static_cast<uint16_t*>(dst)[i] = f16_from_float(x);
  }
};

}  // namespace
}  // namespace zhost::simd
