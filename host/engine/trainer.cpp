// host/engine/trainer.cpp: forward block by block, backward with hooks, the step, and the step loop (Note [Step
// observers]).
#include "host/engine/trainer.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "host/core/error.hpp"
#include "host/core/text.hpp"
#include "host/engine/activation_checkpoints.hpp"
#include "host/engine/checkpointing.hpp"
#include "host/engine/device.hpp"
#include "host/engine/observers/observers.hpp"
#include "host/engine/preflight.hpp"
#include "host/engine/random_ltd.hpp"
#include "host/engine/storage_swap.hpp"
#include "host/model/hf_layout.hpp"
#include "host/services/host_services.hpp"
#include "host/services/param_store.hpp"
#include "host/telemetry/memory_timeline.hpp"
#include "host/telemetry/model_states.hpp"
#include "host/telemetry/peak_flops.hpp"
#include "host/telemetry/trace.hpp"
#include "zhost/collective.h"
#include "zhost/kit/dlpack_views.hpp"
#include "zhost/kit/optimizer.hpp"
#include "zhost/kit/state_io.hpp"
#include "zhost/partition.h"

#if ZHOST_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace zhost::engine {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

at::ScalarType compute_dtype(Precision precision) {
  switch (precision) {
    case Precision::kBf16:
      return at::kBFloat16;
    case Precision::kFp16:
      return at::kHalf;
    default:
      return at::kFloat;
  }
}

// splitmix64's finaliser: a well-mixed 64-bit hash of x.
uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A DLTensor with a parameter's shape, dtype and device but no data (a parameter built without storage).
DLTensor dl_shape_only(const at::Tensor& tensor) {
  DLTensor view{};
  view.data = nullptr;
  view.device = kit::dl_device(tensor.device());
  view.ndim = static_cast<int32_t>(tensor.dim());
  view.dtype = kit::dl_dtype(tensor.scalar_type());
  view.shape = const_cast<int64_t*>(tensor.sizes().data());
  view.strides = const_cast<int64_t*>(tensor.strides().data());
  return view;
}

// The trace's memory counter: the categories in MB (counters sum in Perfetto's stacked view).
std::string memory_counter_json(const MemoryCategories& categories) {
  nlohmann::json values = nlohmann::json::object();
  for (const auto& [name, bytes] : categories)
    if (name != "peak_rss") values[name + "_MB"] = bytes / 1048576.0;
  return values.dump();
}

// The partition hooks' args (zhost/partition.h), built on the stack for each call.
using BlockHook = zhost_status* (*)(zhost_plugin_instance*, const zhost_block_args*);
zhost_status* block_hook(BlockHook hook, zhost_plugin_instance* instance, int32_t block) {
  zhost_block_args args{};
  args.struct_size = sizeof(args);
  args.block = block;
  return hook(instance, &args);
}
zhost_status* grad_ready(const zhost_partition_api& api, zhost_plugin_instance* instance, uint32_t id,
                         const DLTensor* grad) {
  zhost_grad_ready_args args{};
  args.struct_size = sizeof(args);
  args.param_id = id;
  args.grad = grad;
  return api.grad_ready(instance, &args);
}

}  // namespace

struct Trainer::Impl {
  const TrainSettings& settings;
  comm::Comm& world;
  const PluginInstance& partition;
  const zhost_partition_api& api;
  RunDirectory& run_dir;
  at::Device device = at::kCPU;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<data::DataLoader> loader;
  std::unique_ptr<optim::LrSchedule> schedule;
  optim::LossScaler scaler = optim::LossScaler::none();
  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accumulators;  // keep the hooked nodes alive
  std::vector<std::vector<int32_t>> blocks_using_param;
  std::vector<int32_t> pending_grads_per_block;
  std::vector<uint8_t> grad_reported;  // per parameter: grad_ready ran in this micro-batch
  std::exception_ptr hook_error;  // first failure inside an autograd hook (its exit code kept); raised after backward
  bool partition_takes_grads = false;  // ZHOST_PLUGIN_FLAG_TAKES_GRADIENTS: drop .grad after grad_ready
  HostServices& services;
  // ZHOST_PLUGIN_FLAG_PARTITIONS_PARAMETERS: the model is built without storage and the plugin
  // materialises parameters through this store.
  std::unique_ptr<ParamStore> param_store;
  // activation_checkpointing.enabled: the checkpointed blocks and their inputs (Note [Checkpointed block inputs])
  std::unique_ptr<ActivationCheckpoints> activation_checkpoints;
  TraceWriter* trace = nullptr;                            // Note [Trace file]; null when run.trace is off
  StorageSwaps* swaps = nullptr;                           // Note [Storage swap]; null: none
  const PluginInstance* transform = nullptr;               // Note [Collective transforms]; null: none
  std::vector<std::string> forward_names, backward_names;  // "forward block 3": trace event names
  int32_t backward_block = -1;  // trace: the block whose backward runs since backward_block_start
  uint64_t backward_block_start = 0;
  double activation_bytes = 0;  // the step's largest forward allocation (Note [Memory categories])
  int64_t current_step = 0;     // the step being trained (0 before the first)
  bool log_memory = false;      // memory_breakdown and this step is printed (see_memory_usage)
  std::unique_ptr<Checkpointer> checkpointer;
  ProfiledStep* profiled = nullptr;  // the flops profiler's step in progress: block timings go here
  TrainingPosition start;            // where training starts: step 0, or the resumed checkpoint's position
  TrainingPosition position;         // where training stands: after the last step run
  StepRates rates;                   // throughput of a record (peak_tflops: the job's, all ranks)

