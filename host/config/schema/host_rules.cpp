// host/config/schema/host_rules.cpp: the rules across the host's keys (see host_rules.hpp). Each returns one
// line saying what is wrong and what to write instead; validate() puts the location of the first key
// of the rule that the config sets in front of it.
#include "host/config/schema/host_rules.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <utility>

#include "host/config/schema/host_schema.hpp"
#include "host/config/schema/resolved.hpp"
#include "host/core/text.hpp"

namespace zhost::config {
namespace {

using Problem = std::optional<std::string>;

// The longest folder name Linux file systems take (NAME_MAX).
constexpr size_t kMaxFolderName = 255;
// Token ids a uint16 token file can hold.
constexpr int64_t kUint16Ids = 65536;
// The longest offload tier name (zero.offload_*.device).
constexpr size_t kMaxTierName = 64;
// Text data reads bytes as token ids.
constexpr int64_t kByteIds = 256;

void rule(Schema& schema, std::vector<std::string> keys, std::function<Problem(const ResolvedConfig&)> check) {
  schema.add_rule({std::move(keys), std::move(check)});
}

// A setting that does nothing in this job: a warning, not an error (ConfigRule::warning).
void warning_rule(Schema& schema, std::vector<std::string> keys, std::function<Problem(const ResolvedConfig&)> check) {
  schema.add_rule({std::move(keys), std::move(check), kHostOwner, /*warning=*/true});
}

// `keys` are read only when `selector` holds one of `values` (TOML literals: "\"WarmupLR\"", "true");
// setting one of them to anything but its default otherwise is an error, as for any key nothing reads.
// (Its default is allowed: `zhost config check` prints every key, and its printout must validate again.)
// Note [--set wins over the file]: a --set that changes `selector` makes the file's keys unused without the
// file contradicting itself (`--set data.type=synthetic` on a file with data.path): one warning names them
// all, and the job runs as the command line says. The file's own contradictions, and a --set key that its
// selector does not read, stay errors.
void read_only_when(Schema& schema, const std::string& selector, const std::vector<std::string>& values,
                    const std::vector<std::string>& keys) {
  std::vector<std::string> shown;
  for (const auto& value : values) shown.push_back(selector + " = " + value);
  const std::string readers = text::join(shown, " or ");
  auto by_set = [](const ResolvedConfig& config, const std::string& key) { return config.origin(key) == "--set"; };
  for (const auto& key : keys) {
    rule(schema, {key, selector}, [=, fallback = schema.default_value(key)](const ResolvedConfig& config) -> Problem {
      if (!config.has(key) || config.get(key) == fallback) return std::nullopt;
      const std::string current = to_toml_literal(*config.get(selector));
      if (std::find(values.begin(), values.end(), current) != values.end()) return std::nullopt;
      if (by_set(config, selector) && !by_set(config, key)) return std::nullopt;  // the warning below
      return fmt::format("{} is set, but only {} reads it, and this config has {} = {}; remove it, or change {}", key,
                         readers, selector, current, selector);
    });
  }
  std::vector<std::string> rule_keys = {selector};
  rule_keys.insert(rule_keys.end(), keys.begin(), keys.end());
  std::vector<std::optional<ConfigValue>> fallbacks;
  for (const auto& key : keys) fallbacks.push_back(schema.default_value(key));
  warning_rule(schema, rule_keys, [=](const ResolvedConfig& config) -> Problem {
    if (!by_set(config, selector)) return std::nullopt;
    const std::string current = to_toml_literal(*config.get(selector));
    if (std::find(values.begin(), values.end(), current) != values.end()) return std::nullopt;
    std::vector<std::string> unused;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!config.has(keys[i]) || config.get(keys[i]) == fallbacks[i] || by_set(config, keys[i])) continue;
      std::string place = config.location(keys[i]);
      place.pop_back();  // the trailing ':'
      unused.push_back(fmt::format("{} (at {})", keys[i], place));
    }
    if (unused.empty()) return std::nullopt;
    return fmt::format("{} = {} overrides the file, so its {} {} unused (only {} reads {}); the command line wins",
                       selector, current, text::join(unused, ", "), unused.size() == 1 ? "is" : "are", readers,
                       unused.size() == 1 ? "it" : "them");
  });
}

