// bench/engine_overhead/reference_loop.hpp: the reference that zhost's step time is compared with: one
// rank of a plain LibTorch training loop doing the same work as `zhost run` with stage 0 (same model,
// data, optimizer, schedule and clipping, read from the same config), with none of zhost's machinery: no
// partition ABI, no autograd hooks, no block-by-block hook points, no telemetry.
#pragma once

#include <cstdint>
#include <vector>

#include "host/comm/comm.hpp"
#include "host/engine/settings.hpp"

namespace zhost::bench {

// Averages over one window of steps, split as zhost's wall_clock_breakdown splits them.
struct WindowTiming {
  double ms_per_step = 0;   // wall time of the window / its steps
  double forward_ms = 0;    // per micro-batch (forward + loss)
  double backward_ms = 0;   // per micro-batch
  double reduction_ms = 0;  // per optimizer step (zhost reports it per micro-batch: the same figure with
                            // gradient_accumulation_steps = 1)
  double step_ms = 0;       // per optimizer step (norm, clipping, optimizer, dropping gradients)
};

struct ReferenceResult {
  int64_t blocks = 0, params = 0, num_parameters = 0;  // the model: partition hook points and parameters
  // One per settings.steps_per_print steps after the warm-up: the windows over which zhost averages the
  // records it prints (zhost's first record is its warm-up).
  std::vector<WindowTiming> windows;
  std::vector<double> step_losses;  // mean over ranks and micro-batches, one per step (all steps)
};

// Trains settings.steps steps as rank world->rank() of `world` (nullptr: one rank); the first
// `warmup_steps` are not timed. settings.steps - warmup_steps must be a multiple of steps_per_print.
ReferenceResult run_reference_loop(const engine::TrainSettings& settings, comm::Comm* world, int64_t warmup_steps);

}  // namespace zhost::bench