  Impl(const TrainSettings& s, comm::Comm& w, const PluginInstance& p, RunDirectory& r, HostServices& h, TraceWriter* t)
      : settings(s), world(w), partition(p), api(*p.plugin->api->partition), run_dir(r), services(h), trace(t) {}

  uint64_t plugin_flags() const { return partition.plugin->info.flags; }

  // A partition call outside autograd: failure is thrown at once.
  void call(zhost_status* status, const char* hook) {
    HostServices::throw_if_error(status, fmt::format("partition plugin '{}' {}", partition.plugin->info.name, hook));
  }
  // A partition call inside an autograd hook: failure is remembered and raised after backward, so that
  // the error keeps its own words instead of autograd's wrapping.
  void call_in_hook(zhost_status* status, const char* hook) {
    if (!status) return;
    if (!hook_error) {
      try {
        call(status, hook);
      } catch (const Error&) {
        hook_error = std::current_exception();
      }
    } else {
      delete_status(status);
    }
  }
  static void delete_status(zhost_status* status) {
    try {
      HostServices::throw_if_error(status, "");
    } catch (const Error&) {
    }
  }

  // Once per job, on rank 0 only (it reads the folder's config.json again): what an HF folder asks that the model
  // does not do.
  void warn_about_unapplied_hf_settings() const {
    const std::vector<std::string> unapplied = model::unapplied_hf_settings(settings.model);
    if (unapplied.empty()) return;
    spdlog::warn(
        "{}/config.json asks for dropout ({}), which zhost's models do not apply: this job trains without it, so "
        "its losses differ from HF Trainer's with dropout; write 0.0 there to train as asked",
        settings.model.path, text::join(unapplied, ", "));
  }

  void build() {
    device = training_device(settings);
    check_precision_supported(settings.precision, device);
    const bool partitions_params = (plugin_flags() & ZHOST_PLUGIN_FLAG_PARTITIONS_PARAMETERS) != 0;
    if (partitions_params && !api.gather_param)
      fail(
          "partition plugin '{}' declares ZHOST_PLUGIN_FLAG_PARTITIONS_PARAMETERS but has no gather_param: fix the "
          "plugin",
          partition.plugin->info.name);
    // Partitioned parameters: built without storage (zero.Init); the plugin fills its shards itself.
    model = model::make_model(settings.model,
                              model::Placement{device, compute_dtype(settings.precision), !partitions_params});
    if (partitions_params) param_store = std::make_unique<ParamStore>(*model, services);
    if (world.rank() == 0) warn_about_unapplied_hf_settings();
    check_random_ltd();
    loader = std::make_unique<data::DataLoader>(settings.data);
    schedule = optim::make_schedule(settings.schedule, settings.optimizer.lr);
    if (settings.precision == Precision::kFp16) scaler = optim::LossScaler(settings.loss_scale);
    check_registry_agrees_across_ranks();
    partition_takes_grads = (plugin_flags() & ZHOST_PLUGIN_FLAG_TAKES_GRADIENTS) != 0;
    setup_partition();
    make_checkpointer();
    rates = {settings.batch.train_batch_size, settings.model.seq_len, model->flops_per_token(), job_peak_tflops()};
    if (!settings.checkpoint.resume.empty()) resume();
    if (settings.activation_checkpointing.enabled)
      activation_checkpoints = std::make_unique<ActivationCheckpoints>(settings.activation_checkpointing, *model,
                                                                       settings.batch.micro_batch_per_gpu, device,
                                                                       compute_dtype(settings.precision), services);
    report_model_states(false);
    install_grad_hooks();
    for (size_t b = 0; b < model->num_blocks(); ++b) {
      forward_names.push_back(fmt::format("forward block {}", b));
      backward_names.push_back(fmt::format("backward block {}", b));
    }
  }

  // Note [Model FLOPs utilization] (peak_flops.hpp): run.peak_tflops, or every rank's measured rate summed.
  double job_peak_tflops() {
    if (settings.peak_tflops > 0) return settings.peak_tflops;
    const c10::ScalarType dtype = device.is_cpu() ? at::kFloat : compute_dtype(settings.precision);
    world.barrier();  // every rank measures at the same time, none still setting up its partition
    const PeakMeasurement measured = measure_rank_tflops(device, dtype);
    at::Tensor rate = at::tensor({measured.tflops}, at::kDouble);
    world.all_reduce(rate);
    const double peak = rate.item<double>();
    if (world.rank() == 0)
      spdlog::info(
          "MFU is against {:.4g} TFLOP/s, the sum of the {} rank(s)' fastest {}x{} {} matmul measured at start "
          "(rank 0: {:.4g} TFLOP/s on {} thread(s)); set run.peak_tflops to use another peak",
          peak, world.world_size(), measured.size, measured.size, c10::toString(dtype), measured.tflops,
          measured.threads);
    return peak;
  }

