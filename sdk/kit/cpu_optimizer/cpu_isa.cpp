// sdk/kit/cpu_optimizer/cpu_isa.cpp: which instruction sets this CPU and build can run, and the choice the
// kit's CPU kernels make among them (CPU detection, ZHOST_CPU_ISA); declared in zhost/kit/cpu_isa.hpp.
#include "zhost/kit/cpu_isa.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace zhost::cpu_optim {
namespace {

constexpr const char* kIsaVariable = "ZHOST_CPU_ISA";
constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};

// "scalar, avx2, avx512": the ISAs this CPU can run, for messages.
std::string supported_list() {
  std::string list;
  for (const Isa isa : kAllIsas) {
    if (isa_supported(isa)) list += std::string(list.empty() ? "" : ", ") + isa_name(isa);
  }
  return list;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return true;
#if defined(ZHOST_CPU_OPTIM_X86)
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
    case Isa::kAvx2:
    case Isa::kAvx512:
      return false;
#endif
  }
  return false;
}

void require_isa(Isa isa, const char* kernels) {
  if (isa_supported(isa)) return;
  throw std::runtime_error(std::string(kernels) + ": the " + isa_name(isa) +
                           " kernels need instructions this CPU lacks; it supports " + supported_list());
}

Isa best_isa() {
  if (isa_supported(Isa::kAvx512)) return Isa::kAvx512;
  if (isa_supported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa selected_isa() {
  const char* forced = std::getenv(kIsaVariable);
  if (forced == nullptr || *forced == '\0') return best_isa();
  const std::string name(forced);
  for (const Isa isa : kAllIsas) {
    if (name != isa_name(isa)) continue;
    if (isa_supported(isa)) return isa;
    throw std::runtime_error(std::string(kIsaVariable) + "=" + name + " asks for an instruction set this CPU " +
                             "lacks; it supports " + supported_list() + ": set " + kIsaVariable +
                             " to one of those, or unset it to use " + isa_name(best_isa()));
  }
  throw std::runtime_error(std::string(kIsaVariable) + "=" + name + " is not an instruction set zhost knows; " +
                           "this CPU supports " + supported_list() + ": set " + kIsaVariable +
                           " to one of those, or unset it to use " + isa_name(best_isa()));
}

}  // namespace zhost::cpu_optim
