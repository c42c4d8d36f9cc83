// host/engine/settings.cpp: config keys -> TrainSettings.
#include "host/engine/settings.hpp"

#include "host/config/schema/host_rules.hpp"
#include "host/optim/optimizer_type.hpp"

namespace zhost::engine {

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "?";
}

namespace {

optim::ScheduleSpec read_schedule(const config::ResolvedConfig& c, int64_t steps) {
  const std::string& type = c.get_string("scheduler.type");
  optim::ScheduleSpec spec = optim::default_schedule_spec(type);
  auto total = [&] {
    return c.get_int("scheduler.total_num_steps") > 0 ? c.get_int("scheduler.total_num_steps") : steps;
  };
  auto warmup_type = [&] { return optim::parse_warmup_type(c.get_string("scheduler.warmup_type")); };
  if (auto* warmup = std::get_if<optim::WarmupLrSpec>(&spec)) {
    warmup->warmup_min_lr = c.get_float("scheduler.warmup_min_lr");
    if (c.has("scheduler.warmup_max_lr")) warmup->warmup_max_lr = c.get_float("scheduler.warmup_max_lr");
    warmup->warmup_num_steps = c.get_int("scheduler.warmup_num_steps");
    warmup->warmup_type = warmup_type();
  } else if (auto* decay = std::get_if<optim::WarmupDecayLrSpec>(&spec)) {
    decay->total_num_steps = total();
    decay->warmup_min_lr = c.get_float("scheduler.warmup_min_lr");
    // Unset: optimizer.lr, as for WarmupLR (the key's documented default).
    decay->warmup_max_lr =
        c.has("scheduler.warmup_max_lr") ? c.get_float("scheduler.warmup_max_lr") : c.get_float("optimizer.lr");
    decay->warmup_num_steps = c.get_int("scheduler.warmup_num_steps");
    decay->warmup_type = warmup_type();
  } else if (auto* cosine = std::get_if<optim::WarmupCosineLrSpec>(&spec)) {
    cosine->total_num_steps = total();
    cosine->warmup_min_ratio = c.get_float("scheduler.warmup_min_ratio");
    cosine->warmup_num_steps = c.get_int("scheduler.warmup_num_steps");
    cosine->cos_min_ratio = c.get_float("scheduler.cos_min_ratio");
    cosine->warmup_type = warmup_type();
  } else if (auto* cycle = std::get_if<optim::OneCycleSpec>(&spec)) {
    cycle->cycle_min_lr = c.get_float("scheduler.cycle_min_lr");
    cycle->cycle_max_lr = c.get_float("scheduler.cycle_max_lr");
    cycle->cycle_first_step_size = c.get_int("scheduler.cycle_first_step_size");
    if (c.get_int("scheduler.cycle_second_step_size") > 0)
      cycle->cycle_second_step_size = c.get_int("scheduler.cycle_second_step_size");
    cycle->cycle_first_stair_count = c.get_int("scheduler.cycle_first_stair_count");
    cycle->cycle_second_stair_count = c.get_int("scheduler.cycle_second_stair_count");
    cycle->decay_step_size = c.get_int("scheduler.decay_step_size");
    cycle->decay_lr_rate = c.get_float("scheduler.decay_lr_rate");
    // DeepSpeed cycles only optimizers with betas (Note [OneCycle's momentum]).
    if (c.get_bool("scheduler.cycle_momentum") && c.get_string("optimizer.type") != "SGD") {
      cycle->momentum =
          optim::OneCycleMomentum{c.get_float("scheduler.cycle_min_mom"), c.get_float("scheduler.cycle_max_mom"),
                                  c.get_float("scheduler.decay_mom_rate")};
    }
  } else if (auto* range = std::get_if<optim::LrRangeTestSpec>(&spec)) {
    range->lr_range_test_min_lr = c.get_float("scheduler.lr_range_test_min_lr");
    range->lr_range_test_step_size = c.get_int("scheduler.lr_range_test_step_size");
    range->lr_range_test_step_rate = c.get_float("scheduler.lr_range_test_step_rate");
    range->lr_range_test_staircase = c.get_bool("scheduler.lr_range_test_staircase");
  }
  return spec;
}

}  // namespace

