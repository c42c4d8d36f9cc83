// sdk/kit/src/grad_norm_kernels.hpp: internal to zhost_kit. The two passes of Note [Exact gradient norm]
// (zhost/kit/grad_numerics.hpp) over fp32 runs, written once as loops the compiler vectorizes, and compiled
// once per ISA (grad_norm_{scalar,avx2,avx512}.cpp, the ISAs of zhost/kit/cpu_isa.hpp) behind a table.
//
// Every path gives the same result, bit for bit, because nothing in it rounds:
//   - max_abs_bits: the largest bit pattern of |x| (an unsigned max, in any order);
//   - square_sum: each element's floor(x^2 * scale) (an integer below 2^80, Note [Exact gradient norm]) as
//     two fp64 integers below 2^40, high = floor(v / 2^40) and low = floor(v - high * 2^40): every step is
//     exact (x^2 of an fp32 fits fp64's 53 bits; scale, 2^40 and 2^-40 are powers of two; v - high * 2^40
//     is the low bits of v), so the lanes may add them in any order. A block of at most 4096 elements keeps
//     each lane sum below 2^52, exact in fp64, before it joins the 128-bit total.
// The loops are in grad_norm_loops.hpp, which only the ISA files include: each compiles its own copy
// (internal linkage, as the ZeRO++ kernels) with its own flags, and OpenMP's simd pragmas.
#pragma once

#include <cstdint>

namespace zhost::kit::detail {

__extension__ typedef unsigned __int128 Uint128;  // GCC and Clang's 128-bit integer

struct NormKernels {
  uint32_t (*max_abs_bits)(const float* x, int64_t n);             // max of (bits of x[i]) & 0x7FFFFFFF; 0 for n = 0
  Uint128 (*square_sum)(const float* x, int64_t n, double scale);  // sum of floor(x[i]^2 * scale)
};

// One per ISA file; the x86 ones exist only in x86-64 builds (ZHOST_CPU_OPTIM_X86).
NormKernels scalar_norm_kernels();
NormKernels avx2_norm_kernels();
NormKernels avx512_norm_kernels();

}  // namespace zhost::kit::detail
