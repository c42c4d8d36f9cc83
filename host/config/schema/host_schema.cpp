// host/config/schema/host_schema.cpp: the host's own config keys, with DeepSpeed's defaults, and their rules.
#include "host/config/schema/host_schema.hpp"

#include <fmt/format.h>

#include <initializer_list>
#include <utility>

#include "host/config/schema/host_rules.hpp"

namespace zhost::config {
namespace {

struct Limits {
  std::optional<double> min;
  std::optional<double> max;
  bool min_exclusive = false;
  bool max_exclusive = false;
};
Limits at_least(double min) { return Limits{min, std::nullopt, false, false}; }
Limits above(double min) { return Limits{min, std::nullopt, true, false}; }
Limits between(double min, double max) { return Limits{min, max, false, false}; }
Limits from_below(double min, double max) { return Limits{min, max, false, true}; }  // [min, max)
// Learning rates: above 10 every optimizer zhost has diverges at once (1e300 would train on inf).
Limits learning_rate() { return between(0, 10); }
// A collective that takes longer than a week is hung; larger values would overflow the deadlines.
constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600;
// Below a second no rendezvous or collective can be relied on to finish (starting the ranks, the store's first
// round trip and a scheduler's time slice on a loaded node each take that long), and the failure would then
// blame the network (MASTER_ADDR) instead of the setting.
constexpr double kMinTimeoutSeconds = 1;

// Declares host keys from typed defaults, so that every default is spelled by to_toml_literal.
class HostKeys {
 public:
  explicit HostKeys(Schema& schema) : schema_(schema) {}

  void flag(std::string path, bool value, std::string doc) {
    add(std::move(path), ValueType::Bool, value, std::move(doc));
  }
  void integer(std::string path, int64_t value, std::string doc, Limits limits = {}) {
    add(std::move(path), ValueType::Int, value, std::move(doc), limits);
  }
  // An Int the user may leave unset; it then has no value (train_batch_size and its friends).
  void optional_integer(std::string path, std::string doc, Limits limits = {}) {
    add(std::move(path), ValueType::Int, std::nullopt, std::move(doc), limits);
  }
  void number(std::string path, double value, std::string doc, Limits limits = {}) {
    add(std::move(path), ValueType::Float, value, std::move(doc), limits);
  }
  void optional_number(std::string path, std::string doc, Limits limits = {}) {
    add(std::move(path), ValueType::Float, std::nullopt, std::move(doc), limits);
  }
  void text(std::string path, std::string value, std::string doc) {
    add(std::move(path), ValueType::String, std::move(value), std::move(doc));
  }
  void choice(std::string path, std::string value, std::vector<std::string> choices, std::string doc) {
    add(std::move(path), ValueType::String, std::move(value), std::move(doc), {}, std::move(choices));
  }
  void number_list(std::string path, std::vector<double> value, std::string doc, Limits limits = {}) {
    add(std::move(path), ValueType::FloatList, std::move(value), std::move(doc), limits);
  }
  void text_list(std::string path, std::vector<std::string> value, std::string doc) {
    add(std::move(path), ValueType::StringList, std::move(value), std::move(doc));
  }

 private:
  void add(std::string path, ValueType type, std::optional<ConfigValue> value, std::string doc, Limits limits = {},
           std::vector<std::string> choices = {}) {
    KeySpec spec;
    spec.path = std::move(path);
    spec.type = type;
    if (value) spec.default_toml = to_toml_literal(*value);
    spec.optional = !value;
    spec.doc = std::move(doc);
    spec.min = limits.min;
    spec.max = limits.max;
    spec.min_exclusive = limits.min_exclusive;
    spec.max_exclusive = limits.max_exclusive;
    spec.choices = std::move(choices);
    schema_.add(std::move(spec));
  }