// 16-bit master weights (Note [bf16 master weights] in zhost/kit/cpu_optimizer.hpp): DeepSpeed's own asserts first
// (runtime/config.py, base_optimizer.py _configure_master_weights), with their reasons, then what zhost does not
// build. `type` is "bf16" or "fp16": its <type>.master_weights_and_grads, trained with <type>.enabled; bf16 masters
// may stay on the device with bf16 states (Note [bf16 masters without offload] in zhost/kit/optimizer.hpp).
Problem master_weights_problem(const ResolvedConfig& config, const std::string& type) {
  const std::string key = type + ".master_weights_and_grads";
  if (!config.get_bool(key)) return std::nullopt;
  if (config.get_int("zero.stage") == 0)
    return fmt::format(
        "{} = true needs zero.stage 1, 2 or 3 (DeepSpeed: {} master weights and gradients are only supported with "
        "ZeRO stages 1-3); set zero.stage, or remove it",
        key, type);
  if (type == "fp16" && config.get_bool("bf16.master_weights_and_grads"))
    return std::string(
        "fp16.master_weights_and_grads and bf16.master_weights_and_grads are both true, and DeepSpeed takes one "
        "(they are mutually exclusive); remove one");
  const std::string& device = config.get_string("zero.offload_optimizer.device");
  const std::string& optimizer = config.get_string("optimizer.type");
  if (device == "nvme")  // DeepSpeed's stage 3 takes it; zhost keeps 16-bit masters in host memory only
    return fmt::format(
        "{} = true with zero.offload_optimizer.device = \"nvme\" is not built (zhost keeps {} master weights in host "
        "memory); use \"cpu\", or remove it",
        key, type);
  const bool adam = optimizer == "Adam" || optimizer == "AdamW";
  // DeepSpeed keeps bf16 masters with bf16 states on the device without offload; zhost's stages step them with its
  // Adam kinds.
  if (type == "bf16" && device == "none" && config.get_bool("bf16.optimizer_states")) {
    if (!adam)
      return fmt::format(
          "{} = true without ZeRO-Offload is built for optimizer.type Adam and AdamW, and this config has {}; use one "
          "of them, or remove it",
          key, optimizer);
  } else if (type == "bf16" && device == "none" && adam) {
    return fmt::format(
        "{} = true without ZeRO-Offload needs bf16.optimizer_states = true, as in DeepSpeed (fp32 moments beside bf16 "
        "masters need its CPU Adam); set bf16.optimizer_states = true or zero.offload_optimizer.device = \"cpu\", or "
        "remove it",
        key);
  } else if (device != "cpu" || !adam) {
    return fmt::format(
        "{} = true needs ZeRO-Offload with DeepSpeed's CPU Adam, as in DeepSpeed (zero.offload_optimizer.device = "
        "\"cpu\" and optimizer.type Adam or AdamW; this config has \"{}\" and {}); set them, or remove it",
        key, text::excerpt(device), optimizer);
  }
  if (!config.get_bool(type + ".enabled"))
    return fmt::format(
        "{} = true is built for {} training, and {}.enabled is false; set {}.enabled = true, or remove it", key, type,
        type, type);
  if (config.get_string("zero.offload_optimizer.storage") != "none")
    return fmt::format(
        "{} = true keeps the masters in host memory: a storage tier under the CPU tier "
        "(zero.offload_optimizer.storage = \"{}\") is not built for them; remove one of the two",
        key, text::excerpt(config.get_string("zero.offload_optimizer.storage")));
  if (!config.get_string_list("zero.offload_optimizer.swap_schedule").empty())
    return fmt::format(
        "{} = true keeps the masters in host memory: zero.offload_optimizer.swap_schedule is not built for them; "
        "remove one of the two",
        key);
  return std::nullopt;
}

void add_master_weights_rules(Schema& schema) {
  for (const std::string type : {"bf16", "fp16"}) {
    std::vector<std::string> keys = {type + ".master_weights_and_grads",
                                     "zero.stage",
                                     "zero.offload_optimizer.device",
                                     "optimizer.type",
                                     type + ".enabled",
                                     "zero.offload_optimizer.storage",
                                     "zero.offload_optimizer.swap_schedule",
                                     "bf16.optimizer_states"};
    if (type == "fp16") keys.push_back("bf16.master_weights_and_grads");
    rule(schema, std::move(keys),
         [type](const ResolvedConfig& config) { return master_weights_problem(config, type); });
  }
  rule(schema, {"bf16.optimizer_states", "bf16.master_weights_and_grads", "zero.stage"},
       [](const ResolvedConfig& config) -> Problem {
         if (!config.get_bool("bf16.optimizer_states")) return std::nullopt;
         if (config.get_int("zero.stage") == 0)
           return std::string(
               "bf16.optimizer_states = true needs zero.stage 1, 2 or 3 (DeepSpeed: bf16 optimizer states are only "
               "supported with ZeRO stages 1-3); set zero.stage, or remove it");
         if (!config.get_bool("bf16.master_weights_and_grads"))
           return std::string(
               "bf16.optimizer_states = true needs bf16.master_weights_and_grads = true, as in DeepSpeed; set it, or "
               "remove bf16.optimizer_states");
         return std::nullopt;
       });
}

void add_precision_rules(Schema& schema) {
  rule(schema, {"fp16.enabled", "bf16.enabled"}, [](const ResolvedConfig& config) -> Problem {
    if (!config.get_bool("fp16.enabled") || !config.get_bool("bf16.enabled")) return std::nullopt;
    std::string bf16_location = config.location("bf16.enabled");
    bf16_location.pop_back();  // the trailing ':'
    return fmt::format(
        "fp16.enabled and bf16.enabled are both true (bf16.enabled from {}); keep one: bf16 where the GPU supports "
        "it (Ampere or newer), fp16 otherwise",
        bf16_location);
  });
  read_only_when(schema, "fp16.enabled", {"true"},
                 {"fp16.loss_scale", "fp16.initial_scale_power", "fp16.loss_scale_window", "fp16.hysteresis",
                  "fp16.consecutive_hysteresis", "fp16.min_loss_scale"});
  add_master_weights_rules(schema);
}

void add_optimizer_rules(Schema& schema) {
  rule(schema, {"optimizer.betas"}, [](const ResolvedConfig& config) -> Problem {
    if (!config.has("optimizer.betas")) return std::nullopt;
    const size_t count = config.get_float_list("optimizer.betas").size();
    if (count == 2) return std::nullopt;
    return fmt::format(
        "optimizer.betas holds {} number{}, but it takes exactly two, [beta1, beta2]; write e.g. "
        "betas = [0.9, 0.999]",
        count, count == 1 ? "" : "s");
  });
  read_only_when(schema, "optimizer.type", {"\"AdamW\"", "\"Adam\"", "\"Lion\"", "\"Lamb\""}, {"optimizer.betas"});
  read_only_when(schema, "optimizer.type", {"\"AdamW\"", "\"Adam\"", "\"Lamb\""},
                 {"optimizer.eps", "optimizer.bias_correction"});
  read_only_when(schema, "optimizer.type", {"\"Lamb\""}, {"optimizer.max_coeff", "optimizer.min_coeff"});
  rule(schema, {"optimizer.min_coeff", "optimizer.max_coeff"}, [](const ResolvedConfig& config) -> Problem {
    const double low = config.get_float("optimizer.min_coeff"), high = config.get_float("optimizer.max_coeff");
    if (low <= high) return std::nullopt;
    return fmt::format("optimizer.min_coeff ({}) is above optimizer.max_coeff ({}); swap them", low, high);
  });
  // Note [Lamb steps whole parameters] (sdk/kit/src/optimizer.cpp).
  rule(schema, {"optimizer.type", "zero.stage"}, [](const ResolvedConfig& config) -> Problem {
    if (config.get_string("optimizer.type") != "Lamb" || config.get_int("zero.stage") == 0) return std::nullopt;
    return fmt::format(
        "optimizer.type = \"Lamb\" needs zero.stage = 0: its trust ratio is a norm over each whole parameter, "
        "and zero.stage = {} steps flat partitions of them (DeepSpeed refuses Lamb under ZeRO too, unless told "
        "to step it untested); set zero.stage = 0, or choose AdamW",
        config.get_int("zero.stage"));
  });
  read_only_when(schema, "optimizer.type", {"\"Adam\""}, {"optimizer.adam_w_mode"});
  read_only_when(schema, "optimizer.type", {"\"SGD\""}, {"optimizer.momentum"});
}