  // With partitioned parameters: every parameter block b reads must have storage when it runs.
  void check_materialized(int32_t block, const char* phase) const {
    if (!param_store) return;
    for (size_t id : model->params_used_by_block()[static_cast<size_t>(block)])
      if (!param_store->has_storage(id))
        fail(
            "partition plugin '{}' left parameter '{}' without storage at the {} of block {}: a plugin that "
            "partitions parameters materialises every parameter a block reads in pre_forward and pre_backward",
            partition.plugin->info.name, model->parameters()[id].name, phase, block);
  }

  // Which high-water mark of the materialised parameter storage is the gather window.
  enum class Window { kNow, kStep, kRun };

  // This rank's model-state bytes: the partition plugin's report plus what the host holds for it. The
  // gather window is the parameter storage materialised now, the most at once in this step, or in the run.
  ModelStateBytes measure_model_states(Window window) {
    ModelStateBytes measured;
    if (api.memory) {
      zhost_model_state_bytes reported{};
      reported.struct_size = sizeof(reported);
      call(api.memory(partition.instance, &reported), "memory");
      measured.params = static_cast<double>(reported.params);
      measured.grads = static_cast<double>(reported.grads);
      measured.master = static_cast<double>(reported.master);
      measured.optimizer = static_cast<double>(reported.optimizer);
      measured.buffers = static_cast<double>(reported.buffers);
      measured.offloaded = static_cast<double>(reported.offloaded);
    }
    const zhost_collective_api* transform_api = transform ? transform->plugin->api->collective : nullptr;
    if (transform_api && transform_api->memory) {
      zhost_model_state_bytes reported{};
      reported.struct_size = sizeof(reported);
      HostServices::throw_if_error(transform_api->memory(transform->instance, &reported),
                                   fmt::format("collective transform '{}' memory", transform->plugin->info.name));
      measured.transform_params = static_cast<double>(reported.params);
      measured.transform_grads = static_cast<double>(reported.grads);
      measured.buffers += static_cast<double>(reported.buffers);
    }
    if (param_store) {
      const uint64_t bytes = window == Window::kRun    ? param_store->peak_bytes()
                             : window == Window::kStep ? param_store->step_peak_bytes()
                                                       : param_store->live_bytes();
      measured.gather_window = static_cast<double>(bytes);
    } else {
      double param_bytes = 0;
      for (const auto& p : model->parameters()) param_bytes += static_cast<double>(p.tensor.nbytes());
      measured.params += param_bytes;
      if (!partition_takes_grads) measured.grads += param_bytes;  // autograd's .grad: same size
    }
    return measured;
  }

  // From the first delayed step on (Note [Delayed parameter update]), the tier's step may be storing into its
  // storing tier while this thread trains: that tier is then not called, and its last answer is used.
  bool tier_step_in_flight() const {
    return settings.delayed_update_from > 0 && current_step >= settings.delayed_update_from;
  }

  // The memory categories (Note [Memory categories]) now, with this step's activation bytes.
  MemoryCategories memory_now() {
    // The contiguous checkpoint buffer on the device was allocated before any forward: activations too.
    const double checkpoint_device = activation_checkpoints ? activation_checkpoints->device_bytes() : 0;
    const double checkpoint_host = activation_checkpoints ? activation_checkpoints->host_bytes() : 0;
    return memory_categories(measure_model_states(current_step > 0 ? Window::kStep : Window::kNow),
                             static_cast<double>(services.live_buffer_bytes(ZHOST_MEMORY_PINNED)),
                             activation_bytes + checkpoint_device, checkpoint_host,
                             static_cast<double>(services.tier_storage_bytes(tier_step_in_flight())));
  }
  void see_memory(const char* phase) {
    if (log_memory) spdlog::info("{}", see_memory_usage(phase, memory_now()));
  }

  // Logs this rank's model-state bytes against ZeRO's formula; rank 0 writes RUN_DIR/model_states.json.
  // With partitioned parameters the parameters' own storage is the gather window, reported apart: at the
  // start what setup() left materialised, at the end (`after_training`) its peak over the run.
  void report_model_states(bool after_training) {
    const ModelStateBytes measured = measure_model_states(after_training ? Window::kRun : Window::kNow);
    const ModelStateShape shape = model_state_shape(settings, world.world_size(), model->num_parameters());
    spdlog::info("{}", describe_model_states(measured, shape));
    if (world.rank() == 0) run_dir.write_file("model_states.json", model_states_json(measured, shape) + "\n");
  }

