// host/config/deepspeed/deepspeed_sections.cpp: DeepSpeed's tables key by key (Note [DeepSpeed JSON] in
// docs/config.md): top-level training keys, zero_optimization, optimizer, scheduler, and the feature
// tables (monitoring and profiling noted; features zhost lacks refused when enabled).
#include <fmt/format.h>

#include "host/config/deepspeed/deepspeed_import_internal.hpp"

namespace zhost::config::ds {
namespace {

constexpr const char* kNoPipeline =
    "DeepSpeed reads it only for PipelineModule models; zhost has no pipeline parallelism, so it changes nothing";
constexpr const char* kMonitor = "monitoring only; zhost writes its metrics to RUN_DIR/metrics.jsonl instead";

// Knobs of DeepSpeed's NVMe path in a config that offloads nothing to NVMe (DeepSpeed ignores them then too).
constexpr const char* kNvmeKnob =
    "a knob of NVMe offload, and this config offloads nothing to NVMe: it changes nothing";

// Whether `table` (an offload_optimizer or offload_param object) names a storing device: DeepSpeed's devices are
// none, cpu and its NVMe, so any name but the first two (a storing tier's, Note [Storing tiers by their
// descriptors]); a device set on the command line (`device_override`) decides instead.
bool names_storing_device(const json* table, const std::optional<std::string>& device_override) {
  std::optional<std::string> device = device_override;
  if (!device && table && table->is_object() && table->contains("device") && (*table)["device"].is_string())
    device = (*table)["device"].get<std::string>();
  return device && *device != "none" && *device != "cpu";
}

// Whether the config offloads anything to NVMe (then aio and the NVMe knobs mean something).
bool offloads_to_nvme(const json* root, const ImportOverrides& overrides) {
  const json* zero =
      root && root->is_object() && root->contains("zero_optimization") ? &(*root)["zero_optimization"] : nullptr;
  const auto table = [zero](const char* name) {
    return zero && zero->is_object() && zero->contains(name) ? &(*zero)[name] : nullptr;
  };
  return names_storing_device(table("offload_optimizer"), overrides.optimizer_device) ||
         names_storing_device(table("offload_param"), overrides.param_device);
}

}  // namespace

void Importer::top_level(Section& root) {
  root.map("gradient_clipping", "gradient_clipping", "HF Trainer's --max_grad_norm (default 1.0)",
           {"--max_grad_norm", "1.0"});
  if (!root.has("gradient_clipping")) {
    // Note [DeepSpeed's clipping default]: DeepSpeed clips the gradients' global norm at 1.0 when the file does
    // not write gradient_clipping (GRADIENT_CLIPPING_DEFAULT, 1.0 since its PR #8068 in 2026; 0.19.8 has it, and
    // bench/vs_deepspeed measured it); releases before that change did not clip. zhost's own default stays 0 (a
    // TOML config does not clip unless told); a DeepSpeed file means what DeepSpeed makes of it, unless --set,
    // the companion or the "zhost" table give the value.
    record(ImportRecord::Kind::Default, "gradient_clipping", TextPosition{1, 1}, "gradient_clipping",
           "gradient_clipping not written: gradient_clipping = 1.0, DeepSpeed's default (DeepSpeed clips at 1.0 "
           "since 2026; releases before did not); write \"gradient_clipping\": 0 to train unclipped, or give yours "
           "with --set gradient_clipping=VALUE")
        .ds_default = "1.0";
  }
  root.map("steps_per_print", "steps_per_print");
  root.map("wall_clock_breakdown", "wall_clock_breakdown");
  root.map("memory_breakdown", "memory_breakdown");
  root.note("dump_state", "a DeepSpeed debug printout; `zhost config check` prints the resolved config");
  root.note("disable_allgather", "DeepSpeed no longer reads it");
  root.note("zero_allow_untested_optimizer", "zhost runs every optimizer it has under every stage");
  root.note("zero_force_ds_cpu_optimizer", "zhost's CPU tier always steps with its own CPU optimizer");
  root.note("dataloader_drop_last", "zhost's data source reads the stream in fixed-size samples without an epoch end");
  root.note("log_level", "DeepSpeed's own log level; zhost's is log.level or --log-level");
  root.note("steps_per_print_eval", "zhost has no evaluation loop");
  root.note("graph_harvesting", "a CUDA-graph knob of DeepSpeed's fused optimizers; it changes no value");
  root.note("use_data_before_expert_parallelism", "zhost has no expert parallelism");
  root.note("vocabulary_size", "DeepSpeed reads it only for sparse embeddings");
  root.map("prescale_gradients", "prescale_gradients");
  root.map("gradient_predivide_factor", "gradient_predivide_factor");
  root.inert("gradient_allreduce_op", "mean",
             "zhost averages gradients over the ranks (\"mean\"); summing them changes the step size; set \"mean\"");
  root.inert("sparse_gradients", false, "sparse embedding gradients are a feature zhost lacks; set it to false");
  root.inert("communication_data_type", nullptr,
             "zhost reduces gradients in fp32 at stage 0 and in the training dtype at stages 1-3, not in a dtype of "
             "your choice (it changes how the sums round); remove it only if that is acceptable, or train with "
             "DeepSpeed");
  root.inert("seq_parallel_communication_data_type", "fp32", "zhost has no sequence parallelism; remove it");
  root.inert("sequence_parallel_size", 1, "sequence parallelism is a feature zhost lacks; set it to 1");
  root.inert("managed_gradient_accumulation", false,
             "DeepSpeed's managed accumulation is not zhost's; set it to false");
  Section data_types = root.sub("data_types");
  data_types.inert("grad_accum_dtype", nullptr,
                   "zhost accumulates gradients in the training dtype (fp32 at stage 0), not a dtype of your choice; "
                   "remove it only if that is acceptable, or train with DeepSpeed");
  data_types.finish();
}

void import_zero(Importer& importer, Section& root) {
  const json* whole = root.has("zero_optimization") ? &(*root.object())["zero_optimization"] : nullptr;
  if (whole && whole->is_boolean()) {
    // DeepSpeed's oldest format: "zero_optimization": true means stage 1, with "allgather_size".
    root.take("zero_optimization");
    importer.set("zero.stage", whole->get<bool>() ? 1 : 0, "zero_optimization", root.at("zero_optimization"),
                 "\"zero_optimization\": true|false is DeepSpeed's deprecated form of {\"stage\": 1|0}; read so");
    if (whole->get<bool>())
      root.map("allgather_size", "zero.allgather_bucket_size");
    else
      root.note("allgather_size", "ZeRO is off, so DeepSpeed ignores it, and zhost too");
    return;
  }
  Section zero = root.sub("zero_optimization");
  zero.map("stage", "zero.stage");
  for (const char* key : {"contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "allgather_bucket_size",
                          "overlap_comm", "sub_group_size", "ignore_unused_parameters", "round_robin_gradients",
                          "zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_gradients"}) {
    const json* value = zero.take(key);
    if (is_auto(value) && std::string(key) == "reduce_bucket_size") {
      importer.record(ImportRecord::Kind::Noted, zero.path(key), zero.at(key), "",
                      fmt::format("{} = \"auto\": HF Trainer derives it from the model's width; a bucket size "
                                  "changes no value, so zhost's default is used",
                                  zero.path(key)));
      continue;
    }
    zero.map(key, std::string("zero.") + key);
  }
  // stage3_ names and their field names without the prefix (both are DeepSpeed's).
  for (const char* name : {"prefetch_bucket_size", "param_persistence_threshold", "max_live_parameters",
                           "max_reuse_distance", "gather_16bit_weights_on_model_save"}) {
    for (const std::string& key : {std::string("stage3_") + name, std::string(name)}) {
      const json* value = zero.take(key);
      if (is_auto(value) && std::string(name) != "gather_16bit_weights_on_model_save") {
        importer.record(ImportRecord::Kind::Noted, zero.path(key), zero.at(key), "",
                        fmt::format("{} = \"auto\": HF Trainer derives it from the model's width; it changes no "
                                    "value, so zhost's default is used",
                                    zero.path(key)));
        continue;
      }
      if (std::string(name) == "gather_16bit_weights_on_model_save") {
        // HF Trainer runs on accelerate, whose DeepSpeed plugin fills this "auto" from its
        // zero3_save_16bit_model (false unless ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL or accelerate's
        // config say true): that is the default an unfilled "auto" takes (Note [HF's "auto"]).
        zero.map(key, std::string("zero.stage3_") + name,
                 "true to write 16-bit weights gathered at save (accelerate's zero3_save_16bit_model), else false",
                 {"accelerate's zero3_save_16bit_model", "false"});
        continue;
      }
      zero.map(key, std::string("zero.stage3_") + name);
    }
  }
  if (const json* old = zero.take("stage3_gather_fp16_weights_on_model_save")) {
    importer.set("zero.stage3_gather_16bit_weights_on_model_save", *old,
                 zero.path("stage3_gather_fp16_weights_on_model_save"),
                 zero.at("stage3_gather_fp16_weights_on_model_save"),
                 "stage3_gather_fp16_weights_on_model_save is DeepSpeed's deprecated name of "
                 "stage3_gather_16bit_weights_on_model_save; read as that");
  }
  for (const char* key : {"stage3_model_persistence_threshold", "model_persistence_threshold"}) {
    zero.note(key,
              "a memory bound on parameters kept gathered; zhost keeps those under "
              "stage3_param_persistence_threshold without a total bound (no value changes)");
  }
  for (const char* key :
       {"stage3_module_granularity_threshold", "module_granularity_threshold", "stage3_use_all_reduce_for_fetch_params",
        "use_all_reduce_for_fetch_params", "stage3_allgather_sequential", "allgather_sequential"}) {
    zero.note(key, "a knob of DeepSpeed's stage-3 gathering, which zhost does its own way (no value changes)");
  }
  zero.note("allgather_partitions",
            "DeepSpeed's choice between all-gather and broadcasts; zhost all-gathers (no "
            "value changes)");
  zero.note("use_multi_rank_bucket_allreduce", "a DeepSpeed reduction knob; no value changes");
  zero.note("load_from_fp32_weights", "a knob of loading DeepSpeed checkpoints, which zhost does not read");
  zero.note("elastic_checkpoint",
            "a knob of DeepSpeed checkpoints; zhost's own checkpoints reshard across world sizes always "
            "(docs/checkpoints.md)");
  zero.note("legacy_stage1", "DeepSpeed's old stage-1 code path; zhost has one stage 1 (no value changes)");
  zero.note("memory_efficient_linear", "DeepSpeed's stage-3 linear layer that frees inputs early; no value changes");
  zero.note("pipeline_loading_checkpoint", "a knob of loading DeepSpeed checkpoints, which zhost does not read");
  zero.note("override_module_apply", "a DeepSpeed hook on module.apply; zhost's models do not need it");
  zero.note("log_trace_cache_warnings", "a DeepSpeed debug log");
  zero.note("enable_sanity_checks", "DeepSpeed's debug checks; zhost checks the block order on every micro-batch");
  zero.note("save_muon_momentum_buffer_in_memory", "zhost has no Muon optimizer");
  zero.note("leaf_module", "DeepSpeed's stage-3 leaf modules; zhost gathers a block at a time");
  zero.inert("zero_quantized_nontrainable_weights", false,
             "ZeRO++ quantization of frozen weights is a feature zhost lacks; set it to false");
  if (zero.has("zeropp_loco_param") && !zero.object()->at("zeropp_loco_param").is_null()) {
    // DeepSpeed turns LoCo on by the table's presence.
    importer.set("zero.zeropp_loco_param.enabled", true, zero.path("zeropp_loco_param"), zero.at("zeropp_loco_param"));
    Section loco = zero.sub("zeropp_loco_param");
    loco.map("err_beta", "zero.zeropp_loco_param.err_beta");
    loco.map("reset_T", "zero.zeropp_loco_param.reset_T");
    loco.finish();
  } else {
    zero.take("zeropp_loco_param");
  }
  // Note [Features DeepSpeed removed]: MiCS too.
  zero.inert("mics_shard_size", -1,
             "MiCS sharding is a feature zhost lacks, and DeepSpeed 0.19.8 refuses it too (DeepSpeed removed it: "
             "deepspeedai/DeepSpeed#8489); set it to -1");
  zero.inert("mics_hierarchical_params_gather", false,
             "MiCS is a feature zhost lacks, and DeepSpeed 0.19.8 refuses it too (DeepSpeed removed it: "
             "deepspeedai/DeepSpeed#8489); set it to false");
  zero.inert("zenflow", nullptr, "ZenFlow is a feature zhost lacks; remove the table");

  // Offload: current tables, and the deprecated booleans mapped onto them.
  Section optimizer = zero.sub("offload_optimizer");
  optimizer.map("device", "zero.offload_optimizer.device");
  optimizer.map("pin_memory", "zero.offload_optimizer.pin_memory");
  const bool optimizer_on_nvme = names_storing_device(optimizer.object(), importer.overrides().optimizer_device);
  for (const char* key : {"nvme_path", "buffer_count", "pipeline_read", "pipeline_write", "fast_init"}) {
    if (optimizer_on_nvme)
      optimizer.map(key, std::string("zero.offload_optimizer.") + key);
    else
      optimizer.note(key, kNvmeKnob);
  }
  optimizer.inert("ratio", 1.0, "offloading only part of the optimizer (Twin-Flow) is a feature zhost lacks; set 1.0");
  optimizer.inert("super_offload", false, "SuperOffload is a feature zhost lacks; set it to false");
  optimizer.note("cpuadam_cores_perc", "zhost's CPU optimizer threads are offload_cpu.threads");
  optimizer.finish();
  // The stage that will run: --set zero.stage over the JSON's.
  const json* json_stage = zero.object() && zero.has("stage") ? &(*zero.object())["stage"] : nullptr;
  std::optional<double> stage = importer.overrides().stage;
  if (!stage && json_stage && json_stage->is_number()) stage = json_stage->get<double>();
  if (stage && *stage == 3 && !zero.has("overlap_comm")) {
    // Note [DeepSpeed's overlap_comm default]: DeepSpeed's zero_optimization.overlap_comm defaults to true at
    // stage 3 and false at stages 0-2 (DeepSpeedZeroConfig's overlap_comm_valid, 0.19.8); zhost's
    // zero.overlap_comm defaults to false. A DeepSpeed file at stage 3 that does not write it means true, unless
    // --set, the companion or the "zhost" table give a value. It changes when reductions run, not their values.
    importer
        .record(ImportRecord::Kind::Default, zero.path("overlap_comm"),
                zero.object() ? root.at("zero_optimization") : TextPosition{1, 1}, "zero.overlap_comm",
                "zero_optimization.overlap_comm not written: zero.overlap_comm = true, DeepSpeed's default at "
                "stage 3 (false at stages 0-2); give yours with --set zero.overlap_comm=VALUE")
        .ds_default = "true";
  }
  if (stage && *stage < 3 && zero.has("offload_param")) {
    zero.note("offload_param", "DeepSpeed reads offload_param only at stage 3, so it changes nothing at this stage");
  } else {
    Section param = zero.sub("offload_param");
    param.map("device", "zero.offload_param.device");
    param.map("buffer_count", "zero.offload_param.buffer_count");
    if (param.has("buffer_size") && is_auto(&param.object()->at("buffer_size"))) {
      param.take("buffer_size");
      // Filled by the launcher that wrote it (sglang's, from the model); like the bucket sizes above, a buffer
      // size changes no value, and stage 3 refuses one smaller than the largest shard.
      importer.record(ImportRecord::Kind::Noted, param.path("buffer_size"), param.at("buffer_size"), "",
                      fmt::format("{} = \"auto\": its launcher sizes it from the model; zhost's default (1e8 "
                                  "elements, DeepSpeed's) is used",
                                  param.path("buffer_size")));
    } else {
      param.map("buffer_size", "zero.offload_param.buffer_size");
    }
    if (names_storing_device(param.object(), importer.overrides().param_device)) {
      param.map("nvme_path", "zero.offload_param.nvme_path");
      param.map("pin_memory", "zero.offload_param.pin_memory");
    } else {
      param.note("nvme_path", kNvmeKnob);
      param.note("pin_memory",
                 "with device = \"cpu\" the shards are in the CPU tier's buffers, page-locked by "
                 "offload_optimizer.pin_memory");
    }
    param.map("max_in_cpu", "zero.offload_param.max_in_cpu");
    param.finish();
  }
  auto deprecated_offload = [&](const char* key, const char* target, const char* table) {
    const json* value = zero.take(key);
    if (!value) return;
    if (!value->is_boolean() || !value->get<bool>()) {
      zero.note(key, fmt::format("deprecated in DeepSpeed (now {}.device); false changes nothing", table));
      return;
    }
    importer.set(target, "cpu", zero.path(key), zero.at(key),
                 fmt::format("{} is deprecated in DeepSpeed; read as {}.device = \"cpu\"", key, table));
  };
  deprecated_offload("cpu_offload", "zero.offload_optimizer.device", "zero_optimization.offload_optimizer");
  deprecated_offload("cpu_offload_param", "zero.offload_param.device", "zero_optimization.offload_param");
  if (const json* pin = zero.take("cpu_offload_use_pin_memory")) {
    importer.set("zero.offload_optimizer.pin_memory", *pin, zero.path("cpu_offload_use_pin_memory"),
                 zero.at("cpu_offload_use_pin_memory"),
                 "cpu_offload_use_pin_memory is deprecated in DeepSpeed; read as offload_optimizer.pin_memory");
  }
  // Precision tables nested here by mistake: DeepSpeed reads them at the top level only.
  for (const char* table : {"fp16", "bf16", "bfloat16"}) {
    if (zero.has(table)) {
      zero.refuse(table, fmt::format("{} is a top-level table in DeepSpeed, not part of zero_optimization; move it "
                                     "out to the top level (\"{}\": {{...}} beside \"zero_optimization\")",
                                     table, table));
    }
  }
  zero.finish();
}

namespace {

// DeepSpeed's data efficiency library: its random-LTD is zhost's random_ltd table (Note [Random-LTD] in
// host/engine/random_ltd.hpp); its data sampling (curriculum learning) is a feature zhost lacks.
void import_data_efficiency(Section& root) {
  Section efficiency = root.sub("data_efficiency");
  // On unless `enabled` is absent, false or null, as the feature tables below read it.
  const auto on = [](Section& section) {
    const json* enabled = section.take("enabled");
    if (enabled && !(enabled->is_boolean() && !enabled->get<bool>()) && !enabled->is_null()) return true;
    if (enabled) section.note("enabled", "off");
    section.note_rest("the feature is off, so it changes nothing");
    return false;
  };
  if (!on(efficiency)) return;
  efficiency.note("seed", "seeds DeepSpeed's data sampler; zhost draws random-LTD's tokens from the job's seed");
  Section sampling = efficiency.sub("data_sampling");
  if (sampling.object()) {
    const json* enabled = sampling.take("enabled");
    if (enabled && !(enabled->is_boolean() && !enabled->get<bool>()))
      sampling.refuse(
          "enabled",
          "curriculum learning (DeepSpeed's data sampling) is a feature zhost lacks; set it to false, or train with "
          "DeepSpeed");
    sampling.note_rest("part of data sampling");
  }
  Section routing = efficiency.sub("data_routing");
  if (!on(routing)) return;
  Section ltd = routing.sub("random_ltd");
  if (!on(ltd)) return;
  const json* ids = ltd.has("random_ltd_layer_id") ? &ltd.object()->at("random_ltd_layer_id") : nullptr;
  ltd.map("random_ltd_layer_id", "random_ltd.layers");
  if (const json* count = ltd.take("random_ltd_layer_num"); count && ids && ids->is_array()) {
    if (!count->is_number_integer() || count->get<int64_t>() != static_cast<int64_t>(ids->size()))
      ltd.refuse(
          "random_ltd_layer_num",
          fmt::format("it must be the length of random_ltd_layer_id ({}), as DeepSpeed requires; fix it", ids->size()));
  }
  ltd.note("total_layer_num", "DeepSpeed counts consumed layer tokens with it; zhost takes the model's layers");
  ltd.note("model_mask_name", "zhost's models attend causally among the tokens a layer keeps, as DeepSpeed's mask");
  ltd.note("hidden_state_order", "zhost's blocks hold [batch, sequence, width]");
  ltd.inert("model_type", "decoder",
            "random-LTD of an encoder (BERT) is a feature zhost lacks: its models are decoders; write \"decoder\", or "
            "train with DeepSpeed");
  Section schedule = ltd.sub("random_ltd_schedule");
  schedule.map("min_value", "random_ltd.min_tokens");
  schedule.map("max_value", "random_ltd.max_tokens");
  schedule.inert(
      "schedule_type", "fixed_linear",
      "DeepSpeed's random-LTD has the fixed_linear schedule only (it raises 'Unsupported random LTD schedule "
      "type'); write \"fixed_linear\"");
  Section steps = schedule.sub("schedule_config");
  steps.map("require_steps", "random_ltd.require_steps");
  steps.map("seq_per_step", "random_ltd.tokens_per_increase");
  steps.finish();
  schedule.finish();
  Section token_lr = ltd.sub("layer_token_lr_schedule");
  if (token_lr.object()) {
    const json* enabled = token_lr.take("enabled");
    if (enabled && !(enabled->is_boolean() && !enabled->get<bool>()))
      token_lr.refuse("enabled",
                      "the layer-token lr schedule is a feature zhost lacks, and DeepSpeed 0.19.8 refuses it too ('not "
                      "yet support'); set it to false");
    token_lr.note_rest("part of the layer-token lr schedule");
  }
  ltd.note_rest("DeepSpeed's random-LTD bookkeeping (batch sizes it fills itself)");
  routing.note_rest("part of DeepSpeed's data routing");
  efficiency.note_rest("part of DeepSpeed's data efficiency library");
}

}  // namespace

void import_features(Importer& importer, Section& root) {
  // Monitoring and profiling: they observe the run, they do not change it. zhost has DeepSpeed's
  // comms_logger and the flops profiler's keys (enabling the profiler is refused: not built).
  Section comms = root.sub("comms_logger");
  for (const char* key : {"enabled", "verbose"}) comms.map(key, std::string("comms_logger.") + key);
  comms.note_rest("a comms_logger option zhost does not have; its logger reports every collective");
  Section flops = root.sub("flops_profiler");
  for (const char* key : {"enabled", "profile_step", "module_depth", "top_modules", "detailed", "output_file"})
    flops.map(key, std::string("flops_profiler.") + key);
  flops.note_rest(kMonitor);
  for (const char* table : {"tensorboard", "wandb", "csv_monitor", "comet", "timers", "monitor_config"}) {
    Section section = root.sub(table);
    section.note_rest(kMonitor);
  }
  // DeepSpeed's asynchronous I/O: the NVMe tier's settings when something is offloaded to NVMe.
  Section aio = root.sub("aio");
  if (offloads_to_nvme(root.object(), importer.overrides())) {
    for (const char* key : {"block_size", "queue_depth", "intra_op_parallelism", "single_submit", "overlap_events",
                            "thread_count", "use_gds"})
      aio.map(key, std::string("aio.") + key);
  }
  aio.note_rest("configures DeepSpeed's NVMe I/O, and this config offloads nothing to NVMe: it changes nothing");
  // Activation checkpointing: DeepSpeed's section configures the checkpointing API that models call
  // themselves; zhost's switch is activation_checkpointing.enabled in the "zhost" table. The refinements map
  // to zhost's keys, which are read only with that switch (partition_activations = true is refused: zhost
  // has no model parallelism).
  Section checkpointing = root.sub("activation_checkpointing");
  for (const char* key :
       {"partition_activations", "cpu_checkpointing", "contiguous_memory_optimization", "number_checkpoints"})
    checkpointing.map(key, std::string("activation_checkpointing.") + key);
  checkpointing.note_rest(
      "a knob of DeepSpeed's checkpointing API (synchronisation, profiling); zhost's recomputation changes no "
      "value");
  // DeepSpeed's checkpoint table shapes DeepSpeed's own files; zhost writes its format (docs/checkpoints.md),
  // which loads on any world size and stage without conversion. Node-local files are refused: zhost's ranks
  // write one folder that rank 0 publishes, which every node must see.
  Section checkpoint = root.sub("checkpoint");
  checkpoint.note("tag_validation",
                  "DeepSpeed checks that every rank saves under one tag; zhost's ranks save one step folder together");
  checkpoint.note("load_universal",
                  "zhost's checkpoints load on any world size and stage without a universal conversion");
  checkpoint.inert("use_node_local_storage", false,
                   "zhost's ranks write one checkpoint folder that rank 0 publishes, so every node must see "
                   "checkpoint.dir (shared storage); node-local checkpoints are not supported: remove it");
  checkpoint.note_rest(
      "a knob of DeepSpeed's checkpoint files; zhost writes its own (the \"zhost\" table's checkpoint.* keys, "
      "docs/checkpoints.md)");
  // Mechanisms zhost does its own way, or does not need: no value changes.
  struct Noted {
    const char* table;
    const char* reason;
  };
  for (const Noted& noted : {
           Noted{"nebula", "a DeepSpeed checkpoint service; zhost does not write DeepSpeed checkpoints"},
           Noted{"datastates", "a DeepSpeed checkpoint engine; zhost does not write DeepSpeed checkpoints"},
           Noted{"pipeline", kNoPipeline},
           Noted{"autotuning", "read by DeepSpeed's launcher (deepspeed --autotuning), not by training"},
       }) {
    Section section = root.sub(noted.table);
    section.note_rest(noted.reason);
  }
  import_data_efficiency(root);
  // Features zhost lacks: refused when enabled, noted when off. Note [Features DeepSpeed removed]: DeepSpeed
  // 0.19.8, the version zhost reads configs as, refuses some of these tables itself, whatever they hold
  // (deepspeedai/DeepSpeed#8489 removed the features); zhost's refusal says so, since no current DeepSpeed
  // trains such a file either, and it still notes a table whose feature is off. Peer.CorpusRefusalsDeepSpeedMakesToo
  // checks the claim against DeepSpeed itself.
  struct Feature {
    const char* table;
    const char* what;
    bool removed_by_deepspeed;
  };
  const auto lacked = [](const Feature& feature, const char* remedy) {
    return feature.removed_by_deepspeed
               ? fmt::format(
                     "{} is a feature zhost lacks, and DeepSpeed 0.19.8 refuses it too (DeepSpeed removed it: "
                     "deepspeedai/DeepSpeed#8489); {}",
                     feature.what, remedy)
               : fmt::format("{} is a feature zhost lacks; {}, or train with DeepSpeed", feature.what, remedy);
  };
  for (const Feature& feature : {
           Feature{"amp", "NVIDIA Apex AMP", true},
           Feature{"torch_autocast", "torch.autocast mixed precision", false},
           Feature{"elasticity", "elastic batch sizes", true},
           Feature{"eigenvalue", "eigenvalue computation", true},
           Feature{"progressive_layer_drop", "progressive layer dropping", true},
           Feature{"curriculum_learning", "curriculum learning", true},
           Feature{"hybrid_engine", "the hybrid (RLHF) engine", false},
           Feature{"quantize_training", "quantization-aware training", true},
           Feature{"compile", "torch.compile / DeepCompile", false},
       }) {
    Section section = root.sub(feature.table);
    const json* enabled = section.take(std::string(feature.table) == "compile" ? "deepcompile" : "enabled");
    const bool on = enabled && !(enabled->is_boolean() && !enabled->get<bool>()) && !enabled->is_null();
    if (on) {
      section.refuse(std::string(feature.table) == "compile" ? "deepcompile" : "enabled",
                     lacked(feature, "set it to false"));
    } else if (enabled) {
      section.note(std::string(feature.table) == "compile" ? "deepcompile" : "enabled", "off");
    }
    section.note_rest(on ? "part of a refused feature" : "the feature is off, so it changes nothing");
  }
  // Tables that exist only to switch on a feature zhost lacks.
  for (const Feature& feature : {
           Feature{"sparse_attention", "sparse attention", true},
           Feature{"compression_training", "compression training", true},
           Feature{"weight_quantization", "weight quantization", false},
           Feature{"tensor_parallel", "tensor parallelism (AutoTP)", false},
           Feature{"expert_parallel", "expert parallelism", false},
       }) {
    if (!root.has(feature.table)) {
      root.take(feature.table);
      continue;
    }
    const json* value = &(*root.object())[feature.table];
    const bool empty = value->is_null() || (value->is_object() && value->empty());
    auto at_most_one = [value](const char* key) {
      return !value->contains(key) || ((*value)[key].is_number() && (*value)[key].get<double>() <= 1);
    };
    const bool tp_off = std::string(feature.table) == "tensor_parallel" && value->is_object() &&
                        at_most_one("autotp_size") && at_most_one("tp_size");
    if (empty || tp_off) {
      root.note(feature.table, "empty or off, so it changes nothing");
    } else {
      root.refuse(feature.table, lacked(feature, "remove the table"));
    }
  }
}

}  // namespace zhost::config::ds