void add_scheduler_rules(Schema& schema) {
  const std::string kWarmupLr = "\"WarmupLR\"", kDecay = "\"WarmupDecayLR\"", kCosine = "\"WarmupCosineLR\"";
  read_only_when(schema, "scheduler.type", {kWarmupLr, kDecay}, {"scheduler.warmup_min_lr", "scheduler.warmup_max_lr"});
  read_only_when(schema, "scheduler.type", {kWarmupLr, kDecay, kCosine},
                 {"scheduler.warmup_num_steps", "scheduler.warmup_type"});
  read_only_when(schema, "scheduler.type", {kDecay, kCosine}, {"scheduler.total_num_steps"});
  read_only_when(schema, "scheduler.type", {kCosine}, {"scheduler.warmup_min_ratio", "scheduler.cos_min_ratio"});
  read_only_when(
      schema, "scheduler.type", {"\"OneCycle\""},
      {"scheduler.cycle_min_lr", "scheduler.cycle_max_lr", "scheduler.cycle_first_step_size",
       "scheduler.cycle_second_step_size", "scheduler.cycle_first_stair_count", "scheduler.cycle_second_stair_count",
       "scheduler.decay_step_size", "scheduler.decay_lr_rate", "scheduler.cycle_momentum"});
  read_only_when(schema, "scheduler.cycle_momentum", {"true"},
                 {"scheduler.cycle_min_mom", "scheduler.cycle_max_mom", "scheduler.decay_mom_rate"});
  // Note [OneCycle's momentum]: after the cycle beta1 grows by decay_mom_rate per decay step, without bound.
  rule(schema,
       {"scheduler.decay_mom_rate", "scheduler.cycle_max_mom", "scheduler.decay_step_size", "scheduler.cycle_momentum",
        "scheduler.type", "scheduler.cycle_first_step_size", "scheduler.cycle_second_step_size", "steps"},
       [](const ResolvedConfig& config) -> Problem {
         const double rate = config.get_float("scheduler.decay_mom_rate");
         const int64_t decay_step = config.get_int("scheduler.decay_step_size");
         if (config.get_string("scheduler.type") != "OneCycle" || !config.get_bool("scheduler.cycle_momentum") ||
             rate == 0 || decay_step == 0)
           return std::nullopt;
         const int64_t first = config.get_int("scheduler.cycle_first_step_size");
         const int64_t second = config.get_int("scheduler.cycle_second_step_size");
         const int64_t cycle = first + (second > 0 ? second : first);
         // The last step uses the betas of iteration steps - 2 (Note [OneCycle's momentum]).
         const int64_t after = config.get_int("steps") - 2 - cycle + 1;
         if (after <= 0) return std::nullopt;
         const double peak = config.get_float("scheduler.cycle_max_mom") *
                             (1.0 + rate * static_cast<double>(after) / static_cast<double>(decay_step));
         if (peak < 1) return std::nullopt;
         return fmt::format(
             "scheduler.decay_mom_rate = {} raises OneCycle's beta1 to {:.4g} by the last of {} steps, and a beta1 of "
             "1 or more makes the optimizer diverge; lower it, or set 0 to keep cycle_max_mom after the cycle",
             rate, peak, config.get_int("steps"));
       });
  read_only_when(schema, "scheduler.type", {"\"LRRangeTest\""},
                 {"scheduler.lr_range_test_min_lr", "scheduler.lr_range_test_step_size",
                  "scheduler.lr_range_test_step_rate", "scheduler.lr_range_test_staircase"});
  rule(schema, {"scheduler.type", "scheduler.cycle_min_lr", "scheduler.cycle_max_lr"},
       [](const ResolvedConfig& config) -> Problem {
         if (config.get_string("scheduler.type") != "OneCycle") return std::nullopt;
         bool has_min = config.has("scheduler.cycle_min_lr");
         bool has_max = config.has("scheduler.cycle_max_lr");
         if (!has_min || !has_max) {
           return std::string(
               "scheduler.type = \"OneCycle\" needs scheduler.cycle_min_lr and scheduler.cycle_max_lr; set both "
               "under [scheduler], e.g. cycle_min_lr = 1e-5 and cycle_max_lr = 1e-3");
         }
         double low = config.get_float("scheduler.cycle_min_lr");
         double high = config.get_float("scheduler.cycle_max_lr");
         if (low <= high) return std::nullopt;
         return fmt::format("scheduler.cycle_min_lr ({}) is above scheduler.cycle_max_lr ({}); swap them", low, high);
       });
  // WarmupDecayLR and WarmupCosineLR run over total_num_steps, or `steps` when that is 0.
  rule(schema, {"scheduler.total_num_steps", "steps", "scheduler.type"}, [](const ResolvedConfig& config) -> Problem {
    const std::string& type = config.get_string("scheduler.type");
    if (type != "WarmupDecayLR" && type != "WarmupCosineLR") return std::nullopt;
    if (config.get_int("scheduler.total_num_steps") > 0 || config.get_int("steps") > 0) return std::nullopt;
    return fmt::format(
        "scheduler.type = \"{}\" needs a schedule length, but scheduler.total_num_steps and steps "
        "are both 0; set scheduler.total_num_steps (or steps) to 1 or more",
        type);
  });
}

