// sdk/kit/cpu_optimizer/cpu_optimizer_avx512.cpp: the AVX-512 path of the fused CPU optimizer: 16 fp32
// lanes, masked loads and stores for the tail (sdk/kit/simd/ops_avx512.hpp). Compiled with -mavx512f
// -mavx512bw -mavx512vl -mavx512dq -mfma; called only when the CPU has them.
#include "../simd/ops_avx512.hpp"
#include "cpu_optimizer_kernels.hpp"

namespace zhost::cpu_optim::detail {

KernelTable avx512_kernels() { return kernel_table<simd::Avx512Ops>(); }

}  // namespace zhost::cpu_optim::detail
