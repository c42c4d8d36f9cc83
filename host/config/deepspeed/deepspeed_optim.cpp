// host/config/deepspeed/deepspeed_optim.cpp: DeepSpeed's "optimizer" and "scheduler" tables ({"type", "params"})
// onto zhost's [optimizer] and [scheduler] (Note [DeepSpeed JSON] in docs/config.md). Keys that change the
// math and that zhost does not have are refused as unsupported, never dropped.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "host/config/deepspeed/deepspeed_import_internal.hpp"

namespace zhost::config::ds {
namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// DeepSpeed lower-cases its own optimizer names; other names are torch.optim classes, case and all.
std::string zhost_optimizer(const std::string& name) {
  const std::string l = lower(name);
  if (l == "adam") return "Adam";
  if (l == "adamw") return "AdamW";
  if (l == "lion") return "Lion";
  if (l == "lamb") return "Lamb";
  if (name == "SGD") return "SGD";
  return "";
}

// Note [fp32_optimizer_states]: DeepSpeed pops optimizer.params.fp32_optimizer_states (default true) and hands it
// to its CPU Adam only, under ZeRO-Offload (offload_optimizer.device "cpu" or "nvme"); false keeps Adam's moments in
// the dtype of the weights the CPU Adam steps: bf16 with bf16_master_weights_and_grads (which is what
// bf16_optimizer_states does; that key forces it false), fp32 otherwise, where nothing changes. Elsewhere
// DeepSpeed drops it.
void import_fp32_optimizer_states(Importer& importer, Section& params) {
  if (!params.has("fp32_optimizer_states")) return;
  const json& value = params.object()->at("fp32_optimizer_states");
  if (!value.is_boolean()) {
    params.refuse("fp32_optimizer_states", "a boolean is expected (DeepSpeed's default: true)");
    return;
  }
  const bool cpu_adam = importer.is_string("zero.offload_optimizer.device", "cpu") ||
                        importer.is_string("zero.offload_optimizer.device", "nvme");
  const bool bf16_masters = importer.is_true("bf16.master_weights_and_grads");
  if (value.get<bool>()) {
    params.note("fp32_optimizer_states",
                importer.is_true("bf16.optimizer_states")
                    ? "bf16_optimizer_states keeps the moments in bf16 whatever this says (DeepSpeed overrides it "
                      "to false with a warning)"
                    : "Adam's moments in fp32, the default; no value changes");
  } else if (!cpu_adam) {
    params.note("fp32_optimizer_states",
                "read only by DeepSpeed's CPU Adam (zero_optimization.offload_optimizer.device \"cpu\" or "
                "\"nvme\"), which this file does not use; no value changes");
  } else if (importer.is_true("fp16.master_weights_and_grads")) {
    params.refuse("fp32_optimizer_states",
                  "false under fp16 master weights keeps the CPU Adam's moments in fp16, which zhost does not build "
                  "(its CPU tier keeps fp32 or bf16 moments); remove it, or set it to true");
  } else if (!bf16_masters) {
    params.note("fp32_optimizer_states",
                "the CPU Adam keeps its moments in the masters' dtype, fp32 without "
                "bf16.bf16_master_weights_and_grads; no value changes");
  } else if (importer.is_set("bf16.optimizer_states") && !importer.is_true("bf16.optimizer_states")) {
    params.refuse("fp32_optimizer_states",
                  "false keeps the CPU Adam's moments in bf16 under bf16 master weights, which "
                  "bf16.bf16_optimizer_states = false says they are not; write bf16_optimizer_states true (the same "
                  "meaning) or drop one of the two");
  } else if (!importer.is_true("bf16.optimizer_states")) {
    params.take("fp32_optimizer_states");
    importer.set("bf16.optimizer_states", true, params.path("fp32_optimizer_states"),
                 params.at("fp32_optimizer_states"),
                 "false under bf16 master weights and ZeRO-Offload: the CPU Adam keeps the moments in bf16, "
                 "zhost's bf16.optimizer_states");
  } else {
    params.note("fp32_optimizer_states", "bf16_optimizer_states says the same; no value changes");
  }
}

}  // namespace

