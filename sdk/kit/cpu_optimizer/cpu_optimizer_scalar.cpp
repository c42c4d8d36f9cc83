// sdk/kit/cpu_optimizer/cpu_optimizer_scalar.cpp: the scalar path of the fused CPU optimizer, one element at
// a time with the math of cpu_optimizer_kernels.hpp. Built with no ISA flags, so it runs on any CPU.
#include "cpu_optimizer_kernels.hpp"

namespace zhost::cpu_optim::detail {

KernelTable scalar_kernels() { return kernel_table<ScalarOps>(); }

}  // namespace zhost::cpu_optim::detail
