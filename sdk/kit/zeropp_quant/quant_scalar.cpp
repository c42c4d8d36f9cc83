// sdk/kit/zeropp_quant/quant_scalar.cpp: the scalar path of the ZeRO++ quantization kernels, one element at a
// time with the arithmetic of quant_kernels.hpp. Built with no ISA flags, so it runs on any CPU.
#include "quant_kernels.hpp"

namespace zhost::zeropp::detail {

KernelTable scalar_kernels() { return kernel_table<ScalarQuantOps>(); }

}  // namespace zhost::zeropp::detail