void import_optimizer(Importer& importer, Section& root) {
  Section optimizer = root.sub("optimizer");
  const json* type = optimizer.take("type");
  optimizer.note("legacy_fusion", "a knob of DeepSpeed's fused fp16 optimizer; no value changes");
  Section params = optimizer.sub("params");
  if (!optimizer.object()) {
    if (!importer.is_set("optimizer.type")) {
      importer.record(ImportRecord::Kind::Noted, "optimizer", TextPosition{}, "",
                      "no \"optimizer\" table: DeepSpeed would step the training script's own optimizer; zhost "
                      "builds its [optimizer] (AdamW, lr 0.001 unless the \"zhost\" table or --set say otherwise)");
    }
    return;
  }
  std::string name;
  if (type && type->is_string()) {
    name = zhost_optimizer(type->get<std::string>());
    if (name.empty()) {
      optimizer.refuse("type",
                       "zhost has the optimizers AdamW, Adam, SGD, Lion and Lamb, not this one; choose one of them "
                       "(the updates would differ), or train with DeepSpeed");
      params.note_rest("part of a refused optimizer");
      return;
    }
    importer.set("optimizer.type", name, optimizer.path("type"), optimizer.at("type"));
  } else if (type) {
    optimizer.refuse("type", "an optimizer name (a string) is expected, e.g. \"AdamW\"");
    return;
  } else {
    // DeepSpeed without a type builds no optimizer (the client's own is used); zhost always builds one.
    importer.record(ImportRecord::Kind::Refused, optimizer.ds_path(), optimizer.at("type"), "",
                    "optimizer has no \"type\"; zhost builds the optimizer from the config: write its type "
                    "(AdamW, Adam, SGD, Lion or Lamb)");
  }
  params.map("lr", "optimizer.lr", "the learning rate (HF Trainer's --learning_rate, default 5e-5)",
             {"--learning_rate", "5e-5"});
  params.map("weight_decay", "optimizer.weight_decay", "HF Trainer's --weight_decay (default 0.0)",
             {"--weight_decay", "0.0"});
  if (name == "SGD") {
    params.map("momentum", "optimizer.momentum");
    params.inert("dampening", 0,
                 "SGD with dampening is not supported by zhost (it changes the updates); set it to 0 "
                 "or train with DeepSpeed");
    params.inert("nesterov", false,
                 "Nesterov momentum is not supported by zhost's SGD (it changes the updates); set "
                 "it to false or train with DeepSpeed");
    params.inert("maximize", false, "zhost minimizes the loss; set it to false");
  } else {
    params.map("betas", "optimizer.betas",
               "[beta1, beta2] (HF Trainer's --adam_beta1/--adam_beta2, default [0.9, 0.999])",
               {"--adam_beta1/--adam_beta2", "[0.9, 0.999]"});
  }
  if (name == "Lamb") {  // DeepSpeed's FusedLamb (Note [Lamb steps whole parameters])
    params.map("eps", "optimizer.eps");
    params.map("bias_correction", "optimizer.bias_correction");
    params.map("max_coeff", "optimizer.max_coeff");
    params.map("min_coeff", "optimizer.min_coeff");
    params.inert("eps_inside_sqrt", false,
                 "Lamb with eps inside the square root is not supported by zhost (it changes the updates); set it to "
                 "false or train with DeepSpeed");
    params.inert("amsgrad", false, "FusedLamb has no AMSGrad variant (DeepSpeed raises on it); set it to false");
  }
  if (name == "Adam" || name == "AdamW") {
    params.map("eps", "optimizer.eps", "HF Trainer's --adam_epsilon (default 1e-8)", {"--adam_epsilon", "1e-8"});
    params.map("bias_correction", "optimizer.bias_correction");
    params.inert("amsgrad", false,
                 "AMSGrad is not supported by zhost (it changes the updates); set it to false or "
                 "train with DeepSpeed");
    // DeepSpeed's bf16 master weights assert that the optimizer is its CPU Adam, which torch_adam replaces.
    if (params.has("torch_adam") && params.object()->at("torch_adam") == json(true) &&
        (importer.is_true("bf16.master_weights_and_grads") || importer.is_true("fp16.master_weights_and_grads")))
      params.refuse(
          "torch_adam",
          "DeepSpeed refuses torch's Adam with bf16_master_weights_and_grads or fp16_master_weights_and_grads "
          "(16-bit master weights need its CPU Adam under ZeRO-Offload); remove torch_adam, or the 16-bit "
          "masters");
    else
      params.note("torch_adam", "torch's Adam/AdamW compute the same updates as zhost's; no value changes");
    import_fp32_optimizer_states(importer, params);
    params.note("fused", "a torch kernel choice; no value changes");
    params.note("foreach", "a torch kernel choice; no value changes");
    params.note("set_grad_none", "how DeepSpeed clears gradients; no value changes");
    if (name == "Adam") {
      params.map("adam_w_mode", "optimizer.adam_w_mode");
    } else if (params.has("adam_w_mode")) {
      const json* mode = params.take("adam_w_mode");
      params.note("adam_w_mode", mode->is_boolean() && mode->get<bool>()
                                     ? "AdamW always decouples weight decay"
                                     : "DeepSpeed's AdamW always decouples weight decay and ignores false; so does "
                                       "zhost's AdamW (write type Adam for L2 decay)");
    }
  }
  params.inert("max_grad_norm", 0,
               "clipping inside the optimizer is DeepSpeed's Lamb/fp16 knob; zhost clips with gradient_clipping: "
               "move the value there");
  params.finish();
  optimizer.finish();
}

