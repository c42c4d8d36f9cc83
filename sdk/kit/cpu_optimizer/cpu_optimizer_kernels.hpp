// sdk/kit/cpu_optimizer/cpu_optimizer_kernels.hpp: internal to zhost_cpu_optimizer. The per-element math
// of Adam, Lion and SGD, written once as templates over a lane type (float, or an ISA file's SIMD wrapper),
// the loops that apply it over a range of elements, and the entry points each ISA file defines.
//
// An ISA file (cpu_optimizer_{scalar,avx2,avx512}.cpp, each compiled with its own -m flags) supplies an
// "Ops" struct: its lane type F with + - * / sqrt_of sign_of, and the loads and stores of fp32, bf16 and
// fp16 lanes. ScalarOps below is the one-lane Ops: the scalar path and the AVX2 tails use it.
//
// Everything templated or inline here has internal linkage (anonymous namespace) on purpose: each ISA
// file compiles its own copy with its own instruction set, and the linker must never merge an AVX-512
// copy into the scalar path. For the same reason this header uses builtins, not <cmath>'s inline
// functions.
#pragma once

#include <cstdint>
#include <cstring>

#include "zhost/kit/cpu_optimizer.hpp"

namespace zhost::cpu_optim::detail {

// Per-call constants: computed in double by cpu_optimizer.cpp, rounded once to fp32.
struct AdamConsts {
  float grad_scale = 1;    // g *= grad_scale first (the multiply is exact when it is 1)
  float decay = 1;         // AdamW: 1 - lr*wd; else 1
  bool l2 = false;         // Adam with wd != 0: g += weight_decay * p
  float weight_decay = 0;  // used when l2
  float beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0;
  float inv_sqrt_bc2 = 1;  // 1 / sqrt(bc2)
  float eps = 0;
  float step_size = 0;  // -lr / bc1
};

struct LionConsts {
  float grad_scale = 1;
  float decay = 1;  // 1 - lr*wd
  float lr = 0;
  float beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0;
};

struct SgdConsts {
  float grad_scale = 1;
  bool l2 = false;  // weight_decay != 0: g += weight_decay * p
  float weight_decay = 0;
  bool momentum = false;  // momentum != 0: buf = momentum*buf + g, and buf is the direction
  float momentum_factor = 0;
  float step_size = 0;  // -lr
};

// The buffers of one call; exp_avg_sq is unused by Lion, and SGD keeps its momentum buffer in exp_avg.
struct Buffers {
  float* param = nullptr;
  const void* grad = nullptr;
  GradType grad_type = GradType::kF32;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  void* copy16 = nullptr;
  Copy16 copy16_type = Copy16::kNone;
};

// Steps elements [begin, end) of the buffers.
using AdamRangeFn = void (*)(const AdamConsts&, const Buffers&, int64_t begin, int64_t end);
using LionRangeFn = void (*)(const LionConsts&, const Buffers&, int64_t begin, int64_t end);
using SgdRangeFn = void (*)(const SgdConsts&, const Buffers&, int64_t begin, int64_t end);

struct KernelTable {
  AdamRangeFn adam;
  LionRangeFn lion;
  SgdRangeFn sgd;
};

// One per ISA file; the x86 ones exist only in x86-64 builds (ZHOST_CPU_OPTIM_X86).
KernelTable scalar_kernels();
KernelTable avx2_kernels();
KernelTable avx512_kernels();

namespace {

// ---- Bit-exact scalar conversions (scalar path, AVX2 tails; the SIMD paths match them bit for bit) ----

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

  template <GradType G>
  static float load_grad(const void* grad, int64_t i, All) {
    if constexpr (G == GradType::kF32) {
      return static_cast<const float*>(grad)[i];
    } else if constexpr (G == GradType::kBf16) {
      return float_from_bf16(static_cast<const uint16_t*>(grad)[i]);
    } else {
      return float_from_f16(static_cast<const uint16_t*>(grad)[i]);
    }
  }

