// host/telemetry/model_states.cpp: ZeRO's model-state formulas and their report (see the header).
#include "host/telemetry/model_states.hpp"

#include <fmt/format.h>

#include <limits>
#include <nlohmann/json.hpp>

namespace zhost::engine {

ModelStateBytes zero_formula(const ModelStateShape& s) {
  const double psi = static_cast<double>(s.num_params), n = s.world_size, c = s.compute_bytes;
  const double k = s.optimizer_bytes_per_param;
  ModelStateBytes b;
  b.params = s.stage >= 3 ? c * psi / n : c * psi;
  b.grads = s.stage >= 2 ? c * psi / n : c * psi;
  // A master in the compute dtype (fp32 runs; bf16 masters in bf16 runs) is the stage 3 parameter shard.
  if (s.stage == 0 || (s.stage >= 3 && s.compute_bytes == s.master_bytes)) {
    b.master = s.stage == 0 ? (s.compute_bytes == 4 ? 0 : 4 * psi) : 0;
    b.optimizer = s.stage == 0 ? k * psi : k * psi / n;
  } else {
    b.master = s.master_bytes * psi / n;
    b.optimizer = k * psi / n;
  }
  if (s.optimizer_offloaded) {
    b.master = b.optimizer = 0;
    if (s.stage >= 2) b.grads = 0;
  }
  if (s.params_offloaded && s.stage >= 3) b.params = 0;
  return b;
}

namespace {

std::string formula_text(const ModelStateShape& s) {
  const int c = s.compute_bytes, k = s.optimizer_bytes_per_param;
  if (s.params_offloaded && s.stage >= 3) return "0 (parameters, gradients and optimizer offloaded)";
  if (s.optimizer_offloaded) {
    if (s.stage == 1) return fmt::format("{}Ψ (optimizer offloaded)", 2 * c);
    return s.stage >= 3 ? fmt::format("{}Ψ/N (optimizer and gradients offloaded)", c)
                        : fmt::format("{}Ψ (optimizer and gradients offloaded)", c);
  }
  switch (s.stage) {
    case 0:
      return fmt::format("{}Ψ", 2 * c + (c == 4 ? 0 : 4) + k);
    case 1:
      return fmt::format("{}Ψ+{}Ψ/N", 2 * c, s.master_bytes + k);
    case 2:
      return fmt::format("{}Ψ+{}Ψ/N", c, c + s.master_bytes + k);
    default:
      return fmt::format("{}Ψ/N", 2 * c + (c == s.master_bytes ? 0 : s.master_bytes) + k);
  }
}

// measured / formula; 1 when both are zero (everything offloaded).
double ratio(const ModelStateBytes& measured, const ModelStateBytes& formula) {
  if (formula.total() == 0) return measured.total() == 0 ? 1.0 : std::numeric_limits<double>::infinity();
  return measured.total() / formula.total();
}

std::string mb(double bytes) { return fmt::format("{:.2f} MB", bytes / 1e6); }

nlohmann::json to_json(const ModelStateBytes& b) {
  return {
      {"params", b.params}, {"grads", b.grads}, {"master", b.master}, {"optimizer", b.optimizer}, {"total", b.total()}};
}

}  // namespace

std::string describe_model_states(const ModelStateBytes& measured, const ModelStateShape& shape) {
  const ModelStateBytes formula = zero_formula(shape);
  return fmt::format(
      "model states per rank: params {}, grads {}, master {}, optimizer {}, total {}; ZeRO stage {} formula {} "
      "(Ψ={}, N={}): {} (measured/formula {:.3f}); communication buffers {}{}{}{}{}",
      mb(measured.params), mb(measured.grads), mb(measured.master), mb(measured.optimizer), mb(measured.total()),
      shape.stage, formula_text(shape), shape.num_params, shape.world_size, mb(formula.total()),
      ratio(measured, formula), mb(measured.buffers),
      measured.offloaded > 0 ? "; in the offload tier " + mb(measured.offloaded) : std::string(),
      measured.gather_window > 0 ? "; gathered parameters " + mb(measured.gather_window) : std::string(),
      measured.transform_params > 0
          ? "; parameter copies of the collective transform (hpZ) " + mb(measured.transform_params)
          : std::string(),
      measured.transform_grads > 0
          ? "; gradient error buffers of the collective transform (LoCo) " + mb(measured.transform_grads)
          : std::string());
}

std::string model_states_json(const ModelStateBytes& measured, const ModelStateShape& shape) {
  const ModelStateBytes formula = zero_formula(shape);
  nlohmann::json j = {{"stage", shape.stage},
                      {"world_size", shape.world_size},
                      {"num_params", shape.num_params},
                      {"compute_bytes", shape.compute_bytes},
                      {"formula_text", formula_text(shape)},
                      {"measured", to_json(measured)},
                      {"formula", to_json(formula)},
                      {"buffers", measured.buffers},
                      {"offloaded", measured.offloaded},
                      {"gather_window", measured.gather_window},
                      {"transform_params", measured.transform_params},
                      {"transform_grads", measured.transform_grads},
                      {"ratio", ratio(measured, formula)}};
  return j.dump(1);
}

}  // namespace zhost::engine