TrainSettings read_settings(const config::ResolvedConfig& c, int world_size, int rank, int local_rank,
                            int local_world_size) {
  TrainSettings s;
  s.local_rank = local_rank;
  s.local_world_size = local_world_size;
  s.batch = config::resolve_batch_sizes(c.get_optional_int("train_batch_size"),
                                        c.get_optional_int("train_micro_batch_size_per_gpu"),
                                        c.get_optional_int("gradient_accumulation_steps"), world_size);
  s.steps = c.get_int("steps");
  s.seed = static_cast<uint64_t>(c.get_int("seed"));
  s.steps_per_print = c.get_int("steps_per_print");
  s.gradient_clipping = c.get_float("gradient_clipping");
  s.gradient_predivide =
      c.get_bool("prescale_gradients") ? static_cast<double>(world_size) : c.get_float("gradient_predivide_factor");
  s.wall_clock_breakdown = c.get_bool("wall_clock_breakdown");
  s.memory_breakdown = c.get_bool("memory_breakdown");
  s.trace = c.get_bool("run.trace");
  s.comms_logger = c.get_bool("comms_logger.enabled");
  s.comms_logger_verbose = c.get_bool("comms_logger.verbose");
  s.activation_checkpointing.enabled = c.get_bool("activation_checkpointing.enabled");
  s.activation_checkpointing.cpu = c.get_bool("activation_checkpointing.cpu_checkpointing");
  s.activation_checkpointing.contiguous = c.get_bool("activation_checkpointing.contiguous_memory_optimization");
  s.activation_checkpointing.count = c.get_optional_int("activation_checkpointing.number_checkpoints").value_or(0);

  s.model.type = c.get_string("model.type");
  s.model.layers = c.get_int("model.layers");
  s.model.heads = c.get_int("model.heads");
  s.model.kv_heads = c.get_int("model.kv_heads");
  s.model.width = c.get_int("model.width");
  s.model.ffn_width = c.get_int("model.ffn_width");
  s.model.vocab = c.get_int("model.vocab");
  s.model.seq_len = c.get_int("model.seq_len");
  s.model.init_std = c.get_float("model.init_std");
  s.model.attention = c.get_string("model.attention") == "eager" ? model::Attention::kEager : model::Attention::kSdpa;
  s.model.seed = s.seed;
  s.model.path = c.get_string("model.path");
  // A Hugging Face model's dimensions (vocab for the data among them) come from its config.json.
  if (s.model.type == "hf") s.model = model::resolve_spec(s.model);
  s.layer_drop = c.get_float("model.layer_drop");
  s.layer_drop_per_rank = c.get_bool("debug.layer_drop_per_rank");
  for (const double layer : c.get_float_list("random_ltd.layers"))
    s.random_ltd.layers.push_back(static_cast<int64_t>(layer));
  s.random_ltd.min_tokens = c.get_int("random_ltd.min_tokens");
  s.random_ltd.max_tokens =
      c.get_int("random_ltd.max_tokens") == 0 ? s.model.seq_len : c.get_int("random_ltd.max_tokens");
  s.random_ltd.require_steps = c.get_int("random_ltd.require_steps");
  s.random_ltd.tokens_per_increase = c.get_int("random_ltd.tokens_per_increase");
  s.rank = rank;

  s.data.source = c.get_string("data.type");
  s.data.path = c.get_string("data.path");
  s.data.token_dtype = c.get_string("data.token_dtype");
  s.data.tokenizer = c.get_string("data.tokenizer");
  s.data.vocab = s.model.vocab;
  s.data.seq_len = s.model.seq_len;
  s.data.micro_batch = s.batch.micro_batch_per_gpu;
  s.data.world_size = world_size;
  s.data.rank = rank;
  s.data.seed = s.seed;

  s.optimizer = kit::OptimizerSpec::defaults(
      optim::parse_optimizer_kind(c.get_string("optimizer.type"), c.get_bool("optimizer.adam_w_mode")));
  s.optimizer.lr = c.get_float("optimizer.lr");
  // Unset betas keep the optimizer's own defaults (Lion: 0.9, 0.99; Adam kinds: 0.9, 0.999). Validation
  // (host/config/schema/host_rules.cpp) checked there are two, and that only the optimizers reading them get them.
  if (c.has("optimizer.betas")) {
    const auto& betas = c.get_float_list("optimizer.betas");
    s.optimizer.beta1 = betas[0];
    s.optimizer.beta2 = betas[1];
  }
  s.optimizer.eps = c.get_float("optimizer.eps");
  s.optimizer.bias_correction = c.get_bool("optimizer.bias_correction");
  s.optimizer.weight_decay = c.get_float("optimizer.weight_decay");
  s.optimizer.momentum = c.get_float("optimizer.momentum");
  s.optimizer.max_coeff = c.get_float("optimizer.max_coeff");
  s.optimizer.min_coeff = c.get_float("optimizer.min_coeff");
  optim::check_optimizer_spec(s.optimizer);
  s.schedule = read_schedule(c, s.steps);

  if (c.get_bool("bf16.enabled")) s.precision = Precision::kBf16;
  // Read by the CPU tier (active only with it; its rules refuse them elsewhere).
  s.half_master = (c.active("bf16.master_weights_and_grads") && c.get_bool("bf16.master_weights_and_grads")) ||
                  (c.active("fp16.master_weights_and_grads") && c.get_bool("fp16.master_weights_and_grads"));
  s.bf16_states = c.active("bf16.optimizer_states") && c.get_bool("bf16.optimizer_states");
  if (c.get_bool("fp16.enabled")) {
    s.precision = Precision::kFp16;
    s.loss_scale.loss_scale = c.get_float("fp16.loss_scale");
    s.loss_scale.initial_scale_power = static_cast<int>(c.get_int("fp16.initial_scale_power"));
    s.loss_scale.loss_scale_window = c.get_int("fp16.loss_scale_window");
    s.loss_scale.hysteresis = c.get_int("fp16.hysteresis");
    s.loss_scale.consecutive_hysteresis = c.get_bool("fp16.consecutive_hysteresis");
    s.loss_scale.min_loss_scale = c.get_float("fp16.min_loss_scale");
  }
  s.backend = comm::parse_backend(c.get_string("comm.backend"));
  s.comm_timeout_s = c.get_float("comm.timeout_s");
  s.device = c.get_string("run.device");
  s.deferred_device_copies = c.get_bool("debug.deferred_device_copies");
  s.share_cuda_device = c.get_bool("debug.share_cuda_device");
  s.nccl_single_rank = c.get_bool("debug.nccl_single_rank");
  s.run_dir = c.get_string("run.dir");
  s.run_name = c.get_string("run.name");
  s.flops_profiler.enabled = c.get_bool("flops_profiler.enabled");
  s.flops_profiler.profile_step = c.get_int("flops_profiler.profile_step");
  s.flops_profiler.top_modules = c.get_int("flops_profiler.top_modules");
  s.flops_profiler.detailed = c.get_bool("flops_profiler.detailed");
  s.flops_profiler.output_file = c.get_string("flops_profiler.output_file");
  s.checkpoint.dir = c.get_string("checkpoint.dir");
  s.checkpoint.interval = c.get_int("checkpoint.interval");
  s.checkpoint.keep_last = c.get_int("checkpoint.keep_last");
  s.checkpoint.at_end = c.get_bool("checkpoint.at_end");
  s.checkpoint.on_signal = c.get_bool("checkpoint.on_signal");
  s.checkpoint.async = c.get_bool("experimental.checkpoint_async");
  s.checkpoint.resume = c.get_string("checkpoint.resume");
  s.intra_op_threads = static_cast<int>(c.get_int("run.intra_op_threads"));
  s.peak_tflops = c.get_float("run.peak_tflops");
  s.pin_ranks = c.get_bool("run.pin_ranks");
  s.zero_stage = c.get_int("zero.stage");
  s.optimizer_offloaded = c.get_string("zero.offload_optimizer.device") != "none";
  // The host declares the delayed update's keys for the stage 1, 2 and 3 plugins (inactive under stage 0).
  if (c.active("zero.offload_optimizer.delayed_update") && c.get_bool("zero.offload_optimizer.delayed_update"))
    s.delayed_update_from = c.get_int("zero.offload_optimizer.delayed_update_start_step");
  s.params_offloaded = c.get_string("zero.offload_param.device") != "none";
  s.optimizer_states_outside_host_memory = config::optimizer_states_outside_host_memory(c);
  s.params_outside_host_memory = config::params_outside_host_memory(c);
  // Declared by stage 3 (plugins/stage3/param_offload_staging.hpp, Note [max_in_cpu]).
  if (s.params_outside_host_memory && c.active("zero.offload_param.max_in_cpu"))
    s.params_max_in_cpu = c.get_int("zero.offload_param.max_in_cpu");
  return s;
}

ModelStateShape model_state_shape(const TrainSettings& settings, int world_size, int64_t num_params) {
  ModelStateShape shape;
  shape.stage = static_cast<int>(settings.zero_stage);
  shape.world_size = world_size;
  shape.num_params = num_params;
  shape.compute_bytes = settings.precision == Precision::kFp32 ? 4 : 2;
  shape.master_bytes = settings.half_master ? 2 : 4;
  shape.optimizer_bytes_per_param = static_cast<int>(kit::make_optimizer(settings.optimizer)->state_bytes_per_param());
  if (settings.bf16_states) shape.optimizer_bytes_per_param /= 2;  // Adam's two moments, 2 bytes each
  shape.optimizer_offloaded = settings.optimizer_offloaded;
  shape.params_offloaded = settings.params_offloaded;
  return shape;
}

}  // namespace zhost::engine