  // Identical parameter ids, names, shapes and dtypes on every rank are part of the partition contract.
  void check_registry_agrees_across_ranks() {
    XXH64_state_t* state = XXH64_createState();
    XXH64_reset(state, 0);
    for (const auto& p : model->parameters()) {
      XXH64_update(state, p.name.data(), p.name.size());
      XXH64_update(state, p.tensor.sizes().data(), p.tensor.dim() * sizeof(int64_t));
    }
    uint64_t mine = XXH64_digest(state);
    XXH64_freeState(state);
    at::Tensor all = at::zeros({world.world_size()}, at::kLong);
    at::Tensor own = at::tensor({static_cast<int64_t>(mine)}, at::kLong);
    world.all_gather(own, all);
    for (int r = 0; r < world.world_size(); ++r)
      if (all[r].item<int64_t>() != static_cast<int64_t>(mine))
        fail_usage(
            "rank {} built a different model than rank {} (parameter names or shapes differ): every rank must "
            "run the same config",
            r, world.rank());
  }

  void setup_partition() {
    const auto& params = model->parameters();
    std::vector<zhost_param_info> infos(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      infos[i].struct_size = sizeof(zhost_param_info);
      infos[i].id = static_cast<uint32_t>(i);
      infos[i].name = params[i].name.c_str();
      infos[i].block = params[i].block;
      infos[i].tensor = param_store ? dl_shape_only(params[i].tensor) : kit::dl_view(params[i].tensor);
    }
    const auto& used = model->params_used_by_block();
    std::vector<uint32_t> ids;
    std::vector<size_t> offsets{0};
    blocks_using_param.assign(params.size(), {});
    for (size_t b = 0; b < used.size(); ++b) {
      for (size_t id : used[b]) {
        ids.push_back(static_cast<uint32_t>(id));
        blocks_using_param[id].push_back(static_cast<int32_t>(b));
      }
      offsets.push_back(ids.size());
    }
    zhost_partition_setup setup{};
    setup.struct_size = sizeof(setup);
    setup.params = infos.data();
    setup.num_params = infos.size();
    setup.num_blocks = static_cast<int32_t>(used.size());
    setup.block_param_ids = ids.data();
    setup.block_param_offsets = offsets.data();
    setup.optimizer = kit::optimizer_desc_to_abi(settings.optimizer);
    setup.master_dtype = kit::dl_dtype(at::kFloat);
    setup.gradient_accumulation_steps = static_cast<int32_t>(settings.batch.gradient_accumulation_steps);
    call(api.setup(partition.instance, &setup), "setup");
  }

  // What a checkpoint holds of this job (docs/checkpoints.md): the parameters, the states of its optimizer, and
  // the job's identity, checked on resume.
  void make_checkpointer() {
    std::vector<checkpoint::ParamShape> shapes;
    for (const auto& p : model->parameters()) shapes.push_back({p.name, p.tensor.sizes().vec()});
    std::vector<std::string> states = kit::checkpoint_state_names(settings.optimizer);
    const nlohmann::json job = {{"model", settings.model.type},
                                {"model_spec", model::model_spec_record(model->spec())},
                                {"optimizer", std::string(kit::optimizer_kind_name(settings.optimizer.kind))},
                                {"precision", precision_name(settings.precision)},
                                {"zero_stage", settings.zero_stage},
                                {"partition_plugin", partition.plugin->info.name},
                                {"train_batch_size", settings.batch.train_batch_size},
                                {"seed", settings.seed},
                                {"world_size", world.world_size()}};
    checkpointer = std::make_unique<Checkpointer>(settings.checkpoint, world, partition, std::move(shapes),
                                                  std::move(states), job);
  }

  void resume() {
    start = checkpointer->load();
    // The loss scaler carries over between fp16 jobs; a job in another precision starts its own.
    if (settings.precision == Precision::kFp16 && start.precision == precision_name(Precision::kFp16))
      scaler.restore(start.scaler);
    if (start.step >= settings.steps && world.rank() == 0)
      spdlog::warn("the checkpoint is at step {} and the job ends at step {} (steps): nothing left to train",
                   start.step, settings.steps);
  }