void import_scheduler(Importer& importer, Section& root) {
  Section scheduler = root.sub("scheduler");
  const json* type = scheduler.take("type");
  Section params = scheduler.sub("params");
  if (!scheduler.object()) return;
  static const std::vector<std::string> kTypes = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle",
                                                  "LRRangeTest"};
  std::string name;
  if (type && type->is_string() && std::find(kTypes.begin(), kTypes.end(), type->get<std::string>()) != kTypes.end()) {
    name = type->get<std::string>();
    importer.set("scheduler.type", name, scheduler.path("type"), scheduler.at("type"));
  } else {
    scheduler.refuse("type",
                     "DeepSpeed's schedules are WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle and "
                     "LRRangeTest; write one of them");
    params.note_rest("part of a refused schedule");
    return;
  }
  params.inert("last_batch_iteration", -1,
               "resuming a schedule mid-way is not supported by zhost (it starts at step 0); set it to -1");
  auto auto_noted = [&](const char* key, const std::string& what) {
    if (!is_auto(params.object() && params.has(key) ? &(*params.object())[key] : nullptr)) return false;
    params.take(key);
    importer.record(ImportRecord::Kind::Noted, params.path(key), params.at(key), "",
                    fmt::format("{} = \"auto\": {} (as HF Trainer fills it in)", params.path(key), what));
    return true;
  };
  if (name == "WarmupLR" || name == "WarmupDecayLR") {
    if (!auto_noted("warmup_min_lr", "0")) params.map("warmup_min_lr", "scheduler.warmup_min_lr");
    if (!auto_noted("warmup_max_lr", "the optimizer's lr (zhost's scheduler.warmup_max_lr left unset)")) {
      if (params.has("warmup_max_lr")) {
        params.map("warmup_max_lr", "scheduler.warmup_max_lr");
      } else {
        // DeepSpeed's default peak is 0.001, not the optimizer's lr (zhost's default): keep DeepSpeed's.
        params.take("warmup_max_lr");
        importer.set("scheduler.warmup_max_lr", 0.001, scheduler.path("type"), scheduler.at("type"),
                     "warmup_max_lr not written: DeepSpeed's default 0.001 is used, as DeepSpeed would");
      }
    }
  }
  if (name == "LRRangeTest") {
    for (const char* key :
         {"lr_range_test_min_lr", "lr_range_test_step_size", "lr_range_test_step_rate", "lr_range_test_staircase"}) {
      params.map(key, std::string("scheduler.") + key);
    }
  } else if (name != "OneCycle") {
    params.map("warmup_num_steps", "scheduler.warmup_num_steps",
               "the warmup steps (HF Trainer's --warmup_steps, or --warmup_ratio times the total steps)",
               {"--warmup_steps: 0, which DeepSpeed's warmup raises to its least, 2", "2"});
    params.map("warmup_type", "scheduler.warmup_type");
  }
  if (name == "WarmupDecayLR" || name == "WarmupCosineLR") {
    if (!auto_noted("total_num_steps", "the run's steps (zhost's scheduler.total_num_steps = 0)")) {
      params.map("total_num_steps", "scheduler.total_num_steps");
    }
  }
  if (name == "WarmupCosineLR") {
    params.map("warmup_min_ratio", "scheduler.warmup_min_ratio");
    params.map("cos_min_ratio", "scheduler.cos_min_ratio");
  }
  if (name == "OneCycle") {
    for (const char* key :
         {"cycle_min_lr", "cycle_max_lr", "cycle_first_step_size", "cycle_second_step_size", "cycle_first_stair_count",
          "cycle_second_stair_count", "decay_step_size", "decay_lr_rate"}) {
      params.map(key, std::string("scheduler.") + key);
    }
    // Note [OneCycle's momentum]: on unless written false, as in DeepSpeed.
    const json* momentum = params.has("cycle_momentum") ? &params.object()->at("cycle_momentum") : nullptr;
    if (momentum && momentum->is_boolean() && !momentum->get<bool>()) {
      params.map("cycle_momentum", "scheduler.cycle_momentum");
      for (const char* key : {"cycle_min_mom", "cycle_max_mom", "decay_mom_rate"}) {
        params.note(key, "momentum cycling is off, so it changes nothing");
      }
    } else {
      params.map("cycle_momentum", "scheduler.cycle_momentum");
      for (const char* key : {"cycle_min_mom", "cycle_max_mom", "decay_mom_rate"}) {
        params.map(key, std::string("scheduler.") + key);
      }
    }
  }
  params.finish();
  scheduler.finish();
}

}  // namespace zhost::config::ds
