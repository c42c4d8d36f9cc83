// host/engine/preflight.hpp: the checks of a job that need more than its config yet cost no training, so
// that a job that cannot run stops before it allocates anything: the data source opens and fits the
// model and fp16 has kernels on the training device (`zhost config check` and `zhost run`), and the model
// states fit this machine's available memory (`zhost run`), and what the plugins' config checks are told. Each throws
// UsageError (exit 2) with what to change.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>

#include "host/config/schema/resolved.hpp"
#include "host/engine/settings.hpp"
#include "host/job/plugin_checks.hpp"

namespace zhost::engine {

// For model.type = "hf": reads model.path's config.json and safetensors headers and checks them against
// each other and model.seq_len (docs/models.md); the message starts with model.path's location. Returns
// the model's vocabulary size (model.vocab for the built-in models).
int64_t check_model(const config::ResolvedConfig& config);
// check_model, then opens data.path as data.type reads it (existence, a regular file, whole tokens, enough
// for one sample, the first token ids below the vocabulary size). The message starts with data.path's
// location. Synthetic data has nothing to check.
void check_data(const config::ResolvedConfig& config);

// Refuses fp16 when this LibTorch has no half-precision kernels on `device` (LibTorch 1.13 on the CPU),
// with one line instead of a failure deep inside the first step.
void check_precision_supported(Precision precision, at::Device device);
// The same from the config alone, for `zhost config check` and the launcher, when the job would train on
// the CPU here; the message starts with fp16.enabled's location.
void check_precision(const config::ResolvedConfig& config);

// The model's parameter count (Ψ), from shapes alone: nothing is allocated.
int64_t parameter_count(const TrainSettings& settings);

// Host memory the job's model states take on this machine: `local_ranks` ranks of `world_size` at the
// ZeRO formula's bytes per rank (host/telemetry/model_states.hpp). On a CPU job that is every model state; on
// a device job, what the offload tiers hold. Minus what the NVMe tier keeps in files.
double host_model_state_bytes(const TrainSettings& settings, int world_size, int local_ranks);

// MemAvailable from /proc/meminfo, in bytes; nullopt when it cannot be read.
std::optional<double> available_host_memory();

// Refuses (UsageError) thread settings that no local rank of `local_world_size` could honour, e.g.
// run.pin_ranks with more local ranks than CPUs (Note [CPU threads per rank]).
void check_cpu_threads(const config::ResolvedConfig& config, int local_world_size);

// Refuses the job when host_model_state_bytes exceeds available_host_memory(), naming both and what to
// set; run.memory_check = false skips it.
void check_host_memory(const config::ResolvedConfig& config, const TrainSettings& settings, int world_size,
                       int local_ranks);
// What the plugins' config checks are told of a job of `local_ranks` ranks here of `world_size` (0: not known):
// the model's parameter shapes and what each storing role will hold (Note [Storage space at start],
// preflight.cpp). Builds the model's shapes (nothing is allocated).
ConfigCheckFacts config_check_facts(const config::ResolvedConfig& config, const TrainSettings& settings, int world_size,
                                    int local_ranks);
// check_plugin_configs (host/job/plugin_checks.hpp) with those facts.
void check_plugins(const JobSetup& job, const TrainSettings& settings, int world_size, int local_ranks);

}  // namespace zhost::engine