void add_model_rules(Schema& schema) {
  // A Hugging Face model (model.type = "hf") takes its dimensions from its config.json.
  read_only_when(schema, "model.type", {"\"mlp\"", "\"gpt\"", "\"llama\""},
                 {"model.layers", "model.width", "model.ffn_width", "model.vocab", "model.init_std"});
  read_only_when(schema, "model.type", {"\"hf\""}, {"model.path"});
  rule(schema, {"model.type", "model.path"}, [](const ResolvedConfig& config) -> Problem {
    if (config.get_string("model.type") != "hf" || !config.get_string("model.path").empty()) return std::nullopt;
    return std::string(
        "model.type = \"hf\" needs model.path, the Hugging Face model folder (config.json and model.safetensors "
        "or model.safetensors.index.json); set it under [model]");
  });
  read_only_when(schema, "model.type", {"\"gpt\"", "\"llama\""}, {"model.heads"});
  read_only_when(schema, "model.type", {"\"llama\""}, {"model.kv_heads"});  // gpt has no grouped-query attention
  rule(schema, {"model.width", "model.heads", "model.type"}, [](const ResolvedConfig& config) -> Problem {
    int64_t width = config.get_int("model.width");
    int64_t heads = config.get_int("model.heads");
    if (config.get_string("model.type") == "mlp" || width % heads == 0) return std::nullopt;
    return fmt::format(
        "model.width = {} is not divisible by model.heads = {}; pick a width that is a multiple of "
        "heads, e.g. {}",
        width, heads, (width / heads + 1) * heads);
  });
  rule(schema, {"model.kv_heads", "model.heads"}, [](const ResolvedConfig& config) -> Problem {
    int64_t kv_heads = config.get_int("model.kv_heads");
    int64_t heads = config.get_int("model.heads");
    if (kv_heads == 0 || heads % kv_heads == 0) return std::nullopt;
    return fmt::format(
        "model.heads = {} is not divisible by model.kv_heads = {}; use kv_heads that divides heads "
        "(1, a divisor of heads, or 0 = same as heads)",
        heads, kv_heads);
  });
  // Rotary embeddings rotate pairs of channels within each head.
  rule(schema, {"model.width", "model.heads", "model.type"}, [](const ResolvedConfig& config) -> Problem {
    int64_t width = config.get_int("model.width");
    int64_t heads = config.get_int("model.heads");
    if (config.get_string("model.type") != "llama" || width % heads != 0 || (width / heads) % 2 == 0)
      return std::nullopt;
    return fmt::format(
        "model.type = \"llama\" needs an even head dimension for its rotary embedding, but "
        "model.width / model.heads = {} / {} = {}; change width or heads, e.g. width = {}",
        width, heads, width / heads, width + heads);
  });
}

// Note [Random-LTD] (host/engine/random_ltd.hpp): the schedule's keys need layers; the layers must exist and see
// positions through the embedding (llama's rotary ones are refused; an HF folder's model is checked when it loads).
void add_random_ltd_rules(Schema& schema) {
  const std::vector<std::string> schedule = {"random_ltd.min_tokens", "random_ltd.max_tokens",
                                             "random_ltd.require_steps", "random_ltd.tokens_per_increase"};
  for (const std::string& key : schedule) {
    rule(schema, {key, "random_ltd.layers"},
         [key, fallback = schema.default_value(key)](const ResolvedConfig& config) -> Problem {
           if (!config.has(key) || config.get(key) == fallback || !config.get_float_list("random_ltd.layers").empty())
             return std::nullopt;
           return fmt::format(
               "{} is set, but random_ltd.layers is empty, so random-LTD is off; list the layers in "
               "random_ltd.layers, or remove it",
               key);
         });
  }
  rule(schema, {"random_ltd.layers", "model.type", "model.layers"}, [](const ResolvedConfig& config) -> Problem {
    const std::vector<double>& layers = config.get_float_list("random_ltd.layers");
    if (layers.empty()) return std::nullopt;
    const std::string& type = config.get_string("model.type");
    if (type == "llama")
      return std::string(
          "random_ltd.layers is set, and model.type = \"llama\" computes rotary positions in every layer, which "
          "would renumber the tokens a layer keeps; random-LTD is built for gpt and GPT-2 (learned positions); "
          "remove random_ltd.layers, or use model.type = \"gpt\"");
    const int64_t count = config.get_int("model.layers");
    for (size_t i = 0; i < layers.size(); ++i) {
      const double layer = layers[i];
      if (layer != std::floor(layer) || layer < 0 || (type != "hf" && layer >= static_cast<double>(count)))
        return fmt::format(
            "random_ltd.layers[{}] = {} is not a layer of this model: layers count from 0 to model.layers - 1 = {}; "
            "fix it",
            i, layer, count - 1);
      if (i > 0 && layer <= layers[i - 1])
        return fmt::format("random_ltd.layers must ascend without repeats, and [{}] = {} follows {}; sort them", i,
                           layer, layers[i - 1]);
    }
    return std::nullopt;
  });
  rule(schema, {"random_ltd.min_tokens", "random_ltd.max_tokens", "random_ltd.tokens_per_increase", "model.seq_len"},
       [](const ResolvedConfig& config) -> Problem {
         const int64_t low = config.get_int("random_ltd.min_tokens"),
                       step = config.get_int("random_ltd.tokens_per_increase");
         const int64_t high = config.get_int("random_ltd.max_tokens") == 0 ? config.get_int("model.seq_len")
                                                                           : config.get_int("random_ltd.max_tokens");
         if (low > high)
           return fmt::format("random_ltd.min_tokens = {} is above the schedule's end ({}); lower it", low, high);
         if (low < step)
           return fmt::format(
               "random_ltd.min_tokens = {} is below random_ltd.tokens_per_increase = {}, so the schedule would start "
               "at 0 tokens (it keeps multiples of it); raise min_tokens or lower tokens_per_increase",
               low, step);
         return std::nullopt;
       });
}

