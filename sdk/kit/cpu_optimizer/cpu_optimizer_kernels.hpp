// sdk/kit/cpu_optimizer/cpu_optimizer_kernels.hpp: internal to zhost_cpu_optimizer. The per-element math
// of Adam, Lion and SGD, written once as templates over a lane type (float, or an ISA file's SIMD wrapper),
// the loops that apply it over a range of elements, and the entry points each ISA file defines.
//
// An ISA file (cpu_optimizer_{scalar,avx2,avx512}.cpp, each compiled with its own -m flags) instantiates
// them with its "Ops" struct, shared with the kit's other CPU kernels (sdk/kit/simd/ops_*.hpp): a lane type
// F with + - * / sqrt_of sign_of, and the loads and stores of fp32, bf16 and fp16 lanes.
//
// Everything templated or inline here has internal linkage (anonymous namespace) on purpose: each ISA
// file compiles its own copy with its own instruction set, and the linker must never merge an AVX-512
// copy into the scalar path.
#pragma once

#include <cstdint>

#include "../simd/ops_scalar.hpp"
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

// The buffers of one call; exp_avg_sq is unused by Lion, and SGD keeps its momentum buffer in exp_avg. The
// parameter and the moments are fp32 but for Adam, whose param_type/state_type may be bf16 (Note [bf16 master
// weights]).
struct Buffers {
  void* param = nullptr;
  const void* grad = nullptr;
  GradType grad_type = GradType::kF32;
  void* exp_avg = nullptr;
  void* exp_avg_sq = nullptr;
  void* copy16 = nullptr;
  Copy16 copy16_type = Copy16::kNone;
  StateType param_type = StateType::kF32;
  StateType state_type = StateType::kF32;
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

using simd::ScalarOps;
using simd::sign_of;
using simd::sqrt_of;

constexpr simd::Elem elem_of(GradType type) {
  return type == GradType::kBf16 ? simd::Elem::kBf16 : (type == GradType::kF16 ? simd::Elem::kF16 : simd::Elem::kF32);
}

// x rounded to bf16 (nearest even) and widened back: through a bf16 block in memory, with the stores and loads
// every Ops already has (the same rounding as a bf16 store).
template <class Ops, class Lanes>
inline typename Ops::F round_to_bf16(typename Ops::F x, Lanes lanes) {
  alignas(64) uint16_t halves[Ops::kWidth > 1 ? Ops::kWidth : 1];
  Ops::template store_elems<simd::Elem::kBf16>(halves, 0, x, lanes);
  return Ops::template load_elems<simd::Elem::kBf16>(halves, 0, lanes);
}

// The gradient's element i, as an fp32.
template <class Ops, GradType G, class Lanes>
inline typename Ops::F load_grad(const void* grad, int64_t i, Lanes lanes) {
  if constexpr (G == GradType::kF32AsBf16) {
    return round_to_bf16<Ops>(Ops::template load_elems<simd::Elem::kF32>(grad, i, lanes), lanes);
  } else {
    return Ops::template load_elems<elem_of(G)>(grad, i, lanes);
  }
}

// Element i of a parameter or moment buffer of type T, as an fp32; and stored back (16-bit: nearest even).
template <class Ops, StateType T, class Lanes>
inline typename Ops::F load_state(const void* data, int64_t i, Lanes lanes) {
  if constexpr (T == StateType::kBf16) {
    return Ops::template load_elems<simd::Elem::kBf16>(data, i, lanes);
  } else if constexpr (T == StateType::kF16) {
    return Ops::template load_elems<simd::Elem::kF16>(data, i, lanes);
  } else {
    return Ops::load(static_cast<const float*>(data) + i, lanes);
  }
}
template <class Ops, StateType T, class Lanes>
inline void store_state(void* data, int64_t i, typename Ops::F x, Lanes lanes) {
  if constexpr (T == StateType::kBf16) {
    Ops::template store_elems<simd::Elem::kBf16>(data, i, x, lanes);
  } else if constexpr (T == StateType::kF16) {
    Ops::template store_elems<simd::Elem::kF16>(data, i, x, lanes);
  } else {
    Ops::store(static_cast<float*>(data) + i, x, lanes);
  }
}

// The 16-bit copy's element i = x rounded (nothing for Copy16::kNone).
template <class Ops, Copy16 C, class Lanes>
inline void store_copy(void* copy, int64_t i, typename Ops::F x, Lanes lanes) {
  if constexpr (C == Copy16::kBf16) Ops::template store_elems<simd::Elem::kBf16>(copy, i, x, lanes);
  if constexpr (C == Copy16::kF16) Ops::template store_elems<simd::Elem::kF16>(copy, i, x, lanes);
}

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

template <class Ops, GradType G, Copy16 C, bool kL2, StateType P, StateType S, class Lanes>
inline void adam_block(const AdamLanes<typename Ops::F>& k, const Buffers& b, int64_t i, Lanes lanes) {
  using F = typename Ops::F;
  F p = load_state<Ops, P>(b.param, i, lanes);
  F m = load_state<Ops, S>(b.exp_avg, i, lanes);
  F v = load_state<Ops, S>(b.exp_avg_sq, i, lanes);
  adam_update<kL2>(k, p, load_grad<Ops, G>(b.grad, i, lanes), m, v);
  store_state<Ops, P>(b.param, i, p, lanes);
  store_state<Ops, S>(b.exp_avg, i, m, lanes);
  store_state<Ops, S>(b.exp_avg_sq, i, v, lanes);
  store_copy<Ops, C>(b.copy16, i, p, lanes);
}

template <class Ops, GradType G, Copy16 C, class Lanes>
inline void lion_block(const LionLanes<typename Ops::F>& k, const Buffers& b, int64_t i, Lanes lanes) {
  using F = typename Ops::F;
  auto* const param = static_cast<float*>(b.param);
  auto* const exp_avg = static_cast<float*>(b.exp_avg);
  F p = Ops::load(param + i, lanes);
  F m = Ops::load(exp_avg + i, lanes);
  lion_update(k, p, load_grad<Ops, G>(b.grad, i, lanes), m);
  Ops::store(param + i, p, lanes);
  Ops::store(exp_avg + i, m, lanes);
  store_copy<Ops, C>(b.copy16, i, p, lanes);
}

template <class Ops, GradType G, Copy16 C, bool kL2, bool kMomentum, class Lanes>
inline void sgd_block(const SgdLanes<typename Ops::F>& k, const Buffers& b, int64_t i, Lanes lanes) {
  using F = typename Ops::F;
  auto* const param = static_cast<float*>(b.param);
  auto* const exp_avg = static_cast<float*>(b.exp_avg);
  F p = Ops::load(param + i, lanes);
  F buf = kMomentum ? Ops::load(exp_avg + i, lanes) : Ops::splat(0.0f);
  sgd_update<kL2, kMomentum>(k, p, load_grad<Ops, G>(b.grad, i, lanes), buf);
  Ops::store(param + i, p, lanes);
  if constexpr (kMomentum) Ops::store(exp_avg + i, buf, lanes);
  store_copy<Ops, C>(b.copy16, i, p, lanes);
}

template <class Ops, GradType G, Copy16 C, bool kL2, StateType P, StateType S>
void adam_span(const AdamConsts& c, const Buffers& buffers, int64_t begin, int64_t end) {
  const Buffers b = buffers;  // a local copy: the stores cannot alias it, so its pointers stay in registers
  const AdamLanes<typename Ops::F> k = splat<Ops>(c);
  int64_t i = begin;
  for (; i + Ops::kWidth <= end; i += Ops::kWidth) {
    adam_block<Ops, G, C, kL2, P, S>(k, b, i, typename Ops::All{});
  }
  if (i == end) return;
  if constexpr (Ops::kMaskedTail) {
    adam_block<Ops, G, C, kL2, P, S>(k, b, i, Ops::tail_lanes(end - i));
  } else if constexpr (Ops::kWidth > 1) {
    adam_span<ScalarOps, G, C, kL2, P, S>(c, b, i, end);
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
  static constexpr bool kTakesBf16Grads = true;  // GradType::kF32AsBf16
  template <class Ops, GradType G, Copy16 C, StateType P, StateType S>
  static void run_types(const AdamConsts& c, const Buffers& b, int64_t begin, int64_t end) {
    if (c.l2) {
      adam_span<Ops, G, C, true, P, S>(c, b, begin, end);
    } else {
      adam_span<Ops, G, C, false, P, S>(c, b, begin, end);
    }
  }
  // bf16 parameters (and moments) take fp32 or bf16 gradients only, fp16 parameters fp32 ones with fp32 moments
  // (adam_step_typed checks it): fewer copies compiled.
  template <class Ops, GradType G, Copy16 C>
  static void run(const AdamConsts& c, const Buffers& b, int64_t begin, int64_t end) {
    if constexpr (G != GradType::kF16) {
      if (b.param_type == StateType::kBf16) {
        if (b.state_type == StateType::kBf16)
          return run_types<Ops, G, C, StateType::kBf16, StateType::kBf16>(c, b, begin, end);
        return run_types<Ops, G, C, StateType::kBf16, StateType::kF32>(c, b, begin, end);
      }
    }
    if constexpr (G == GradType::kF32) {
      if (b.param_type == StateType::kF16)
        return run_types<Ops, G, C, StateType::kF16, StateType::kF32>(c, b, begin, end);
    }
    run_types<Ops, G, C, StateType::kF32, StateType::kF32>(c, b, begin, end);
  }
};

struct LionKernel {
  static constexpr bool kTakesBf16Grads = false;
  template <class Ops, GradType G, Copy16 C>
  static void run(const LionConsts& c, const Buffers& b, int64_t begin, int64_t end) {
    lion_span<Ops, G, C>(c, b, begin, end);
  }
};

struct SgdKernel {
  static constexpr bool kTakesBf16Grads = false;
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
    case GradType::kF32AsBf16:
      if constexpr (Kernel::kTakesBf16Grads) return dispatch_copy<Kernel, Ops, GradType::kF32AsBf16>(c, b, begin, end);
      return;  // refused by the front (cpu_optimizer.cpp)
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
