// sdk/kit/src/isa_choice.hpp (private to the kit): which ISA path a call of the kit's CPU kernels takes, with
// zhost/kit/cpu_isa.hpp's errors turned into the kit's (sdk::PluginError).
#pragma once

#include <optional>
#include <stdexcept>

#include "kit_error.hpp"
#include "zhost/kit/cpu_isa.hpp"

namespace zhost::kit::detail {

// `wanted`, else the run-time choice (ZHOST_CPU_ISA, or the CPU's best). Throws
// sdk::PluginError(ZHOST_ERR_UNSUPPORTED) naming `kernels` when this CPU cannot run it.
inline cpu_optim::Isa chosen_isa(std::optional<cpu_optim::Isa> wanted, const char* kernels) {
  try {
    const cpu_optim::Isa isa = wanted ? *wanted : cpu_optim::selected_isa();
    cpu_optim::require_isa(isa, kernels);
    return isa;
  } catch (const std::runtime_error& e) {
    fail(ZHOST_ERR_UNSUPPORTED, "{}", e.what());
  }
}

}  // namespace zhost::kit::detail