  // Runs after autograd accumulated a parameter's gradient into .grad (a post hook on AccumulateGrad).
  struct GradReadyHook : torch::autograd::FunctionPostHook {
    GradReadyHook(Impl* impl, size_t id) : impl(impl), id(id) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                              const torch::autograd::variable_list&) override {
      impl->on_grad_ready(id);
      return outputs;
    }
    Impl* impl;
    size_t id;
  };

  void install_grad_hooks() {
    const auto& params = model->parameters();
    for (size_t id = 0; id < params.size(); ++id) {
      auto accumulator = torch::autograd::impl::grad_accumulator(params[id].tensor);
      accumulator->add_post_hook(std::make_unique<GradReadyHook>(this, id));
      grad_accumulators.push_back(std::move(accumulator));
    }
  }

  void on_grad_ready(size_t id) {
    if (hook_error) return;
    grad_reported[id] = 1;
    const at::Tensor& grad = model->parameters()[id].tensor.grad();
    DLTensor view = kit::dl_view(grad);
    {
      const TraceScope span(trace, "hook", "grad_ready", "param", static_cast<int64_t>(id));
      call_in_hook(grad_ready(api, partition.instance, static_cast<uint32_t>(id), &view), "grad_ready");
    }
    if (partition_takes_grads) model->parameters()[id].tensor.mutable_grad() = at::Tensor();
    for (int32_t block : blocks_using_param[id])
      if (--pending_grads_per_block[block] == 0) {
        const TraceScope span(trace, "hook", "post_backward", "block", block);
        call_in_hook(block_hook(api.post_backward, partition.instance, block), "post_backward");
      }
  }

  // A parameter of a block that sat out this micro-batch (LayerDrop) produced no gradient in it, yet may hold
  // .grad accumulated in earlier ones: a partition that reduces at the boundary (stages 0 and 1) must still
  // be handed it. In id order, the same on every rank (the blocks skipped are the same on every rank).
  void report_accumulated_grads() {
    const auto& params = model->parameters();
    for (size_t id = 0; id < params.size() && !hook_error; ++id) {
      if (grad_reported[id] || !params[id].tensor.grad().defined()) continue;
      DLTensor view = kit::dl_view(params[id].tensor.grad());
      call_in_hook(grad_ready(api, partition.instance, static_cast<uint32_t>(id), &view), "grad_ready");
    }
  }

  void reset_pending_grads() {
    grad_reported.assign(model->parameters().size(), 0);
    const auto& used = model->params_used_by_block();
    pending_grads_per_block.resize(used.size());
    for (size_t b = 0; b < used.size(); ++b) pending_grads_per_block[b] = static_cast<int32_t>(used[b].size());
  }

  // LayerDrop: whether transformer block b sits out this micro-batch (see TrainSettings::layer_drop).
  bool dropped(int64_t step, int32_t micro_step, size_t b) const {
    if (settings.layer_drop <= 0 || b == 0 || b + 1 >= model->num_blocks()) return false;
    uint64_t key = settings.seed ^ 0x4C61796572447270ull;  // "LayerDrp"
    const uint64_t rank_part = settings.layer_drop_per_rank ? static_cast<uint64_t>(settings.rank) + 1 : 0;
    for (uint64_t part :
         {static_cast<uint64_t>(step), static_cast<uint64_t>(micro_step), static_cast<uint64_t>(b), rank_part})
      key = mix64(key ^ part);
    return static_cast<double>(key >> 11) * 0x1.0p-53 < settings.layer_drop;
  }

  // Note [Random-LTD]: what the config rules could not see before the model was built (an HF folder's layers and
  // positions); then the schedule once on rank 0.
  void check_random_ltd() const {
    const RandomLtdSpec& ltd = settings.random_ltd;
    if (!ltd.enabled()) return;
    check_random_ltd_model(ltd, *model);
    if (world.rank() == 0)
      spdlog::info(
          "random-LTD: layers {} run on a random {} of the {} tokens of each sample at step 1, rising to {} by step {} "
          "(multiples of {})",
          fmt::join(ltd.layers, ","), random_ltd_tokens(ltd, 1), settings.model.seq_len,
          std::min(ltd.max_tokens, settings.model.seq_len), random_ltd_last_ramp_step(ltd, settings.model.seq_len),
          ltd.tokens_per_increase);
  }

  // Training FLOPs per token of step `step`: the model's, less what random-LTD's layers skip (Note [Random-LTD]).
  double flops_per_token(int64_t step) const {
    const RandomLtdSpec& ltd = settings.random_ltd;
    if (!ltd.enabled()) return model->flops_per_token();
    const int64_t keep = random_ltd_tokens(ltd, step);
    double macs = 0;
    for (size_t b = 0; b < model->num_blocks(); ++b)
      macs += model->forward_macs_per_token(b, ltd.drops_tokens_in(b) ? keep : 0);
    return 6.0 * macs;
  }

  // Note [Random-LTD]: the tokens block b keeps in this micro-batch ([B, k] positions), or none (it runs whole).
  at::Tensor kept_tokens(int64_t step, int32_t micro_step, size_t b, const at::Tensor& x) const {
    const RandomLtdSpec& ltd = settings.random_ltd;
    if (!ltd.drops_tokens_in(b)) return {};
    const auto layer = static_cast<int64_t>(b) - 1;
    const int64_t keep = random_ltd_tokens(ltd, step);
    if (keep >= x.size(1)) return {};
    uint64_t key = settings.seed ^ 0x52616E644C54440Aull;  // "RandLTD\n"
    for (const uint64_t part : {static_cast<uint64_t>(step), static_cast<uint64_t>(micro_step),
                                static_cast<uint64_t>(layer), static_cast<uint64_t>(settings.rank)})
      key = mix64(key ^ part);
    return random_ltd_positions(key, x.size(0), x.size(1), keep);
  }

  at::Tensor forward(const at::Tensor& tokens, int64_t step, int32_t micro_step) {
    at::Tensor x = tokens;
    for (size_t b = 0; b < model->num_blocks(); ++b) {
      if (dropped(step, micro_step, b)) continue;  // the residual stream passes the block unchanged
      auto block = static_cast<int32_t>(b);
      const TraceScope block_span(trace, "forward", forward_names[b], "block", block);
      {
        const TraceScope span(trace, "hook", "pre_forward", "block", block);
        call(block_hook(api.pre_forward, partition.instance, block), "pre_forward");
      }
      check_materialized(block, "forward");
      const auto block_start = Clock::now();
      const auto run_block = [&](const at::Tensor& input) {
        return activation_checkpoints && activation_checkpoints->checkpointed(b)
                   ? activation_checkpoints->forward(b, input)
                   : model->forward_block(b, input);
      };
      const at::Tensor kept = kept_tokens(step, micro_step, b, x);
      x = kept.defined() ? run_on_kept_tokens(x, kept, run_block) : run_block(x);
      if (profiled) {
        sync_for_timing();
        profiled->block_forward_ms[b] += ms_since(block_start);
      }
      if (x.requires_grad())
        x.register_hook([this, block](const at::Tensor&) {
          if (trace || profiled) begin_backward_block(block);
          const TraceScope span(trace, "hook", "pre_backward", "block", block);
          if (!hook_error) call_in_hook(block_hook(api.pre_backward, partition.instance, block), "pre_backward");
          if (param_store) {  // without its parameters the block's backward cannot run: stop it here
            if (hook_error) std::rethrow_exception(hook_error);
            check_materialized(block, "backward");
          }
        });
      const TraceScope span(trace, "hook", "post_forward", "block", block);
      call(block_hook(api.post_forward, partition.instance, block), "post_forward");
    }
    return x;
  }

  // Trace and flops profiler: block b's backward starts when the gradient of its output is ready, and ends
  // when the next block's (b - 1) starts or backward returns (end_backward_block).
  void begin_backward_block(int32_t block) {
    end_backward_block();
    backward_block = block;
    backward_block_start = TraceWriter::now_ns();
  }
  void end_backward_block() {
    if (backward_block < 0) return;
    const uint64_t end = TraceWriter::now_ns();
    if (trace)
      trace->complete("backward", backward_names[static_cast<size_t>(backward_block)], backward_block_start, end,
                      fmt::format(R"({{"block": {}}})", backward_block));
    if (profiled)
      profiled->block_backward_ms[static_cast<size_t>(backward_block)] +=
          static_cast<double>(end - backward_block_start) / 1e6;
    backward_block = -1;
  }

  // One micro-batch's forward and backward; returns its (unscaled) loss.
  double micro_batch(int64_t step, int32_t micro_step, StepTiming& timing) {
    const int64_t gas = settings.batch.gradient_accumulation_steps;
    zhost_micro_batch_args args{sizeof(args), nullptr, step, micro_step, micro_step == gas - 1 ? 1 : 0};
    const TraceScope micro_span(trace, "step", "micro_batch", "micro_step", micro_step);
    {
      const TraceScope span(trace, "hook", "begin_micro_batch", "micro_step", micro_step);
      call(api.begin_micro_batch(partition.instance, &args), "begin_micro_batch");
    }
    data::Batch batch = loader->next(step - 1, micro_step);
    at::Tensor tokens = batch.tokens.to(device), targets = batch.targets.to(device);
    reset_pending_grads();

    see_memory("before forward");
    const double allocated_before = live_allocated_bytes(device.is_cuda());
    auto start = Clock::now();
    at::Tensor loss;
    {
      const TraceScope span(trace, "forward", "forward");
      loss = model->loss(forward(tokens, step, micro_step), targets);
      sync_for_timing();
    }
    timing.forward += ms_since(start);
    activation_bytes = std::max(activation_bytes, live_allocated_bytes(device.is_cuda()) - allocated_before);
    see_memory("after forward");

    start = Clock::now();
    {
      const TraceScope span(trace, "backward", "backward");
      // Note [Gradient pre-division]: DeepSpeed's prescale_gradients / gradient_predivide_factor divide each
      // rank's gradients by f before the sum. Dividing the loss by f divides every gradient by f before any
      // reduction, in every stage and with accumulation alike; step() is told loss_scale / f, so the
      // partition's one division of the sum (by world size * loss_scale) becomes DeepSpeed's f / world size.
      // For f a power of two every scaling is exact, and the run equals the one without pre-division bit for
      // bit, as DeepSpeed's fp32 sums would.
      loss.mul(scaler.scale() / (static_cast<double>(gas) * settings.gradient_predivide)).backward();
      if (activation_checkpoints) activation_checkpoints->end_micro_batch();
      if (trace || profiled) end_backward_block();
      if (settings.layer_drop > 0) report_accumulated_grads();
      if (hook_error) std::rethrow_exception(hook_error);
      sync_for_timing();
    }
    timing.backward += ms_since(start);

    start = Clock::now();
    {
      const TraceScope span(trace, "hook", "backward_end");
      const zhost_backward_end_args end_args{sizeof(end_args), nullptr, micro_step};
      call(api.backward_end(partition.instance, &end_args), "backward_end");
    }
    timing.reduction += ms_since(start);
    see_memory("after backward");
    ++timing.micro_batches;
    return loss.item<double>();
  }

  // One optimizer step: the micro-batches, then the partition's step. Returns the local mean loss.
  StepRecord train_step(int64_t step, int64_t& applied, StepTiming& timing) {
    const TraceScope step_span(trace, "step", "step", "step", step);
    world.begin_step(step);
    current_step = step;
    if (param_store) param_store->begin_step();
    activation_bytes = 0;
    double loss_sum = 0;
    const int64_t gas = settings.batch.gradient_accumulation_steps;
    for (int32_t micro = 0; micro < gas; ++micro) loss_sum += micro_batch(step, micro, timing);

    zhost_step_args args{};
    args.struct_size = sizeof(args);
    args.step = step;
    args.applied_steps = applied;
    args.lr = schedule->lr_for_step(applied + 1);
    const auto betas = schedule->betas_for_step(applied + 1);  // a momentum schedule's, else the optimizer's
    args.beta1 = betas ? betas->beta1 : settings.optimizer.beta1;
    args.beta2 = betas ? betas->beta2 : settings.optimizer.beta2;
    args.loss_scale = scaler.scale() / settings.gradient_predivide;  // what the gradients carry
    args.clip_norm = settings.gradient_clipping;
    // The plugin completes deferred work on the last step and before a storage swap (docs/abi.md 8).
    const zhost_ext_header last_step{sizeof(zhost_ext_header), ZHOST_EXT_LAST_STEP, nullptr};
    const zhost_ext_header drain{sizeof(zhost_ext_header), ZHOST_EXT_DRAIN, nullptr};
    if (step == settings.steps)
      args.ext = &last_step;
    else if (swaps && swaps->drains_after(step))
      args.ext = &drain;
    auto start = Clock::now();
    {
      const TraceScope span(trace, "optimizer", "optimizer_step", "step", step);
      call(api.step(partition.instance, &args), "step");
      sync_for_timing();
    }
    timing.step += ms_since(start);
    ++timing.steps;
    see_memory("after step");

    StepRecord record;
    record.step = step;
    record.lr = args.lr;
    record.loss_scale = scaler.scale();
    record.grad_norm = args.grad_norm;
    record.skipped = scaler.update(args.overflow != 0);
    if (!args.overflow) ++applied;
    if (record.skipped)
      spdlog::warn("step {} skipped: gradient overflow (inf/nan){}", step,
                   scaler.dynamic() ? fmt::format("; loss scale now {:g}", scaler.scale()) : "");
    record.applied_steps = applied;
    record.loss = loss_sum / static_cast<double>(gas);
    for (const auto& p : model->parameters()) p.tensor.mutable_grad() = at::Tensor();
    // The whole job's collectives in the step: the world's and every sub-group's (plugins' new_group).
    const comm::KindCounters counters = world.end_step().total();
    record.comm_bytes_sent = counters.bytes_sent;
    record.comm_bytes_received = counters.bytes_received;
    record.comm_inter_node_bytes_sent = counters.bytes_sent_inter_node;
    record.comm_inter_node_bytes_received = counters.bytes_received_inter_node;
    record.memory_bytes = memory_now();
    if (trace) trace->counter("memory", TraceWriter::now_ns(), memory_counter_json(record.memory_bytes));
    return record;
  }

  // One step of the loop (Note [Step observers]): this rank's optimizer step, then one all-reduce of its loss
  // that carries what the observers ask at this boundary. Returns the step as every rank saw it.
  StepReport run_step(const StepPlan& plan, const StepObservers& observers) {
    const int64_t step = plan.step;
    log_memory = settings.memory_breakdown && plan.printed && world.rank() == 0;
    const auto step_start = Clock::now();
    StepReport report;
    StepTiming& timing = report.timing;
    profiled = plan.profiled;
    StepRecord record = train_step(step, position.applied_steps, timing);
    if (profiled) {  // the timing's sums are this step's alone
      const int64_t gas = settings.batch.gradient_accumulation_steps;
      profiled->forward_ms = timing.forward;
      profiled->backward_ms = timing.backward;
      profiled->step_ms = timing.step;
      profiled->iteration_ms = ms_since(step_start);
      profiled->samples = settings.batch.micro_batch_per_gpu * gas;
      profiled->tokens = profiled->samples * settings.model.seq_len;
      profiled = nullptr;
    }
    // Every step's loss is the mean over ranks (one small all-reduce, outside the step's comm counters); it
    // carries the ranks' stop requests too, and rank 0's waiting control request (Note [Control channel]).
    BoundaryRequests requests;
    for (const auto& observer : observers) observer->ask(requests);
    at::Tensor total = at::tensor(
        {record.loss, requests.stop ? 1.0 : 0.0, static_cast<double>(requests.control_request)}, at::kDouble);
    world.all_reduce(total);
    record.loss = total[0].item<double>() / world.world_size();
    report.stopping = total[1].item<double>() > 0;
    report.control_request = static_cast<int64_t>(total[2].item<double>());
    const double step_seconds = std::chrono::duration<double>(Clock::now() - step_start).count();

    // The step's own record (metrics.jsonl, steps.rankN.jsonl): its own throughput and timers.
    rates.flops_per_token = flops_per_token(record.step);
    rates.fill(record, step_seconds, 1);
    timing.averages_into(record);
    for (const auto& [name, total_span] : services.take_span_totals())
      record.plugin_ms.emplace_back(name, static_cast<double>(total_span.ns) / 1e6);
    record.memory = current_memory();
    record.printed = plan.printed;
    if (swaps) {
      record.optimizer_storage = swaps->optimizer_storage();
      record.param_storage = swaps->param_storage();
    }
    position.step = step;
    if (record.skipped) ++position.skipped_steps;
    position.scaler = scaler.state();
    position.precision = precision_name(settings.precision);
    report.record = std::move(record);
    report.position = position;
    return report;
  }

  // What the observers of this run are built from (observers.hpp).
  ObserverContext observer_context(ProgressBar& progress) {
    std::function<void()> final_model_states;
    if (param_store) final_model_states = [this] { report_model_states(true); };
    return {settings, world, run_dir, trace, progress, *checkpointer, swaps, *model, rates, final_model_states};
  }

  void sync_for_timing() const {
#if ZHOST_WITH_CUDA
    if ((settings.wall_clock_breakdown || profiled) && device.is_cuda()) c10::cuda::device_synchronize();
#endif
  }
};