  template <Copy16 C>
  static void store_copy(void* copy, int64_t i, float x, All) {
    if constexpr (C == Copy16::kBf16) static_cast<uint16_t*>(copy)[i] = bf16_from_float(x);
    if constexpr (C == Copy16::kF16) static_cast<uint16_t*>(copy)[i] = f16_from_float(x);
  }
};

// ---- The per-element updates, for any lane type F ----

template <class F>
struct AdamLanes {
  F grad_scale, decay, weight_decay, beta1, one_minus_beta1, beta2, one_minus_beta2, inv_sqrt_bc2, eps, step_size;
};

template <class Ops>
AdamLanes<typename Ops::F> splat(const AdamConsts& c) {
  return {Ops::splat(c.grad_scale),      Ops::splat(c.decay),           Ops::splat(c.weight_decay),
          Ops::splat(c.beta1),           Ops::splat(c.one_minus_beta1), Ops::splat(c.beta2),
          Ops::splat(c.one_minus_beta2), Ops::splat(c.inv_sqrt_bc2),    Ops::splat(c.eps),
          Ops::splat(c.step_size)};
}

// The kit's Adam (Note [One optimizer arithmetic]), in fp32 and in this order of operations on every path;
// sqrt(v)/sqrt(bc2) is taken as sqrt(v) * (1/sqrt(bc2)), as DeepSpeed's CPU Adam does (one division per element, not
// two).
template <bool kL2, class F>
inline void adam_update(const AdamLanes<F>& k, F& p, F g, F& m, F& v) {
  g = g * k.grad_scale;
  if constexpr (kL2) {
    g = g + k.weight_decay * p;
  } else {
    p = p * k.decay;
  }
  m = k.beta1 * m + k.one_minus_beta1 * g;
  v = k.beta2 * v + k.one_minus_beta2 * (g * g);
  const F denom = sqrt_of(v) * k.inv_sqrt_bc2 + k.eps;
  p = p + k.step_size * (m / denom);
}

template <class F>
struct LionLanes {
  F grad_scale, decay, lr, beta1, one_minus_beta1, beta2, one_minus_beta2;
};

template <class Ops>
LionLanes<typename Ops::F> splat(const LionConsts& c) {
  return {Ops::splat(c.grad_scale),     Ops::splat(c.decay),           Ops::splat(c.lr),
          Ops::splat(c.beta1),          Ops::splat(c.one_minus_beta1), Ops::splat(c.beta2),
          Ops::splat(c.one_minus_beta2)};
}

// The kit's Lion.
template <class F>
inline void lion_update(const LionLanes<F>& k, F& p, F g, F& m) {
  g = g * k.grad_scale;
  p = p * k.decay;
  p = p - k.lr * sign_of(k.beta1 * m + k.one_minus_beta1 * g);
  m = k.beta2 * m + k.one_minus_beta2 * g;
}

template <class F>
struct SgdLanes {
  F grad_scale, weight_decay, momentum_factor, step_size;
};

template <class Ops>
SgdLanes<typename Ops::F> splat(const SgdConsts& c) {
  return {Ops::splat(c.grad_scale), Ops::splat(c.weight_decay), Ops::splat(c.momentum_factor), Ops::splat(c.step_size)};
}

// The kit's SGD (torch.optim.SGD, dampening 0, no Nesterov): the buffer starts at zero, so its first
// update gives exactly the direction, as torch's "buf = d" does.
template <bool kL2, bool kMomentum, class F>
inline void sgd_update(const SgdLanes<F>& k, F& p, F g, F& buf) {
  g = g * k.grad_scale;
  if constexpr (kL2) g = g + k.weight_decay * p;
  if constexpr (kMomentum) {
    buf = k.momentum_factor * buf + g;
    g = buf;
  }
  p = p + k.step_size * g;
}

// ---- Blocks of Ops::kWidth elements (or a masked tail), and ranges ----

template <class Ops, GradType G, Copy16 C, bool kL2, class Lanes>
inline void adam_block(const AdamLanes<typename Ops::F>& k, const Buffers& b, int64_t i, Lanes lanes) {
  using F = typename Ops::F;
  F p = Ops::load(b.param + i, lanes);
  F m = Ops::load(b.exp_avg + i, lanes);
  F v = Ops::load(b.exp_avg_sq + i, lanes);
  adam_update<kL2>(k, p, Ops::template load_grad<G>(b.grad, i, lanes), m, v);
  Ops::store(b.param + i, p, lanes);
  Ops::store(b.exp_avg + i, m, lanes);
  Ops::store(b.exp_avg_sq + i, v, lanes);
  Ops::template store_copy<C>(b.copy16, i, p, lanes);
}

template <class Ops, GradType G, Copy16 C, class Lanes>
inline void lion_block(const LionLanes<typename Ops::F>& k, const Buffers& b, int64_t i, Lanes lanes) {
  using F = typename Ops::F;
  F p = Ops::load(b.param + i, lanes);
  F m = Ops::load(b.exp_avg + i, lanes);
  lion_update(k, p, Ops::template load_grad<G>(b.grad, i, lanes), m);
  Ops::store(b.param + i, p, lanes);
  Ops::store(b.exp_avg + i, m, lanes);
  Ops::template store_copy<C>(b.copy16, i, p, lanes);
}

template <class Ops, GradType G, Copy16 C, bool kL2, bool kMomentum, class Lanes>
inline void sgd_block(const SgdLanes<typename Ops::F>& k, const Buffers& b, int64_t i, Lanes lanes) {
  using F = typename Ops::F;
  F p = Ops::load(b.param + i, lanes);
  F buf = kMomentum ? Ops::load(b.exp_avg + i, lanes) : Ops::splat(0.0f);
  sgd_update<kL2, kMomentum>(k, p, Ops::template load_grad<G>(b.grad, i, lanes), buf);
  Ops::store(b.param + i, p, lanes);
  if constexpr (kMomentum) Ops::store(b.exp_avg + i, buf, lanes);
  Ops::template store_copy<C>(b.copy16, i, p, lanes);
}

template <class Ops, GradType G, Copy16 C, bool kL2>
void adam_span(const AdamConsts& c, const Buffers& buffers, int64_t begin, int64_t end) {
  const Buffers b = buffers;  // a local copy: the stores cannot alias it, so its pointers stay in registers
  const AdamLanes<typename Ops::F> k = splat<Ops>(c);
  int64_t i = begin;
  for (; i + Ops::kWidth <= end; i += Ops::kWidth) {
    adam_block<Ops, G, C, kL2>(k, b, i, typename Ops::All{});
  }
  if (i == end) return;
  if constexpr (Ops::kMaskedTail) {
    adam_block<Ops, G, C, kL2>(k, b, i, Ops::tail_lanes(end - i));
  } else if constexpr (Ops::kWidth > 1) {
    adam_span<ScalarOps, G, C, kL2>(c, b, i, end);
  }
}

template <class Ops, GradType G, Copy16 C>
void lion_span(const LionConsts& c, const Buffers& buffers, int64_t begin, int64_t end) {
  const Buffers b = buffers;  // as in adam_span
  const LionLanes<typename Ops::F> k = splat<Ops>(c);
  int64_t i = begin;
  for (; i + Ops::kWidth <= end; i += Ops::kWidth) lion_block<Ops, G, C>(k, b, i, typename Ops::All{});
  if (i == end) return;
  if constexpr (Ops::kMaskedTail) {
    lion_block<Ops, G, C>(k, b, i, Ops::tail_lanes(end - i));
  } else if constexpr (Ops::kWidth > 1) {
    lion_span<ScalarOps, G, C>(c, b, i, end);
  }
}

template <class Ops, GradType G, Copy16 C, bool kL2, bool kMomentum>
void sgd_span(const SgdConsts& c, const Buffers& buffers, int64_t begin, int64_t end) {
  const Buffers b = buffers;  // as in adam_span
  const SgdLanes<typename Ops::F> k = splat<Ops>(c);
  int64_t i = begin;
  for (; i + Ops::kWidth <= end; i += Ops::kWidth) sgd_block<Ops, G, C, kL2, kMomentum>(k, b, i, typename Ops::All{});
  if (i == end) return;
  if constexpr (Ops::kMaskedTail) {
    sgd_block<Ops, G, C, kL2, kMomentum>(k, b, i, Ops::tail_lanes(end - i));
  } else if constexpr (Ops::kWidth > 1) {
    sgd_span<ScalarOps, G, C, kL2, kMomentum>(c, b, i, end);
  }
}

// ---- From the run-time gradient and copy types to a compiled span ----

struct AdamKernel {
  template <class Ops, GradType G, Copy16 C>
  static void run(const AdamConsts& c, const Buffers& b, int64_t begin, int64_t end) {
    if (c.l2) {
      adam_span<Ops, G, C, true>(c, b, begin, end);
    } else {
      adam_span<Ops, G, C, false>(c, b, begin, end);
    }
  }
};

struct LionKernel {
  template <class Ops, GradType G, Copy16 C>
  static void run(const LionConsts& c, const Buffers& b, int64_t begin, int64_t end) {
    lion_span<Ops, G, C>(c, b, begin, end);
  }
};

struct SgdKernel {
  template <class Ops, GradType G, Copy16 C>
  static void run(const SgdConsts& c, const Buffers& b, int64_t begin, int64_t end) {
    if (c.l2) {
      if (c.momentum) return sgd_span<Ops, G, C, true, true>(c, b, begin, end);
      return sgd_span<Ops, G, C, true, false>(c, b, begin, end);
    }
    if (c.momentum) return sgd_span<Ops, G, C, false, true>(c, b, begin, end);
    sgd_span<Ops, G, C, false, false>(c, b, begin, end);
  }
};

template <class Kernel, class Ops, GradType G, class Consts>
void dispatch_copy(const Consts& c, const Buffers& b, int64_t begin, int64_t end) {
  switch (b.copy16_type) {
    case Copy16::kNone:
      return Kernel::template run<Ops, G, Copy16::kNone>(c, b, begin, end);
    case Copy16::kBf16:
      return Kernel::template run<Ops, G, Copy16::kBf16>(c, b, begin, end);
    case Copy16::kF16:
      return Kernel::template run<Ops, G, Copy16::kF16>(c, b, begin, end);
  }
}

template <class Kernel, class Ops, class Consts>
void dispatch_types(const Consts& c, const Buffers& b, int64_t begin, int64_t end) {
  switch (b.grad_type) {
    case GradType::kF32:
      return dispatch_copy<Kernel, Ops, GradType::kF32>(c, b, begin, end);
    case GradType::kBf16:
      return dispatch_copy<Kernel, Ops, GradType::kBf16>(c, b, begin, end);
    case GradType::kF16:
      return dispatch_copy<Kernel, Ops, GradType::kF16>(c, b, begin, end);
  }
}

// The KernelTable of an ISA file whose lane operations are Ops.
template <class Ops>
KernelTable kernel_table() {
  return {&dispatch_types<AdamKernel, Ops, AdamConsts>, &dispatch_types<LionKernel, Ops, LionConsts>,
          &dispatch_types<SgdKernel, Ops, SgdConsts>};
}

}  // namespace
}  // namespace zhost::cpu_optim::detail