void add_data_rules(Schema& schema) {
  read_only_when(schema, "data.type", {"\"tokens\"", "\"text\""}, {"data.path"});
  read_only_when(schema, "data.type", {"\"tokens\""}, {"data.token_dtype"});
  read_only_when(schema, "data.type", {"\"text\""}, {"data.tokenizer"});
  rule(schema, {"data.type", "data.path"}, [](const ResolvedConfig& config) -> Problem {
    const std::string& type = config.get_string("data.type");
    if (type == "synthetic" || !config.get_string("data.path").empty()) return std::nullopt;
    return fmt::format(
        "data.type = \"{}\" reads a file, but data.path is empty; set data.path to the file, or use "
        "data.type = \"synthetic\"",
        type);
  });
  rule(schema, {"model.vocab", "data.type", "data.tokenizer"}, [](const ResolvedConfig& config) -> Problem {
    int64_t vocab = config.get_int("model.vocab");
    if (config.get_string("data.type") != "text" || vocab >= kByteIds) return std::nullopt;
    if (!config.get_string("data.tokenizer").empty()) return std::nullopt;  // the tokenizer's ids, checked at open
    return fmt::format(
        "model.vocab = {} is too small for data.type = \"text\", which uses the byte values 0..255 "
        "as token ids; set model.vocab to 256 or more",
        vocab);
  });
  rule(schema, {"data.token_dtype", "model.vocab", "data.type"}, [](const ResolvedConfig& config) -> Problem {
    int64_t vocab = config.get_int("model.vocab");
    if (config.get_string("data.type") != "tokens" || config.get_string("data.token_dtype") != "uint16" ||
        vocab <= kUint16Ids)
      return std::nullopt;
    return fmt::format(
        "model.vocab = {} does not fit data.token_dtype = \"uint16\" (ids 0..65535); set "
        "data.token_dtype = \"uint32\" for a file of 4-byte ids, or a vocab of at most 65536",
        vocab);
  });
}

void add_zero_rules(Schema& schema) {
  // A tier's name becomes the capability "offload:NAME" that its plugin provides.
  for (const char* key :
       {"zero.offload_optimizer.device", "zero.offload_optimizer.storage", "zero.offload_param.device"}) {
    rule(schema, {key}, [key = std::string(key)](const ResolvedConfig& config) -> Problem {
      const std::string& device = config.get_string(key);
      if (device.empty()) {
        return fmt::format(
            "{} is empty; write \"none\" for no offload, \"cpu\" for host memory, or a "
            "third-party tier's name",
            key);
      }
      auto is_name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; };
      if (device.size() <= kMaxTierName && std::all_of(device.begin(), device.end(), is_name_char)) return std::nullopt;
      return fmt::format(
          "{} = {} is not a tier name (up to {} letters, digits, _ and -); write \"none\", "
          "\"cpu\", or a third-party tier's name",
          key, to_toml_literal(text::excerpt(device)), kMaxTierName);
    });
  }
  // DeepSpeed's offload needs partitioned states: the optimizer's from stage 1, the parameters' at stage 3.
  rule(schema, {"zero.offload_optimizer.device", "zero.stage"}, [](const ResolvedConfig& config) -> Problem {
    const std::string& device = config.get_string("zero.offload_optimizer.device");
    if (device == "none" || config.get_int("zero.stage") >= 1) return std::nullopt;
    return fmt::format(
        "zero.offload_optimizer.device = \"{}\" needs zero.stage 1, 2 or 3 (stage 0 keeps whole "
        "optimizer states on every rank); set zero.stage = 2",
        text::excerpt(device));
  });
  rule(schema, {"zero.offload_param.device", "zero.stage"}, [](const ResolvedConfig& config) -> Problem {
    const std::string& device = config.get_string("zero.offload_param.device");
    if (device == "none" || config.get_int("zero.stage") == 3) return std::nullopt;
    return fmt::format(
        "zero.offload_param.device = \"{}\" needs zero.stage = 3 (only stage 3 partitions "
        "parameters)",
        text::excerpt(device));
  });
  // ZeRO++ transforms stage 3's parameter gathers and gradient reduce-scatters (docs/zeropp.md); below stage 3
  // there are no parameter gathers and DeepSpeed ignores the keys, which would leave a config meaning less
  // than it says.
  for (const char* key : {"zero.zero_quantized_weights", "zero.zero_quantized_gradients"}) {
    rule(schema, {key, "zero.stage"}, [key](const ResolvedConfig& config) -> Problem {
      if (!config.get_bool(key) || config.get_int("zero.stage") == 3) return std::nullopt;
      return fmt::format(
          "{} = true needs zero.stage = 3 (ZeRO++ quantizes stage 3's parameter gathers and "
          "gradient reductions; zero.stage is {}); set zero.stage = 3 or {} = false",
          key, config.get_int("zero.stage"), key);
    });
  }
  rule(schema, {"zero.zero_hpz_partition_size", "zero.stage"}, [](const ResolvedConfig& config) -> Problem {
    const int64_t size = config.get_int("zero.zero_hpz_partition_size");
    if (size == 1 || config.get_int("zero.stage") == 3) return std::nullopt;
    return fmt::format(
        "zero.zero_hpz_partition_size = {} needs zero.stage = 3 (hpZ keeps a secondary copy of "
        "stage 3's parameter shards; zero.stage is {}); set zero.stage = 3 or the size to 1",
        size, config.get_int("zero.stage"));
  });
  // LoCo feeds qgZ's quantization error back (Note [LoCo error feedback] in zhost/kit/zeropp_quant.hpp): without
  // qgZ there is nothing to feed back, and under dynamic fp16 loss scaling the kept error would be in the units
  // of an older scale (DeepSpeed rescales it; zhost does not yet).
  rule(schema, {"zero.zeropp_loco_param.enabled", "zero.zero_quantized_gradients", "fp16.enabled", "fp16.loss_scale"},
       [](const ResolvedConfig& config) -> Problem {
         if (!config.get_bool("zero.zeropp_loco_param.enabled")) return std::nullopt;
         if (!config.get_bool("zero.zero_quantized_gradients"))
           return std::string(
               "zero.zeropp_loco_param.enabled = true needs zero.zero_quantized_gradients = true (LoCo compensates "
               "qgZ's gradient quantization); turn qgZ on or remove zeropp_loco_param");
         if (config.get_bool("fp16.enabled") && config.get_float("fp16.loss_scale") == 0)
           return std::string(
               "zero.zeropp_loco_param with dynamic fp16 loss scaling is not supported (LoCo's kept error would "
               "not follow the changing scale); use bf16, fp32, or a static fp16.loss_scale");
         return std::nullopt;
       });
}

