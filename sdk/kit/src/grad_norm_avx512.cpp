// sdk/kit/src/grad_norm_avx512.cpp: the avx512 path of the exact gradient norm's passes (grad_norm_kernels.hpp).
// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma; called only when the CPU has them.
#include "grad_norm_loops.hpp"

namespace zhost::kit::detail {

NormKernels avx512_norm_kernels() { return norm_kernel_table(); }

}  // namespace zhost::kit::detail
