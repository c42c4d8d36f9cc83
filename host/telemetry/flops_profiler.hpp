// host/telemetry/flops_profiler.hpp: DeepSpeed's flops profiler (flops_profiler.* keys, docs/profiling.md "Flops
// profiler"): at one step (profile_step) every rank times each block's forward and backward; rank 0 prints a
// summary under DeepSpeed's names (params, MACs, fwd/bwd latency, FLOPS) and a per-block profile, and writes
// RUN_DIR/flops_profile.json.
//
// MACs are counted, not measured: a block's forward multiply-accumulates per token are the elements of the
// parameters it uses in matmuls plus, for a transformer layer, 2 * width * seq_len for the attention scores
// and their weighted sum (Model::forward_macs_per_token), so 6 x their sum over blocks is
// Model::flops_per_token, the estimate the step lines' TFLOP/s use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/model/model.hpp"

namespace zhost::engine {

struct FlopsProfilerSettings {
  bool enabled = false;
  int64_t profile_step = 1;
  int64_t top_modules = 1;  // blocks listed by params, MACs and latency in the aggregated profile
  bool detailed = true;     // the per-block profile
  std::string output_file;  // "" = the log
};

// What the trainer measured of the profiled step, on this rank.
struct ProfiledStep {
  std::vector<double> block_forward_ms, block_backward_ms;  // per block, summed over the step's micro-batches
  double forward_ms = 0, backward_ms = 0, step_ms = 0, iteration_ms = 0;
  int64_t tokens = 0;   // this rank's tokens in the step
  int64_t samples = 0;  // this rank's samples in the step
};

class FlopsProfiler {
 public:
  FlopsProfiler(const FlopsProfilerSettings& settings, const model::Model& model, int world_size);
  bool profiles(int64_t step) const { return settings_.enabled && step == settings_.profile_step; }
  // Rank 0: prints (or writes output_file) and writes RUN_DIR/flops_profile.json.
  void report(int64_t step, const ProfiledStep& measured, const std::string& run_dir) const;

 private:
  FlopsProfilerSettings settings_;
  const model::Model& model_;
  int world_size_;
};

}  // namespace zhost::engine