// The gradients' division before their reduction (Note [Gradient pre-division], host/engine/trainer.cpp).
void add_gradient_rules(Schema& schema) {
  // As in DeepSpeed, prescale_gradients divides by the world size and the factor is not used.
  warning_rule(
      schema, {"gradient_predivide_factor", "prescale_gradients"}, [](const ResolvedConfig& config) -> Problem {
        if (!config.get_bool("prescale_gradients") || config.get_float("gradient_predivide_factor") == 1.0)
          return std::nullopt;
        return fmt::format(
            "gradient_predivide_factor = {:g} has no effect: prescale_gradients = true divides by the world size "
            "instead, as in DeepSpeed; set one of them",
            config.get_float("gradient_predivide_factor"));
      });
}

// ZeRO-Offload's delayed parameter update (Note [Delayed parameter update], zhost/zero/delayed_update.hpp): the
// offload tier's step is what is delayed; its start step and its two weight predictions come with it.
void add_delayed_update_rules(Schema& schema) {
  rule(schema,
       {"zero.offload_optimizer.delayed_update", "zero.offload_optimizer.device", "zero.stage",
        "zero.offload_param.device"},
       [](const ResolvedConfig& config) -> Problem {
         if (!config.get_bool("zero.offload_optimizer.delayed_update")) return std::nullopt;
         if (config.get_string("zero.offload_optimizer.device") == "none")
           return std::string(
               "zero.offload_optimizer.delayed_update = true delays the offload tier's optimizer step, and this "
               "config has no tier running the optimizer; set zero.offload_optimizer.device = \"cpu\", or remove it");
         const int64_t stage = config.get_int("zero.stage");
         if (stage == 0)
           return std::string(
               "zero.offload_optimizer.delayed_update = true is built for zero.stage 1, 2 and 3, and this config has "
               "zero.stage = 0; use stage 1, 2 or 3, or remove it");
         // Stage 3 gathers its parameters from their shards during the step in flight; shards kept in a tier
         // would be loaded from the tier that is stepping.
         if (stage == 3 && config.get_string("zero.offload_param.device") != "none")
           return fmt::format(
               "zero.offload_optimizer.delayed_update = true at zero.stage 3 is built with the parameter shards in "
               "device memory, and this config has zero.offload_param.device = \"{}\"; set it to \"none\", or "
               "remove delayed_update",
               config.get_string("zero.offload_param.device"));
         return std::nullopt;
       });
  // The start step is a step number of the whole job (a resumed job counts on), so a run shorter than it is a
  // warning: its continuation may reach it.
  warning_rule(schema,
               {"zero.offload_optimizer.delayed_update_start_step", "zero.offload_optimizer.delayed_update", "steps"},
               [](const ResolvedConfig& config) -> Problem {
                 const int64_t start = config.get_int("zero.offload_optimizer.delayed_update_start_step");
                 if (!config.get_bool("zero.offload_optimizer.delayed_update")) {
                   if (start == kDelayedUpdateStartDefault) return std::nullopt;
                   return fmt::format(
                       "zero.offload_optimizer.delayed_update_start_step = {} has no effect: it is the first delayed "
                       "step of zero.offload_optimizer.delayed_update, which is false",
                       start);
                 }
                 if (start <= config.get_int("steps")) return std::nullopt;
                 return fmt::format(
                     "zero.offload_optimizer.delayed_update = true delays no step of this job: its {} steps end "
                     "before zero.offload_optimizer.delayed_update_start_step = {}{}; set a start step of at most "
                     "{} to delay within this job",
                     config.get_int("steps"), start,
                     start == kDelayedUpdateStartDefault ? " (the default: the first 40 steps are synchronous)" : "",
                     config.get_int("steps"));
               });
  // The delayed update's two weight predictions (Note [Delayed parameter update]) do nothing without it.
  for (const auto& [key, does] : {std::pair<const char*, const char*>{"extrapolation", "extrapolates"},
                                  std::pair<const char*, const char*>{"lookahead", "looks ahead from"}})
    warning_rule(schema, {std::string("experimental.delayed_update_") + key, "zero.offload_optimizer.delayed_update"},
                 [path = std::string("experimental.delayed_update_") + key,
                  does = std::string(does)](const ResolvedConfig& config) -> Problem {
                   const double value = config.get_float(path);
                   if (value == 0 || config.get_bool("zero.offload_optimizer.delayed_update")) return std::nullopt;
                   return fmt::format(
                       "{} = {:g} has no effect: it {} the weights of "
                       "zero.offload_optimizer.delayed_update, which is false",
                       path, value, does);
                 });
  // Note [Delayed parameter update], lookahead: a step of Adam's size, c lr per element on average.
  rule(schema, {"experimental.delayed_update_lookahead", "zero.offload_optimizer.delayed_update", "optimizer.type"},
       [](const ResolvedConfig& config) -> Problem {
         const double c = config.get_float("experimental.delayed_update_lookahead");
         if (c == 0 || !config.get_bool("zero.offload_optimizer.delayed_update")) return std::nullopt;
         const std::string type = config.get_string("optimizer.type");
         if (type == "Adam" || type == "AdamW") return std::nullopt;
         return fmt::format(
             "experimental.delayed_update_lookahead = {:g} takes a step of Adam's size, and optimizer.type "
             "is \"{}\"; set it to 0, or use Adam or AdamW",
             c, type);
       });
}