Trainer::Trainer(const TrainSettings& settings, comm::Comm& world, const PluginInstance& partition,
                 RunDirectory& run_dir, HostServices& services, TraceWriter* trace)
    : impl_(std::make_unique<Impl>(settings, world, partition, run_dir, services, trace)), services_(services) {
  impl_->build();
}

Trainer::~Trainer() = default;

int64_t Trainer::num_parameters() const { return impl_->model->num_parameters(); }

void Trainer::set_storage_swaps(StorageSwaps* swaps) { impl_->swaps = swaps; }
void Trainer::set_transform(const PluginInstance* transform) { impl_->transform = transform; }

// Note [Step observers]: the loop runs steps; what a run does around them is its observers'.
TrainResult Trainer::run() {
  Impl& t = *impl_;
  const TrainSettings& s = t.settings;
  ProgressBar progress(t.world.rank() == 0 ? s.steps : 0);
  const StepObservers observers = make_step_observers(t.observer_context(progress));
  t.position = t.start;
  for (const auto& observer : observers) observer->on_start(t.start);
  services_.tier_storage_bytes();  // the storing tiers' answers, for the steps that must not call them
  TrainResult result;
  for (int64_t step = t.start.step + 1; step <= s.steps; ++step) {
    if (services_.abort_requested()) throw Error(fmt::format("stopped at step {}: {}", step, services_.abort_reason()));
    StepPlan plan{step, step % s.steps_per_print == 0 || step == s.steps};
    for (const auto& observer : observers) observer->before_step(plan);
    const StepReport report = t.run_step(plan, observers);
    for (const auto& observer : observers) observer->after_step(report);
    if (report.stopping) {
      result.stopped_early = true;
      break;
    }
  }
  result.applied_steps = t.position.applied_steps;
  result.skipped_steps = t.position.skipped_steps;
  for (auto observer = observers.rbegin(); observer != observers.rend(); ++observer) (*observer)->on_finish(result);
  result.final_loss = result.records.empty() ? 0 : result.records.back().loss;
  return result;
}

