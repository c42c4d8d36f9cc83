// host/engine/preflight.cpp: the data and host-memory checks before a job starts, and what the plugins'
// config checks are told of the job (see the header).
#include "host/engine/preflight.hpp"

#include <ATen/ops/layer_norm.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "host/core/error.hpp"
#include "host/data/data.hpp"
#include "host/engine/cpu_threads.hpp"
#include "host/engine/device.hpp"
#include "host/engine/random_ltd.hpp"
#include "host/model/model.hpp"
#include "host/telemetry/model_states.hpp"

namespace zhost::engine {
namespace {

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }

// What lowers the model states per machine, for the job's stage.
std::string memory_advice(const TrainSettings& settings) {
  std::string advice = settings.zero_stage < 3
                           ? "use zero.stage = 3 (each rank then keeps 1/N of every model state) and more machines"
                           : "spread the ranks over more machines";
  return advice + ", or a smaller model";
}

}  // namespace

int64_t check_model(const config::ResolvedConfig& config) {
  if (config.get_string("model.type") != "hf") return config.get_int("model.vocab");
  model::ModelSpec spec;
  spec.type = "hf";
  spec.path = config.get_string("model.path");
  spec.seq_len = config.get_int("model.seq_len");
  std::unique_ptr<model::Model> model;
  try {
    // Shapes only, nothing allocated or read but config.json and the safetensors headers.
    model = model::make_model(spec, model::Placement{at::kCPU, at::kFloat, false});
  } catch (const UsageError& e) {
    fail_usage("{} model.path: {}", config.location("model.path"), e.what());
  }
  // Note [Random-LTD]: the folder's model decides whether its layers may drop tokens, as the trainer checks.
  RandomLtdSpec ltd;
  for (const double layer : config.get_float_list("random_ltd.layers"))
    ltd.layers.push_back(static_cast<int64_t>(layer));
  try {
    check_random_ltd_model(ltd, *model);
  } catch (const UsageError& e) {
    fail_usage("{} {}", config.location("random_ltd.layers"), e.what());
  }
  return model->spec().vocab;
}

void check_data(const config::ResolvedConfig& config) {
  const int64_t vocab = check_model(config);
  data::DataSpec spec;
  spec.source = config.get_string("data.type");
  if (spec.source == "synthetic") return;
  spec.path = config.get_string("data.path");
  if (spec.source == "tokens") spec.token_dtype = config.get_string("data.token_dtype");
  if (spec.source == "text") spec.tokenizer = config.get_string("data.tokenizer");
  spec.vocab = vocab;
  spec.seq_len = config.get_int("model.seq_len");
  try {
    data::DataLoader::check(spec);  // a tokenized text is tokenized by the trainer's loader alone
  } catch (const UsageError& e) {
    fail_usage("{} data.path: {}", config.location("data.path"), e.what());
  }
}

void check_precision_supported(Precision precision, at::Device device) {
  if (precision != Precision::kFp16) return;
  try {
    at::Tensor x = at::ones({2, 4}, at::TensorOptions().dtype(at::kHalf).device(device));
    at::layer_norm(x, {4});
    at::matmul(x, x.t());
  } catch (const std::exception&) {
    fail_usage(
        "fp16.enabled = true needs half-precision kernels on {}, which this LibTorch ({}) lacks; use "
        "bf16.enabled = true, or train on CUDA",
        device.str(), TORCH_VERSION);
  }
}

void check_precision(const config::ResolvedConfig& config) {
  // CUDA has half-precision kernels; probing a device here would also hold a context on it for nothing.
  // (run.device = "cuda" trains on CUDA or not at all.)
  const std::string& device = config.get_string("run.device");
  const bool on_cpu = device == "cpu" || (device == "auto" && !has_cuda_device());
  if (!config.get_bool("fp16.enabled") || !on_cpu) return;
  try {
    check_precision_supported(Precision::kFp16, at::kCPU);
  } catch (const UsageError& e) {
    fail_usage("{} {}", config.location("fp16.enabled"), e.what());
  }
}

void check_cpu_threads(const config::ResolvedConfig& config, int local_world_size) {
  const CpuBudget budget = read_cpu_budget();
  for (int local = 0; local < local_world_size; ++local)
    plan_threads(budget, thread_request(static_cast<int>(config.get_int("run.intra_op_threads")),
                                        config.get_bool("run.pin_ranks"), local, local_world_size));
}

int64_t parameter_count(const TrainSettings& settings) {
  // Parameters with shapes and no storage.
  return model::make_model(settings.model, model::Placement{at::kCPU, at::kFloat, false})->num_parameters();
}