// The offload tiers' host keys (docs/config.md "NVMe offload"; the NVMe tier checks its own folders, Note
// [Plugin config checks]): what zhost's tiers do not do is refused with the reason.
void add_offload_rules(Schema& schema) {
  // Note [Storage swap] (host/engine/storage_swap.hpp): swaps happen between steps, with nothing of the tiers in
  // flight (a delayed update drains first), in step order.
  auto check_schedule = [](const ResolvedConfig& config, const std::string& key) -> Problem {
    std::string problem;
    const std::vector<StorageSwapPoint> schedule = storage_swap_schedule(config, key, &problem);
    if (!problem.empty()) return problem;
    if (schedule.empty()) return std::nullopt;
    int64_t previous = 0;
    for (const StorageSwapPoint& point : schedule) {
      if (point.after_step <= previous)
        return fmt::format(
            "{}: \"{}:{}\" comes after a swap at step {}; list the steps in increasing order, one swap "
            "per step",
            key, point.after_step, point.storage, previous);
      if (point.after_step >= config.get_int("steps"))
        return fmt::format("{}: \"{}:{}\" would swap after the job's last step ({} steps); use a step below {}", key,
                           point.after_step, point.storage, config.get_int("steps"), config.get_int("steps"));
      previous = point.after_step;
    }
    // A swap into the storage already in use would copy the data onto itself and then drop it.
    std::string current = initial_swap_storage(config, key);
    for (const StorageSwapPoint& point : schedule) {
      const std::string to = point.storage == "none" ? "cpu" : point.storage;
      if (to == current)
        return fmt::format("{}: \"{}:{}\" moves them into '{}', where they already are; name another storage", key,
                           point.after_step, point.storage, current);
      current = to;
    }
    return std::nullopt;
  };
  rule(schema, {"zero.offload_optimizer.swap_schedule", "zero.offload_optimizer.device", "steps"},
       [check_schedule](const ResolvedConfig& config) -> Problem {
         if (!config.get_string_list("zero.offload_optimizer.swap_schedule").empty() &&
             config.get_string("zero.offload_optimizer.device") == "none")
           return std::string(
               "zero.offload_optimizer.swap_schedule moves the optimizer's states between storages under the tier "
               "that runs the optimizer, and this config has none; set zero.offload_optimizer.device = \"cpu\"");
         return check_schedule(config, "zero.offload_optimizer.swap_schedule");
       });
  rule(schema, {"zero.offload_param.swap_schedule", "zero.offload_param.device", "zero.stage", "steps"},
       [check_schedule](const ResolvedConfig& config) -> Problem {
         if (!config.get_string_list("zero.offload_param.swap_schedule").empty() &&
             config.get_string("zero.offload_param.device") == "none")
           return std::string(
               "zero.offload_param.swap_schedule moves stage 3's parameter shards between storing tiers, and this "
               "config keeps them in none; set zero.offload_param.device = \"cpu\" (at zero.stage 3)");
         for (const StorageSwapPoint& point : storage_swap_schedule(config, "zero.offload_param.swap_schedule"))
           if (point.storage == "none")
             return fmt::format(
                 "zero.offload_param.swap_schedule \"{}:none\": stage 3 keeps offloaded shards in a tier for the "
                 "whole job; name one (cpu, nvme or a storing tier)",
                 point.after_step);
         return check_schedule(config, "zero.offload_param.swap_schedule");
       });
  rule(schema, {"aio.use_gds"}, [](const ResolvedConfig& config) -> Problem {
    if (!config.get_bool("aio.use_gds")) return std::nullopt;
    return std::string(
        "aio.use_gds = true is not supported: GPUDirect Storage moves data between NVMe and GPU memory "
        "through NVIDIA's cuFile, which this build does not have; remove it");
  });
  // DeepSpeed's pipelined swapping: the CPU tier's staging areas over a storage tier (Note [Storage pipeline]).
  rule(schema,
       {"zero.offload_optimizer.buffer_count", "zero.offload_optimizer.pipeline_read",
        "zero.offload_optimizer.pipeline_write", "zero.offload_optimizer.device", "zero.offload_optimizer.storage",
        "zero.offload_optimizer.swap_schedule"},
       [](const ResolvedConfig& config) -> Problem {
         const bool stored = config.tiers().device_stores.count(config.get_string("zero.offload_optimizer.device")) ||
                             config.get_string("zero.offload_optimizer.storage") != "none" ||
                             !config.get_string_list("zero.offload_optimizer.swap_schedule").empty();
         const bool read = config.get_bool("zero.offload_optimizer.pipeline_read");
         const bool pipelined = read || config.get_bool("zero.offload_optimizer.pipeline_write");
         const int64_t count = config.get_int("zero.offload_optimizer.buffer_count");
         if ((pipelined || count != 4) && !stored)
           return std::string(
               "zero.offload_optimizer.buffer_count, pipeline_read and pipeline_write pace the CPU tier over a "
               "storage tier, and this config has none (nor a swap_schedule); set zero.offload_optimizer.device = "
               "\"nvme\", or remove them");
         if (read && count < 2)
           return fmt::format(
               "zero.offload_optimizer.pipeline_read = true reads the next chunk into a second staging area, but "
               "zero.offload_optimizer.buffer_count = {}; set buffer_count to 2 or more",
               count);
         return std::nullopt;
       });
  // DeepSpeed's fast_init speeds up building the fp32 masters of parameters already swapped out to NVMe by
  // reading them back in batches. zhost never reads them back: each sub-group's master is built from its
  // parameters in memory before either goes to NVMe. So true gives what it asks for, and says so.
  warning_rule(schema, {"zero.offload_optimizer.fast_init"}, [](const ResolvedConfig& config) -> Problem {
    if (!config.get_bool("zero.offload_optimizer.fast_init")) return std::nullopt;
    return std::string(
        "zero.offload_optimizer.fast_init = true changes nothing: zhost builds each sub-group's fp32 master "
        "weights from its parameters in memory before either goes to NVMe, so there is no slow initial read "
        "from NVMe to speed up");
  });
}

