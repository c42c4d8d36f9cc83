// host/engine/settings.hpp: the training settings of one rank, read from the validated config: batch
// arithmetic resolved for the world size, the model, data, optimizer, schedule and precision specs.
// Keeping this typed struct between config and engine means the engine never looks keys up by name.
#pragma once

#include <string>

#include "host/comm/comm.hpp"
#include "host/config/schema/batch.hpp"
#include "host/config/schema/resolved.hpp"
#include "host/data/data.hpp"
#include "host/engine/activation_checkpoints.hpp"
#include "host/engine/random_ltd.hpp"
#include "host/model/model.hpp"
#include "host/optim/loss_scaler.hpp"
#include "host/optim/schedule.hpp"
#include "host/telemetry/flops_profiler.hpp"
#include "host/telemetry/model_states.hpp"
#include "zhost/kit/optimizer.hpp"

namespace zhost::engine {

enum class Precision { kFp32, kBf16, kFp16 };
const char* precision_name(Precision precision);

// The [checkpoint] table (docs/checkpoints.md).
struct CheckpointSettings {
  std::string dir = "checkpoints";  // checkpoint.dir
  int64_t interval = 0;             // checkpoint.interval: every N steps, 0 = never by count
  int64_t keep_last = 2;
  bool at_end = false;
  bool on_signal = true;
  bool async = false;  // experimental.checkpoint_async: write from a snapshot while training goes on
  std::string resume;  // checkpoint.resume: "" = start afresh
};

struct TrainSettings {
  config::BatchSizes batch;
  int64_t steps = 0;
  uint64_t seed = 0;
  int64_t steps_per_print = 10;
  double gradient_clipping = 0;
  // Note [Gradient pre-division] (trainer.cpp): what each rank's gradients are divided by before they are
  // summed; 1 = none. The world size with prescale_gradients, else gradient_predivide_factor.
  double gradient_predivide = 1;
  bool wall_clock_breakdown = false;
  bool memory_breakdown = false;               // DeepSpeed's see_memory_usage lines at every phase of printed steps
  bool trace = false;                          // run.trace: RUN_DIR/trace.rankN.json (Note [Trace file])
  bool comms_logger = false;                   // comms_logger.enabled: per-op summary (Note [Collective figures])
  bool comms_logger_verbose = false;           // comms_logger.verbose: one line per collective
  CheckpointingSpec activation_checkpointing;  // activation_checkpointing.* (activation_checkpoints.hpp)
  // LayerDrop (Fan et al., 2019): each transformer block is skipped with this probability per micro-batch,
  // drawn from (seed, step, micro-batch, block) and, with layer_drop_per_rank, the rank.
  double layer_drop = 0;
  bool layer_drop_per_rank = false;
  RandomLtdSpec random_ltd;  // Note [Random-LTD]; max_tokens resolved (0 -> model.seq_len)
  int rank = 0;
  model::ModelSpec model;
  data::DataSpec data;
  kit::OptimizerSpec optimizer;
  optim::ScheduleSpec schedule;
  Precision precision = Precision::kFp32;
  // bf16.master_weights_and_grads (or fp16's), bf16.optimizer_states: 2-byte masters, and moments, in the CPU tier
  // (Note [bf16 master weights]) or on the device (Note [bf16 masters without offload]).
  bool half_master = false;
  bool bf16_states = false;
  optim::LossScaleSpec loss_scale;  // fp16 only
  comm::Backend backend = comm::Backend::kAuto;
  double comm_timeout_s = 300;
  std::string device = "auto";
  int intra_op_threads = 0;  // 0 = decide (Note [CPU threads per rank], cpu_threads.hpp)
  double peak_tflops = 0;    // 0 = measure at start (Note [Model FLOPs utilization], peak_flops.hpp)
  bool pin_ranks = false;
  std::string run_dir;
  std::string run_name;
  int64_t zero_stage = 0;
  bool optimizer_offloaded = false;  // zero.offload_optimizer.device names a tier
  bool params_offloaded = false;     // zero.offload_param.device names a tier (stage 3)
  // the fp32 master and optimizer states live outside host memory (in a storing tier's files, e.g. on NVMe)
  bool optimizer_states_outside_host_memory = false;
  bool params_outside_host_memory = false;  // the parameter shards live outside host memory (stage 3)
  int64_t params_max_in_cpu = 0;            // of those, elements per rank kept in host memory (Note [max_in_cpu])
  // zero.offload_optimizer.delayed_update_start_step with delayed_update on, else 0: from this step on the
  // tier's step (and its storing tier's transfers) runs past the step boundary (Note [Delayed parameter update])
  int64_t delayed_update_from = 0;
  int local_rank = 0;                   // picks the CUDA device
  int local_world_size = 1;             // ranks on this node
  bool deferred_device_copies = false;  // debug.deferred_device_copies: Note in device_copies.hpp
  bool share_cuda_device = false;       // debug.share_cuda_device: more local ranks than GPUs, CUDA over Gloo
  bool nccl_single_rank = false;        // debug.nccl_single_rank: a one-rank group's collectives through NCCL
  CheckpointSettings checkpoint;
  FlopsProfilerSettings flops_profiler;
};

// The inputs of ZeRO's model-state formula (model_states.hpp) for this job on `world_size` ranks with
// `num_params` parameters.
ModelStateShape model_state_shape(const TrainSettings& settings, int world_size, int64_t num_params);

// Throws UsageError for combinations the config alone cannot reject (e.g. batch sizes that do not fit
// the world size).
TrainSettings read_settings(const config::ResolvedConfig& config, int world_size, int rank, int local_rank,
                            int local_world_size);

}  // namespace zhost::engine
