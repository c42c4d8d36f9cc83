// sdk/kit/src/grad_norm_scalar.cpp: the scalar path of the exact gradient norm's passes (grad_norm_kernels.hpp).
// Built with no ISA flags, so it runs on any CPU.
#include "grad_norm_loops.hpp"

namespace zhost::kit::detail {

NormKernels scalar_norm_kernels() { return norm_kernel_table(); }

}  // namespace zhost::kit::detail