// run.name is one folder inside run.dir: never a path that leaves it, and short enough to be a name.
void add_run_rules(Schema& schema) {
  rule(schema, {"run.name"}, [](const ResolvedConfig& config) -> Problem {
    const std::string& name = config.get_string("run.name");
    const std::string shown = to_toml_literal(text::excerpt(name));
    if (name.find('\0') != std::string::npos) {
      return std::string(
          "run.name contains a NUL character, which no folder name can hold; write a plain folder "
          "name such as \"exp1\"");
    }
    if (name.find('/') != std::string::npos) {
      return fmt::format(
          "run.name = {} contains '/', but it names one folder inside run.dir; write a plain folder "
          "name such as \"exp1\", and put parent folders in run.dir",
          shown);
    }
    if (name == "." || name == "..") {
      return fmt::format(
          "run.name = {} would name run.dir itself or its parent, not a folder inside it; write a "
          "plain folder name such as \"exp1\"",
          shown);
    }
    if (name.size() > kMaxFolderName) {
      return fmt::format("run.name is {} bytes long, but a folder name holds at most {}; shorten it", name.size(),
                         kMaxFolderName);
    }
    return std::nullopt;
  });
}

// DeepSpeed's activation-checkpointing refinements. partition_activations is refused with the reason, never
// accepted with a changed meaning (its default, which changes nothing, is accepted). cpu_checkpointing,
// contiguous_memory_optimization and number_checkpoints (host/engine/activation_checkpoints.hpp) refine
// activation_checkpointing.enabled, zhost's own switch, and are read only with it.
void add_activation_checkpointing_rules(Schema& schema) {
  const std::string partition = "activation_checkpointing.partition_activations";
  rule(schema, {partition},
       [partition, fallback = schema.default_value(partition)](const ResolvedConfig& config) -> Problem {
         if (!config.has(partition) || config.get(partition) == fallback) return std::nullopt;
         return fmt::format(
             "{} = {} is not supported: it shards activations that model-parallel ranks replicate, and zhost has no "
             "model parallelism, so no activation is replicated; remove it (DeepSpeed's default keeps the same math)",
             partition, to_toml_literal(*config.get(partition)));
       });
  read_only_when(
      schema, "activation_checkpointing.enabled", {"true"},
      {"activation_checkpointing.cpu_checkpointing", "activation_checkpointing.contiguous_memory_optimization",
       "activation_checkpointing.number_checkpoints"});
  // A Hugging Face model's layer count comes from its config.json: the engine checks it there.
  rule(schema, {"activation_checkpointing.number_checkpoints", "model.layers", "model.type"},
       [](const ResolvedConfig& config) -> Problem {
         const auto count = config.get_optional_int("activation_checkpointing.number_checkpoints");
         const int64_t layers = config.get_int("model.layers");
         if (!count || config.get_string("model.type") == "hf" || *count <= layers) return std::nullopt;
         return fmt::format(
             "activation_checkpointing.number_checkpoints = {} is more than the model's {} transformer blocks "
             "(model.layers); set it to {} or less",
             *count, layers, layers);
       });
}

}  // namespace

bool optimizer_states_outside_host_memory(const ResolvedConfig& config) {
  const std::set<std::string>& outside = config.tiers().outside_host_memory;
  return outside.count(config.get_string("zero.offload_optimizer.device")) ||
         outside.count(config.get_string("zero.offload_optimizer.storage"));
}

std::string initial_swap_storage(const ResolvedConfig& config, const std::string& key) {
  if (key == "zero.offload_param.swap_schedule") return config.get_string("zero.offload_param.device");
  const std::string& device = config.get_string("zero.offload_optimizer.device");
  if (config.tiers().device_stores.count(device)) return device;
  const std::string& storage = config.get_string("zero.offload_optimizer.storage");
  return storage == "none" ? "cpu" : storage;
}

std::vector<StorageSwapPoint> storage_swap_schedule(const ResolvedConfig& config, const std::string& key,
                                                    std::string* problem) {
  std::vector<StorageSwapPoint> schedule;
  for (const std::string& entry : config.get_string_list(key)) {
    const size_t colon = entry.find(':');
    StorageSwapPoint point;
    bool ok = colon != std::string::npos && colon > 0 && colon + 1 < entry.size();
    if (ok) {
      const std::string step = entry.substr(0, colon);
      ok = step.size() < 18 && step.find_first_not_of("0123456789") == std::string::npos;
      if (ok) point.after_step = std::stoll(step);
      point.storage = entry.substr(colon + 1);
      ok = ok && point.after_step >= 1;
    }
    if (!ok) {
      if (problem)
        *problem = fmt::format(
            "{} entry \"{}\" is not \"STEP:STORAGE\" with a step >= 1; write e.g. \"5:nvme\" (after step 5 they "
            "move to NVMe)",
            key, entry);
      break;
    }
    schedule.push_back(point);
  }
  return schedule;
}

bool params_outside_host_memory(const ResolvedConfig& config) {
  return config.tiers().outside_host_memory.count(config.get_string("zero.offload_param.device"));
}

void add_host_rules(Schema& schema) {
  add_precision_rules(schema);
  add_optimizer_rules(schema);
  add_scheduler_rules(schema);
  add_model_rules(schema);
  add_random_ltd_rules(schema);
  add_data_rules(schema);
  add_zero_rules(schema);
  add_gradient_rules(schema);  // before the delayed update's: the warnings keep their order
  add_delayed_update_rules(schema);
  add_offload_rules(schema);
  add_activation_checkpointing_rules(schema);
  add_run_rules(schema);
}

}  // namespace zhost::config