  Schema& schema_;
};

void add_training_keys(HostKeys& keys) {
  keys.optional_integer("train_batch_size", "samples per optimizer step over all ranks (= micro * gas * world)",
                        at_least(1));
  keys.optional_integer("train_micro_batch_size_per_gpu", "samples per forward/backward on each rank", at_least(1));
  keys.optional_integer("gradient_accumulation_steps", "micro-batches accumulated per optimizer step", at_least(1));
  keys.integer("steps", 100, "total optimizer steps to train", at_least(0));
  keys.integer("seed", 1234, "random seed for initialization and synthetic data");
  keys.number("gradient_clipping", 0.0, "clip gradients to this global norm; 0 = off", at_least(0));
  keys.flag("prescale_gradients", false,
            "DeepSpeed: divide each rank's gradients by the world size before they are summed, not the sum after "
            "(Note [Gradient pre-division])");
  keys.number("gradient_predivide_factor", 1.0,
              "DeepSpeed: divide each rank's gradients by this before they are summed, the sum by world size / it "
              "after (Note [Gradient pre-division])",
              above(0));
  keys.integer("steps_per_print", 10, "log progress every this many optimizer steps", at_least(1));
  keys.flag("wall_clock_breakdown", false, "log the time spent in forward, backward and step");
  keys.flag("memory_breakdown", false,
            "log memory by category before/after forward, backward and step of printed steps (see_memory_usage)");
  keys.flag("comms_logger.enabled", false,
            "log per collective kind and size: count, latency, algbw, busbw at the end (comms.rankN.json)");
  keys.flag("comms_logger.verbose", false, "with comms_logger.enabled: also one log line per collective");
  keys.flag("flops_profiler.enabled", false,
            "DeepSpeed's flops profiler: params, MACs, latency and FLOPS per block at profile_step (rank 0)");
  keys.integer("flops_profiler.profile_step", 1, "flops profiler: the step to profile", at_least(1));
  keys.integer("flops_profiler.module_depth", -1,
               "flops profiler: depth of the module tree; zhost's models are one level of blocks, so any depth "
               "lists the blocks");
  keys.integer("flops_profiler.top_modules", 1, "flops profiler: blocks listed in the aggregated profile", at_least(0));
  keys.flag("flops_profiler.detailed", true, "flops profiler: the per-block profile");
  keys.text("flops_profiler.output_file", "", "flops profiler: write the profile here instead of the log");
}

void add_model_keys(HostKeys& keys) {
  keys.choice("model.type", "gpt", {"mlp", "gpt", "llama", "hf"},
              "model architecture; hf = a Hugging Face GPT-2, Llama or Mistral folder (model.path)");
  keys.text("model.path", "", "model.type = \"hf\": the folder holding config.json and the safetensors");
  keys.integer("model.layers", 4, "number of blocks", at_least(1));
  keys.integer("model.heads", 4, "attention heads", at_least(1));
  keys.integer("model.kv_heads", 0, "key/value heads for grouped-query attention; 0 = same as heads", at_least(0));
  keys.integer("model.width", 256, "hidden size", at_least(1));
  keys.integer("model.ffn_width", 0, "feed-forward size; 0 = 4*width (gpt, mlp) or 8/3*width rounded (llama)",
               at_least(0));
  keys.integer("model.vocab", 256, "vocabulary size", at_least(1));
  keys.integer("model.seq_len", 128, "tokens per sample", at_least(1));
  keys.number("model.init_std", 0.02, "standard deviation of the initial weights", above(0));
  keys.choice("model.attention", "sdpa", {"sdpa", "eager"},
              "attention kernel, as HF's attn_implementation: sdpa = ATen's fused scaled_dot_product_attention "
              "(no [T, T] scores kept); eager = explicit q k^T, mask, softmax (Note [Attention kernels])");
  keys.number("model.layer_drop", 0.0,
              "LayerDrop: probability that a transformer block is skipped in a training micro-batch", from_below(0, 1));
}

// DeepSpeed's random-LTD (data_efficiency.data_routing.random_ltd; Note [Random-LTD] in host/engine/random_ltd.hpp).
void add_random_ltd_keys(HostKeys& keys) {
  keys.number_list("random_ltd.layers", {},
                   "random-LTD: the transformer layers (0-based) that run on a random subset of each sample's tokens "
                   "(DeepSpeed's random_ltd_layer_id); empty = off");
  keys.integer("random_ltd.min_tokens", 1, "random-LTD: tokens kept at the schedule's start (DeepSpeed's min_value)",
               at_least(1));
  keys.integer("random_ltd.max_tokens", 0,
               "random-LTD: tokens kept at its end (max_value); 0 = model.seq_len, where the layers run whole",
               at_least(0));
  keys.integer("random_ltd.require_steps", 1,
               "random-LTD: steps from min_tokens to max_tokens, linearly (schedule_config.require_steps)",
               at_least(1));
  keys.integer("random_ltd.tokens_per_increase", 1,
               "random-LTD: the tokens kept are a multiple of this (schedule_config.seq_per_step)", at_least(1));
}

void add_data_keys(HostKeys& keys) {
  keys.choice("data.type", "synthetic", {"synthetic", "tokens", "text"},
              "synthetic random tokens, a binary token file, or a text file");
  keys.text("data.path", "", "the token or text file (data.type = tokens or text)");
  keys.choice("data.token_dtype", "uint16", {"uint16", "uint32"}, "integer type of a token file's entries");
  keys.text("data.tokenizer", "",
            "data.type = text: the tokenizer that turns the text into ids when the job starts: an HF tokenizer.json "
            "of byte-level BPE (GPT-2, Llama 3), a SentencePiece tokenizer.model, or an HF model folder holding "
            "either; empty: bytes are the ids");
}

void add_optimizer_keys(HostKeys& keys) {
  keys.choice("optimizer.type", "AdamW", {"AdamW", "Adam", "SGD", "Lion", "Lamb"}, "optimizer");
  keys.number("optimizer.lr", 1e-3, "learning rate (the scheduler's base)", learning_rate());
  keys.number_list("optimizer.betas", {0.9, 0.999},
                   "Adam/AdamW/Lion/Lamb coefficients [beta1, beta2]; when unset, Lion uses its own [0.9, 0.99]",
                   from_below(0, 1));
  keys.number("optimizer.eps", 1e-8, "Adam/AdamW/Lamb denominator epsilon", at_least(0));
  keys.flag("optimizer.bias_correction", true,
            "Adam/AdamW/Lamb: divide the moments by 1 - beta^step (DeepSpeed's bias_correction); false = the raw "
            "moments");
  keys.number("optimizer.max_coeff", 10.0, "Lamb: upper bound of the trust ratio |w| / |update| (DeepSpeed's 10)",
              at_least(0));
  keys.number("optimizer.min_coeff", 0.01, "Lamb: lower bound of the trust ratio (DeepSpeed's 0.01)", at_least(0));
  keys.number("optimizer.weight_decay", 0.0, "weight decay (decoupled for AdamW and Lion); DeepSpeed's default 0",
              at_least(0));
  keys.number("optimizer.momentum", 0.0, "SGD momentum", between(0, 1));
  keys.flag("optimizer.adam_w_mode", true,
            "DeepSpeed's switch for type = \"Adam\": true = decoupled weight decay (AdamW), false = L2 (torch Adam)");
}

void add_scheduler_keys(HostKeys& keys) {
  keys.choice("scheduler.type", "none",
              {"none", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest"},
              "learning-rate schedule");
  keys.number("scheduler.warmup_min_lr", 0.0, "learning rate at the start of warmup", learning_rate());
  keys.optional_number("scheduler.warmup_max_lr", "learning rate at the end of warmup; unset = optimizer.lr",
                       learning_rate());
  keys.integer("scheduler.warmup_num_steps", 1000, "warmup length in optimizer steps", at_least(1));
  keys.choice("scheduler.warmup_type", "log", {"log", "linear"}, "warmup curve");
  keys.integer("scheduler.total_num_steps", 0, "schedule length for WarmupDecayLR/WarmupCosineLR; 0 = steps",
               at_least(0));
  keys.number("scheduler.warmup_min_ratio", 0.0, "WarmupCosineLR: warmup start as a fraction of lr", between(0, 1));
  keys.number("scheduler.cos_min_ratio", 0.0001, "WarmupCosineLR: final lr as a fraction of lr", between(0, 1));
  keys.optional_number("scheduler.cycle_min_lr", "OneCycle: lowest learning rate (required for OneCycle)",
                       learning_rate());
  keys.optional_number("scheduler.cycle_max_lr", "OneCycle: highest learning rate (required for OneCycle)",
                       learning_rate());
  keys.integer("scheduler.cycle_first_step_size", 2000, "OneCycle: steps of the rising half of the cycle", at_least(1));
  keys.integer("scheduler.cycle_second_step_size", 0, "OneCycle: steps of the falling half; 0 = first step size",
               at_least(0));
  keys.integer("scheduler.cycle_first_stair_count", 0, "OneCycle: stairs in the rising half; 0 = smooth", at_least(0));
  keys.integer("scheduler.cycle_second_stair_count", 0,
               "OneCycle: stairs in the falling half; 0 = same as the rising half", at_least(0));
  keys.integer("scheduler.decay_step_size", 0, "OneCycle: steps between decays after the cycle; 0 = no decay",
               at_least(0));
  keys.number("scheduler.decay_lr_rate", 0.0, "OneCycle: learning-rate decay per decay step after the cycle",
              at_least(0));
  keys.flag("scheduler.cycle_momentum", true,
            "OneCycle: cycle the betas against the lr, as DeepSpeed does by default (optimizers with betas; not SGD)");
  keys.number("scheduler.cycle_min_mom", 0.8, "OneCycle: beta1 at the lr's peak", from_below(0, 1));
  keys.number("scheduler.cycle_max_mom", 0.9, "OneCycle: beta1 at the cycle's ends", from_below(0, 1));
  keys.number("scheduler.decay_mom_rate", 0.0, "OneCycle: beta1 growth per decay step after the cycle", at_least(0));
  keys.number("scheduler.lr_range_test_min_lr", 1e-3, "LRRangeTest: the learning rate the test starts from",
              learning_rate());
  keys.integer("scheduler.lr_range_test_step_size", 2000, "LRRangeTest: steps per unit of increase", at_least(1));
  keys.number("scheduler.lr_range_test_step_rate", 1.0,
              "LRRangeTest: increase of the lr per step_size steps, as a "
              "multiple of min_lr",
              at_least(0));
  keys.flag("scheduler.lr_range_test_staircase", false, "LRRangeTest: increase in whole steps of step_size");
}

void add_precision_keys(HostKeys& keys) {
  keys.flag("fp16.enabled", false, "train in fp16 with loss scaling");
  keys.number("fp16.loss_scale", 0.0, "static loss scale; 0 = dynamic", at_least(0));
  keys.integer("fp16.initial_scale_power", 16, "dynamic loss scaling starts at 2^this", between(0, 64));
  keys.integer("fp16.loss_scale_window", 1000, "steps without overflow before the scale doubles", at_least(1));
  keys.integer("fp16.hysteresis", 2, "overflows tolerated before the scale halves", at_least(1));
  keys.flag("fp16.consecutive_hysteresis", false, "refill hysteresis after each step without overflow");
  keys.number("fp16.min_loss_scale", 1.0, "lowest dynamic loss scale", above(0));
  // DeepSpeed's fp16_master_weights_and_grads (Note [bf16 master weights] in zhost/kit/cpu_optimizer.hpp).
  keys.flag("fp16.master_weights_and_grads", false,
            "keep the optimizer's master weights in fp16 and step them on fp16 gradients (ZeRO-Offload's CPU tier, "
            "Adam/AdamW; moments stay fp32)");
  keys.flag("bf16.enabled", false, "train in bf16 (no loss scaling)");
  // DeepSpeed's bf16 keys of the same names (Note [bf16 master weights] in zhost/kit/cpu_optimizer.hpp, Note [bf16
  // masters without offload] in zhost/kit/optimizer.hpp).
  keys.flag("bf16.master_weights_and_grads", false,
            "keep the optimizer's master weights in bf16 and step them on bf16 gradients (Adam/AdamW, stages 1-3: "
            "ZeRO-Offload's CPU tier, or without offload together with bf16.optimizer_states)");
  keys.flag("bf16.optimizer_states", false,
            "keep Adam's moments in bf16 too (needs bf16.master_weights_and_grads; in the CPU tier, or on the "
            "device without offload)");
}

void add_zero_keys(HostKeys& keys) {
  // Only the keys that select plugins; the plugins that use them declare the rest of [zero].
  keys.integer("zero.stage", 0, "ZeRO stage: 0 = data parallel, 1 = optimizer states, 2 = +gradients, 3 = +params",
               between(0, 3));
  // Any tier name is accepted here: cpu and nvme are zhost's own tiers, a third-party tier plugin that
  // provides "offload:NAME" is selected with device = "NAME". Resolution reports a name no plugin serves.
  keys.text("zero.offload_optimizer.device", "none",
            "offload tier for optimizer states: none, cpu, nvme, or a third-party tier's name");
  // zhost's own key (DeepSpeed has none): a storage tier keeping the optimizer's states between steps while
  // the tier of zero.offload_optimizer.device runs the optimizer (docs/abi.md "Tier composition").
  keys.text("zero.offload_optimizer.storage", "none",
            "storage tier keeping the optimizer's master weights and states between steps, under the computing "
            "tier of zero.offload_optimizer.device: none, or a storage tier's name (device = \"nvme\" implies it)");
  keys.text("zero.offload_param.device", "none",
            "offload tier for parameters (stage 3): none, cpu, nvme, or a third-party tier's name");
  keys.integer("zero.offload_optimizer.buffer_count", 4,
               "with a storage tier: the CPU tier's staging areas, one chunk of states each", between(1, 1024));
  keys.flag("zero.offload_optimizer.pipeline_read", false,
            "with a storage tier: read the next chunks while one steps (needs buffer_count >= 2)");
  keys.flag("zero.offload_optimizer.pipeline_write", false,
            "with a storage tier: write a stepped chunk back while the next one steps");
  keys.flag("zero.offload_optimizer.delayed_update", false,
            "zhost: the offload tier's optimizer step overlaps the next step (one step stale; stages 1-3)");
  keys.integer("zero.offload_optimizer.delayed_update_start_step", kDelayedUpdateStartDefault,
               "zhost: with delayed_update, the first delayed step; the steps before it step synchronously "
               "(1 = delayed from the first step)",
               at_least(1));
  keys.text_list("zero.offload_optimizer.swap_schedule", {},
                 "zhost: hot swaps of the storage under the optimizer's tier, each \"STEP:STORAGE\" (after step STEP "
                 "the states move into STORAGE: cpu, nvme or a storing tier's name), steps increasing");
  keys.text_list("zero.offload_param.swap_schedule", {},
                 "zhost: hot swaps of the tier keeping stage 3's parameter shards, each \"STEP:STORAGE\" (after "
                 "step STEP the shards move into STORAGE: cpu, nvme or a storing tier's name), steps increasing");
  keys.flag("zero.offload_optimizer.fast_init", false,
            "DeepSpeed's fast NVMe optimizer initialisation; only its default is accepted");
  keys.flag("aio.use_gds", false, "GPUDirect Storage between NVMe and GPU memory; refused (no CUDA, no cuFile)");
  keys.flag("zero.zero_quantized_weights", false, "ZeRO++ qwZ: all-gather weights as int8");
  keys.flag("zero.zero_quantized_gradients", false, "ZeRO++ qgZ: reduce gradients as int4");
  keys.integer("zero.zero_hpz_partition_size", 1, "ZeRO++ hpZ: ranks per secondary partition; 1 = off", at_least(1));
  keys.flag("zero.zeropp_loco_param.enabled", false,
            "ZeRO++ LoCo: qgZ sends each gradient buffer's quantization error with its next reduction "
            "(DeepSpeed: the zeropp_loco_param table is present)");
  keys.number("zero.zeropp_loco_param.err_beta", 0.8,
              "ZeRO++ LoCo: the share of the old error kept at each reduction, in [0, 1)", from_below(0, 1));
  keys.integer("zero.zeropp_loco_param.reset_T", 1024,
               "ZeRO++ LoCo: a gradient buffer's error restarts from zero after this many of its reductions",
               at_least(1));
}

void add_runtime_keys(HostKeys& keys) {
  keys.flag("activation_checkpointing.enabled", false, "recompute block activations in backward");
  keys.flag("activation_checkpointing.partition_activations", false, "shard checkpointed activations across ranks");
  keys.flag("activation_checkpointing.cpu_checkpointing", false, "keep checkpointed activations in host memory");
  keys.flag("activation_checkpointing.contiguous_memory_optimization", false,
            "copy checkpointed activations into one buffer");
  keys.optional_integer("activation_checkpointing.number_checkpoints", "checkpointed blocks; unset = all", at_least(1));
  keys.choice("comm.backend", "auto", {"auto", "gloo", "nccl"}, "collective backend; auto = nccl on GPUs, else gloo");
  keys.number("comm.timeout_s", 300.0, "seconds before a collective counts as hung",
              between(kMinTimeoutSeconds, kMaxTimeoutSeconds));
  keys.text("run.dir", "runs", "folder for run outputs");
  keys.flag("run.trace", false,
            "write a Chrome trace per rank to RUN_DIR/trace.rankN.json (Perfetto, Holistic Trace Analysis)");
  keys.flag("run.save_final_weights", false,
            "write the final parameters (fp32) to RUN_DIR/weights.bin with an index in weights.json, and for "
            "model.type = \"hf\" as a Hugging Face folder RUN_DIR/hf (model.safetensors, config.json)");
  keys.choice("run.device", "auto", {"auto", "cpu", "cuda"},
              "where to train: auto = CUDA (device LOCAL_RANK) when this build and machine have it, else CPU");
  keys.text("run.name", "", "run folder name under run.dir; empty = a timestamp");
  keys.integer("run.intra_op_threads", 0,
               "LibTorch and BLAS threads per rank; 0 = this node's CPUs / local ranks, or OMP_NUM_THREADS when set",
               between(0, 1024));
  keys.flag("run.pin_ranks", false, "bind each local rank to its own slice of this node's CPUs");
  keys.number("run.peak_tflops", 0.0,
              "the job's peak TFLOP/s (all ranks) that MFU is against; 0 = measure the ranks' matmul rate at start",
              at_least(0));
  keys.flag("run.memory_check", true,
            "refuse to start when the model states need more host memory than the machine has available, or more "
            "room than the NVMe folders' file systems have free");
  keys.text("checkpoint.dir", "checkpoints",
            "folder of the job's checkpoints: step-NNNNNNNN folders and `latest` (docs/checkpoints.md)");
  keys.integer("checkpoint.interval", 0, "save a checkpoint every this many steps; 0 = never by count", at_least(0));
  keys.integer("checkpoint.keep_last", 2, "checkpoints kept under checkpoint.dir; older ones are removed", at_least(1));
  keys.flag("checkpoint.at_end", false, "save a checkpoint after the last step");
  keys.flag("checkpoint.on_signal", true,
            "on SIGTERM or SIGINT, save a checkpoint at the next step boundary, then stop (exit code 0)");
  keys.text("checkpoint.resume", "",
            "resume from this checkpoint: \"latest\" (under checkpoint.dir), a step-NNNNNNNN folder, or a folder "
            "holding `latest`; empty = start afresh (zhost run --resume sets it)");
  keys.text_list("plugins.path", {}, "extra folders to search for plugins");
  keys.choice("log.level", "info", {"trace", "debug", "info", "warn", "error"}, "log verbosity");
}

// Note [Research and test switches]: a user tunes what DeepSpeed or zhost documents as a setting; what zhost
// keeps for research (variants measured in a bench, not shown to pay off everywhere) lives under `experimental.*`,
// what exists for tests (bitwise comparisons, one GPU standing in for several) under `debug.*`. No DeepSpeed key
// maps to either; their long-form prose is beside their bench (bench/*/RESULTS.md), not in docs/config.md.
void add_experimental_keys(HostKeys& keys) {
  keys.number("experimental.delayed_update_extrapolation", 0.0,
              "with zero.offload_optimizer.delayed_update, k: delayed steps run on the last weights extrapolated along "
              "their last "
              "update, W + k (W - W_before); 0 = the stale weights themselves",
              between(0, 8));
  keys.number("experimental.delayed_update_lookahead", 0.0,
              "with zero.offload_optimizer.delayed_update, c: delayed steps also run a step of c lr ahead along the "
              "gradients of the "
              "step in flight, scaled to unit root mean square (Adam and AdamW); 0 = none",
              between(0, 1));
  keys.flag("experimental.checkpoint_async", false,
            "copy the states into host memory at the save and write them while training goes on");
}

// Test switches (Note [Research and test switches]): the GPU ones let one GPU exercise multi-rank CUDA paths
// (scripts/gpu-check).
void add_debug_keys(HostKeys& keys) {
  keys.flag("debug.layer_drop_per_rank", false,
            "tests only: with model.layer_drop, draw the skipped blocks independently on each rank (false: the same "
            "blocks on every rank)");
  keys.flag("debug.deferred_device_copies", false,
            "tests only, CPU jobs: the host claims separate device memory and runs each host-device copy as late "
            "as its ordering allows, so that plugins take their GPU staging path (host/services/device_copies.hpp)");
  keys.flag("debug.share_cuda_device", false,
            "tests only: let a node run more ranks than it has GPUs (rank r on device r mod GPUs), with collectives "
            "of CUDA tensors over Gloo through host memory; slow, for equality tests on one GPU");
  keys.flag("debug.nccl_single_rank", false,
            "tests only: a one-rank job runs its collectives through NCCL instead of completing them locally");
}

}  // namespace

void add_host_keys(Schema& schema) {
  HostKeys keys(schema);
  add_training_keys(keys);
  add_model_keys(keys);
  add_random_ltd_keys(keys);
  add_data_keys(keys);
  add_optimizer_keys(keys);
  add_scheduler_keys(keys);
  add_precision_keys(keys);
  add_zero_keys(keys);
  add_runtime_keys(keys);
  add_experimental_keys(keys);
  add_debug_keys(keys);
  add_host_rules(schema);
  // DeepSpeed's JSON layout, pointed to zhost's tables in unknown-key messages.
  schema.add_rename_hint("zero_optimization", "zero");
  schema.add_rename_hint("optimizer.params", "optimizer");
  schema.add_rename_hint("scheduler.params", "scheduler");
  schema.add_rename_hint("bfloat16", "bf16");
  // Where the research and test switches lived before Note [Research and test switches].
  for (const auto& [before, now] : std::initializer_list<std::pair<const char*, const char*>>{
           {"zero.offload_optimizer.delayed_update_extrapolation", "experimental.delayed_update_extrapolation"},
           {"zero.offload_optimizer.delayed_update_lookahead", "experimental.delayed_update_lookahead"},
           {"zero.stage3_rank_agreement", "experimental.stage3_rank_agreement"},
           {"checkpoint.async", "experimental.checkpoint_async"},
           {"zero.reduce_each_micro_batch", "debug.reduce_each_micro_batch"},
           {"model.layer_drop_per_rank", "debug.layer_drop_per_rank"}})
    schema.add_rename_hint(before, now);
}

}  // namespace zhost::config