double host_model_state_bytes(const TrainSettings& settings, int world_size, int local_ranks) {
  const ModelStateShape shape = model_state_shape(settings, world_size, parameter_count(settings));
  ModelStateShape resident = shape;  // every model state, wherever it lives
  resident.optimizer_offloaded = resident.params_offloaded = false;
  const ModelStateBytes all = zero_formula(resident);
  double per_rank = all.total();
  // What a tier keeps outside host memory (the NVMe tier's files) takes none (its staging buffers are not model
  // states).
  if (settings.optimizer_states_outside_host_memory) per_rank -= all.master + all.optimizer;
  // Parameter shards on NVMe: all but the first max_in_cpu elements of each rank's (Note [max_in_cpu]).
  if (settings.params_outside_host_memory && settings.zero_stage >= 3) {
    const double per_rank_params = std::ceil(static_cast<double>(shape.num_params) / world_size);
    const double in_files = std::max(0.0, per_rank_params - static_cast<double>(settings.params_max_in_cpu));
    if (per_rank_params > 0) per_rank -= all.params * in_files / per_rank_params;
  }
  if (trains_on_cuda(settings)) per_rank -= zero_formula(shape).total();  // the device keeps the rest
  return per_rank * local_ranks;
}

std::optional<double> available_host_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string name;
    double kib = 0;
    if (fields >> name >> kib && name == "MemAvailable:") return kib * 1024.0;
  }
  return std::nullopt;
}

void check_host_memory(const config::ResolvedConfig& config, const TrainSettings& settings, int world_size,
                       int local_ranks) {
  if (!config.get_bool("run.memory_check")) return;
  const std::optional<double> available = available_host_memory();
  if (!available) return;
  const double needed = host_model_state_bytes(settings, world_size, local_ranks);
  if (needed <= *available) return;
  fail_usage(
      "the model states alone need {} of host memory on this machine ({} rank(s) here of {}, ZeRO stage {}), "
      "but it has {} available (MemAvailable in /proc/meminfo); {}; or set run.memory_check = false to start "
      "anyway",
      gib(needed), local_ranks, world_size, settings.zero_stage, gib(*available), memory_advice(settings));
}

// Note [Storage space at start]: the bytes the storing tiers will hold once every state is written, per rank,
// for their config checks (zhost_config_check_args, Note [Plugin config checks], host/job/plugin_checks.cpp):
// the optimizer-storage tier keeps the optimizer's fp32 master and states (4 + K bytes per parameter / N,
// stages 1-3) and at stage 3 the fp32 gradients the CPU tier moves there (4 / N, Note [Gradients in storage];
// not with pin_memory); the params tier keeps the parameter shards beyond max_in_cpu (c / N each, Note
// [max_in_cpu]). It is a lower bound, like the memory check's "model states alone": a tier writes a buffer's
// new copy before it frees the old one, so a step also needs room for the chunks being rewritten (up to
// buffer_count storage chunks per state; 50 MB at the defaults), which only the CPU tier knows. A tier that
// keeps them on a disk (the NVMe tier) compares them with its free space, so that a job that could never fit
// stops before it writes anything; run.memory_check = false gives 0 (not known), and the tier's own
// reservation of each buffer is then what stops a disk that fills up.
ConfigCheckFacts config_check_facts(const config::ResolvedConfig& config, const TrainSettings& settings, int world_size,
                                    int local_ranks) {
  ConfigCheckFacts facts;
  const std::unique_ptr<model::Model> shapes =
      model::make_model(settings.model, model::Placement{at::kCPU, at::kFloat, false});
  facts.num_blocks = static_cast<uint32_t>(shapes->num_blocks());
  for (const model::ParamEntry& param : shapes->parameters()) {
    facts.param_numels.push_back(param.tensor.numel());
    facts.param_blocks.push_back(param.block);
  }
  if (world_size <= 0) return facts;
  facts.world_size = world_size;
  facts.local_ranks = local_ranks;
  if (!config.get_bool("run.memory_check")) return facts;
  const ModelStateShape shape = model_state_shape(settings, world_size, shapes->num_parameters());
  const double per_rank = std::ceil(static_cast<double>(shape.num_params) / world_size);
  if (settings.zero_stage >= 1) {
    const bool pinned =
        config.active("zero.offload_optimizer.pin_memory") && config.get_bool("zero.offload_optimizer.pin_memory");
    const double bytes_per_param =
        4.0 + shape.optimizer_bytes_per_param + (settings.zero_stage >= 3 && !pinned ? 4 : 0);
    facts.optimizer_storage_bytes = static_cast<uint64_t>(bytes_per_param * per_rank * local_ranks);
  }
  if (settings.zero_stage >= 3) {
    const double elements = std::max(0.0, per_rank - static_cast<double>(settings.params_max_in_cpu));
    facts.params_storage_bytes = static_cast<uint64_t>(shape.compute_bytes * elements * local_ranks);
  }
  return facts;
}

void check_plugins(const JobSetup& job, const TrainSettings& settings, int world_size, int local_ranks) {
  check_plugin_configs(job, config_check_facts(*job.config, settings, world_size, local_ranks));
}

}  // namespace zhost::engine