void Trainer::save_weights(const std::string& dir) const {
  const Impl& t = *impl_;
  const bool gathered = t.param_store != nullptr;  // partitioned parameters: every rank helps gather
  if (t.world.rank() != 0 && !gathered) return;
  namespace fs = std::filesystem;
  std::ofstream data;
  if (t.world.rank() == 0) data.open(fs::path(dir) / "weights.bin", std::ios::binary | std::ios::trunc);
  nlohmann::json index = nlohmann::json::array();
  int64_t offset = 0;
  const auto& params = t.model->parameters();
  // A Hugging Face model is also written back as a Hugging Face folder, RUN_DIR/hf (rank 0 holds it whole).
  const bool hf = t.settings.model.type == "hf";
  std::vector<std::string> hf_names;
  std::vector<at::Tensor> hf_values;
  for (size_t id = 0; id < params.size(); ++id) {
    const auto& p = params[id];
    at::Tensor values;
    if (gathered) {
      values = at::empty(p.tensor.sizes(), at::TensorOptions().dtype(at::kFloat));
      DLTensor out = kit::dl_view(values);
      const zhost_gather_param_args args{sizeof(args), nullptr, static_cast<uint32_t>(id), &out};
      HostServices::throw_if_error(t.api.gather_param(t.partition.instance, &args),
                                   fmt::format("partition plugin '{}' gather_param", t.partition.plugin->info.name));
      if (t.world.rank() != 0) continue;
    } else {
      values = p.tensor.detach().to(at::kCPU, at::kFloat).contiguous();
    }
    data.write(static_cast<const char*>(values.data_ptr()), values.numel() * sizeof(float));
    index.push_back(
        {{"name", p.name}, {"shape", p.tensor.sizes().vec()}, {"offset", offset}, {"numel", values.numel()}});
    offset += values.numel();
    if (hf) {
      hf_names.push_back(p.name);
      hf_values.push_back(values);
    }
  }
  if (t.world.rank() != 0) return;
  data.flush();
  if (!data) fail("cannot write {}/weights.bin (disk full?)", dir);
  std::ofstream(fs::path(dir) / "weights.json") << index.dump(1) << "\n";
  if (hf) model::export_hf(t.settings.model, hf_names, hf_values, (fs::path(dir) / "hf").string());
}

}  // namespace zhost::engine
