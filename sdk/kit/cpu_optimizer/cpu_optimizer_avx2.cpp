// sdk/kit/cpu_optimizer/cpu_optimizer_avx2.cpp: the AVX2 path of the fused CPU optimizer: 8 fp32 lanes,
// F16C for fp16, a scalar tail (sdk/kit/simd/ops_avx2.hpp). Compiled with -mavx2 -mfma -mf16c; called only
// when the CPU has them.
#include "../simd/ops_avx2.hpp"
#include "cpu_optimizer_kernels.hpp"

namespace zhost::cpu_optim::detail {

KernelTable avx2_kernels() { return kernel_table<simd::Avx2Ops>(); }

}  // namespace zhost::cpu_optim::detail
