// host/telemetry/model_states.hpp: ZeRO's model-state accounting for one rank. The partitioner reports the
// bytes it allocated (zhost_model_state_bytes), the host adds what it holds, and the total is compared with
// the ZeRO paper's formula for the stage: with Ψ parameters, N ranks, c bytes per compute-dtype value and K
// bytes of optimizer state per parameter (Adam: 8),
//   stage 0: cΨ params + cΨ grads + 4Ψ master (none in fp32: the parameter is the master) + KΨ
//   stage 1: cΨ + cΨ + (4 + K)Ψ/N          (mixed precision Adam: 4Ψ + 12Ψ/N)
//   stage 2: cΨ + (c + 4 + K)Ψ/N           (2Ψ + 14Ψ/N)
//   stage 3: (2c + 4 + K)Ψ/N               (16Ψ/N; in fp32 the parameter shard is the master: 16Ψ/N
//                                           too) + the gather window: the parameters materialised at once
// With the optimizer offloaded (zero.offload_optimizer.device), the master weights, optimizer states
// and, from stage 2, the gradient partition live in the tier: the device keeps cΨ (+ cΨ of gradients in
// stage 1), as ZeRO-Offload counts it; what the tier holds is reported as "offloaded".
// Each rank logs the comparison at start; rank 0 writes it to RUN_DIR/model_states.json.
#pragma once

#include <cstdint>
#include <string>

namespace zhost::engine {

struct ModelStateBytes {
  double params = 0, grads = 0, master = 0, optimizer = 0;
  double buffers = 0;    // communication buckets and staging: reported, not part of the formula
  double offloaded = 0;  // held by an offload tier: reported, not part of the (device) formula
  // stage 3: materialised (gathered) parameters, the live window on top of the partitioned states
  double gather_window = 0;
  // the collective transform's parameter copies (hpZ's secondary partition), on top of the formula
  double transform_params = 0;
  // the collective transform's gradient-side state (LoCo's error buffers), on top of the formula
  double transform_grads = 0;
  double total() const { return params + grads + master + optimizer; }
};

struct ModelStateShape {
  int stage = 0;
  int world_size = 1;
  int64_t num_params = 0;             // Ψ
  int compute_bytes = 4;              // c
  int optimizer_bytes_per_param = 8;  // K
  int master_bytes = 4;               // of a separate master: 2 with bf16.master_weights_and_grads
  bool optimizer_offloaded = false;
  bool params_offloaded = false;  // stage 3 with zero.offload_param: the parameter shards are in the tier too
};

ModelStateBytes zero_formula(const ModelStateShape& shape);

// "model states per rank: params 1.2 MB, grads ..., total 5.6 MB; ZeRO stage 2 formula 2Ψ+14Ψ/N (N=2): 5.5 MB
// (measured/formula 1.01); buffers 0.3 MB"
std::string describe_model_states(const ModelStateBytes& measured, const ModelStateShape& shape);

// {"stage", "world_size", "num_params", "measured": {...}, "formula": {...}, "ratio"}
std::string model_states_json(const ModelStateBytes& measured, const ModelStateShape& shape);

}  // namespace zhost::engine
