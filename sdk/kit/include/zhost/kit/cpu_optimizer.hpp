// zhost/kit/cpu_optimizer.hpp: the fused CPU optimizer: Adam/AdamW, Lion and SGD steps over flat fp32
// buffers in host memory, vectorized with AVX-512 or AVX2 (chosen at run time, scalar fallback),
// multi-threaded over tiles. The CPU-offload tier steps its groups with it, and the kit's Optimizer steps
// every CPU tensor with it.
//
// One call makes one pass over memory: per element it reads the parameter, its gradient (fp32, bf16 or
// fp16) and the moments, and writes the parameter, the moments and, when asked, a 16-bit copy of the new
// parameter (bf16 or fp16, round to nearest even) for the device's working weights.
//
// Note [One optimizer arithmetic]: an optimizer step on the CPU is one sequence of fp32 IEEE operations
// per element, written once (sdk/kit/cpu_optimizer/cpu_optimizer_kernels.hpp): scalar constants are
// computed once per call in double and rounded once to fp32; the gradient is multiplied by grad_scale
// first (averaging, unscaling and clipping folded into one factor); then separate multiplies and adds,
// never fused (the library is compiled with -ffp-contract=off and its SIMD wrappers use no FMA). The
// scalar, AVX2 and AVX-512 paths therefore give the same bits, whatever the thread count, tile size or
// where a slice of a buffer starts, and so do the kit's Optimizer (CPU tensors) and the CPU tier: moving
// the optimizer to the tier changes no bit. The kit's Optimizer on CUDA tensors uses ATen ops instead:
// same formulas, not the same bits (tests/optim's CUDA cases against float64, run on an H100).
//
// No LibTorch here: plain pointers, so the library builds in seconds and can be tested on its own.
#pragma once

#include <cstdint>
#include <optional>

#include "zhost/kit/cpu_isa.hpp"

namespace zhost::cpu_optim {

// Element type of the gradient buffer. kF32AsBf16: an fp32 buffer whose values are used rounded to bf16 (nearest
// even), as a bf16 gradient buffer would hold them (Note [bf16 master weights]); Adam only.
enum class GradType { kF32, kBf16, kF16, kF32AsBf16 };
enum class Copy16 { kNone, kBf16, kF16 };  // 16-bit copy of the updated parameter to write, if any
// Element type in memory of master weights or of optimizer moments (kF16: master weights only).
enum class StateType { kF32, kBf16, kF16 };

struct AdamHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = true;        // true: AdamW, p *= 1 - lr*wd; false: Adam with L2 decay, g += wd*p
  bool bias_correction = true;  // bc_i = 1 - beta_i^step; false: bc_i = 1
  int64_t step = 1;             // 1-based count of applied steps
  double grad_scale = 1.0;      // the gradient used is grad * grad_scale (averaging, unscaling, clipping)
};

struct LionHyper {
  double lr = 1e-4;
  double beta1 = 0.9;   // interpolation for the update direction
  double beta2 = 0.99;  // momentum decay
  double weight_decay = 0.0;
  double grad_scale = 1.0;  // as in AdamHyper
};

struct SgdHyper {
  double lr = 1e-3;
  double momentum = 0.0;      // 0: no buffer
  double weight_decay = 0.0;  // L2: g += wd*p
  double grad_scale = 1.0;    // as in AdamHyper
};

struct StepOptions {
  std::optional<Isa> isa;  // empty: selected_isa(); an ISA this CPU lacks throws std::runtime_error
  int threads = 0;         // 0: std::thread::hardware_concurrency(); 1: inline on the calling thread
  int64_t tile = 65536;    // elements per unit of work handed to a thread
};

// One Adam/AdamW step over n elements, in place on param, exp_avg and exp_avg_sq:
//   g = grad * grad_scale (exact when grad_scale == 1)
//   AdamW: p *= 1 - lr*wd          Adam (L2): g += wd*p   (neither when wd == 0)
//   m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g^2;  p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)
// and, unless copy16_type is kNone, copy16[i] = the 16-bit rounding of the new p[i].
// Buffers need no particular alignment but must not overlap. Throws std::invalid_argument on bad
// arguments (null buffer, n < 0, step < 1, tile < 1, threads < 0) and std::runtime_error for an ISA
// this CPU lacks.
void adam_step(const AdamHyper& hyper, float* param, const void* grad, GradType grad_type, float* exp_avg,
               float* exp_avg_sq, void* copy16, Copy16 copy16_type, int64_t n, const StepOptions& options = {});

// Note [bf16 master weights]: DeepSpeed's bf16_master_weights_and_grads keeps the optimizer's master weights (and
// the gradients it steps on) in bf16, and bf16_optimizer_states its Adam moments too; its CPU Adam loads each
// element into fp32, updates it there and stores it back rounded to nearest even (its simd.h). adam_step_typed
// does the same: the arithmetic above, unchanged, between a load that widens (exact) and a store that rounds to
// nearest even (NaN kept, made quiet), on every ISA path alike. The 16-bit copy is then the same bits as a bf16
// master. param_type kBf16 takes state_type kF32 or kBf16, and grad_type kF32, kF32AsBf16 or kBf16 (a bf16
// gradient partition on the device side, Note [bf16 masters without offload] in zhost/kit/optimizer.hpp);
// state_type kBf16 needs param_type kBf16 (DeepSpeed's rule); kF32/kF32 is adam_step. DeepSpeed's
// fp16_master_weights_and_grads is the same with fp16: param_type kF16 takes state_type kF32 and grad_type kF32
// (fp16 stores round to nearest even and overflow to inf). Other combinations throw
// std::invalid_argument.
void adam_step_typed(const AdamHyper& hyper, void* param, StateType param_type, const void* grad, GradType grad_type,
                     void* exp_avg, void* exp_avg_sq, StateType state_type, void* copy16, Copy16 copy16_type, int64_t n,
                     const StepOptions& options = {});

// Widens n bf16 values to fp32 (exact), and rounds n fp32 values to bf16 (nearest even; NaN kept, made quiet):
// the conversions of adam_step_typed, for a caller that reads or writes a bf16 state as fp32 (checkpoints).
void floats_from_bf16(const uint16_t* in, float* out, int64_t n);
void bf16_from_floats(const float* in, uint16_t* out, int64_t n);
// The same for fp16 (IEEE half: nearest even, overflow to inf).
void floats_from_f16(const uint16_t* in, float* out, int64_t n);
void f16_from_floats(const float* in, uint16_t* out, int64_t n);

// One Lion step over n elements, in place on param and exp_avg:
//   p *= 1 - lr*wd;  p -= lr * sign(beta1*m + (1-beta1)*g);  m = beta2*m + (1-beta2)*g
// with sign(0) = 0 (and sign(NaN) = 0, as torch's sign). copy16 as in adam_step.
void lion_step(const LionHyper& hyper, float* param, const void* grad, GradType grad_type, float* exp_avg, void* copy16,
               Copy16 copy16_type, int64_t n, const StepOptions& options = {});

// One SGD step over n elements (torch.optim.SGD, dampening 0, no Nesterov), in place on param and, with
// momentum, momentum_buffer (zeros before the first step; may be null without momentum):
//   g = grad * grad_scale;  g += wd*p (wd != 0);  buf = momentum*buf + g, d = buf (momentum != 0), else d = g;
//   p -= lr * d.
// copy16 as in adam_step.
void sgd_step(const SgdHyper& hyper, float* param, const void* grad, GradType grad_type, float* momentum_buffer,
              void* copy16, Copy16 copy16_type, int64_t n, const StepOptions& options = {});

}  // namespace zhost::cpu_optim
