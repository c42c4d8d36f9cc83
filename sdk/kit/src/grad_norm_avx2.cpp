// sdk/kit/src/grad_norm_avx2.cpp: the avx2 path of the exact gradient norm's passes (grad_norm_kernels.hpp).
// Compiled with -mavx2 -mfma -mf16c; called only when the CPU has them.
#include "grad_norm_loops.hpp"

namespace zhost::kit::detail {

NormKernels avx2_norm_kernels() { return norm_kernel_table(); }

}  // namespace zhost::kit::detail
