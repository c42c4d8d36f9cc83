// zhost/kit/cpu_isa.hpp: the instruction sets the kit's CPU kernels (the fused optimizer,
// zhost/kit/cpu_optimizer.hpp, and the ZeRO++ quantizer, zhost/kit/zeropp_quant.hpp) have paths for, and the
// one run-time choice among them: CPU detection, overridden by ZHOST_CPU_ISA. Both kernels take it from
// here, so one variable forces both. (The namespace is the optimizer's, where the choice started.)
#pragma once

namespace zhost::cpu_optim {

// Instruction sets with a kernel. kAvx512 needs AVX-512 F, BW, VL and DQ; kAvx2 needs AVX2, FMA and F16C.
enum class Isa { kScalar, kAvx2, kAvx512 };

// "scalar", "avx2", "avx512": the names ZHOST_CPU_ISA takes.
const char* isa_name(Isa isa);

// Whether this CPU (and this build) can run `isa`. kScalar always can.
bool isa_supported(Isa isa);

// Throws std::runtime_error when this CPU cannot run `isa`, naming `kernels` (e.g. "cpu optimizer") and the
// ISAs it can run.
void require_isa(Isa isa, const char* kernels);

// The widest ISA this CPU supports.
Isa best_isa();

// best_isa(), unless the environment variable ZHOST_CPU_ISA (scalar, avx2 or avx512) names another. Read
// at every call. Throws std::runtime_error (one line: what the CPU supports and what to set) when the
// variable names an unknown ISA or one this CPU lacks.
Isa selected_isa();

}  // namespace zhost::cpu_optim
