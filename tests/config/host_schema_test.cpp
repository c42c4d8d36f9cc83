// tests/config/host_schema_test.cpp: the host's keys, DeepSpeed defaults, and the host's cross-key rules.
#include "config_test_support.hpp"

namespace zhost::config {
namespace {

using test_support::error_of;
using test_support::resolve;

TEST(HostSchema, EmptyConfigResolvesToDeepSpeedDefaults) {
  Schema schema;
  add_host_keys(schema);
  ResolvedConfig config = validate(Document(), schema);
  EXPECT_EQ(config.get_int("zero.stage"), 0);
  EXPECT_EQ(config.get_string("zero.offload_optimizer.device"), "none");
  EXPECT_EQ(config.get_string("zero.offload_param.device"), "none");
  EXPECT_EQ(config.get_int("zero.zero_hpz_partition_size"), 1);
  EXPECT_FALSE(config.get_bool("fp16.enabled"));
  EXPECT_DOUBLE_EQ(config.get_float("fp16.loss_scale"), 0.0);
  EXPECT_EQ(config.get_int("fp16.initial_scale_power"), 16);
  EXPECT_EQ(config.get_int("fp16.loss_scale_window"), 1000);
  EXPECT_EQ(config.get_int("fp16.hysteresis"), 2);
  EXPECT_DOUBLE_EQ(config.get_float("fp16.min_loss_scale"), 1.0);
  EXPECT_EQ(config.get_string("optimizer.type"), "AdamW");
  EXPECT_DOUBLE_EQ(config.get_float("optimizer.eps"), 1e-8);
  EXPECT_EQ(config.get_string("scheduler.type"), "none");
  EXPECT_FALSE(config.get("scheduler.warmup_max_lr").has_value());  // unset: the optimizer's lr
  EXPECT_EQ(config.get_int("scheduler.warmup_num_steps"), 1000);
  EXPECT_EQ(config.get_string("scheduler.warmup_type"), "log");
  EXPECT_DOUBLE_EQ(config.get_float("scheduler.cos_min_ratio"), 0.0001);
  EXPECT_EQ(config.get_int("scheduler.cycle_first_step_size"), 2000);
  EXPECT_EQ(config.get_optional_int("train_batch_size"), std::nullopt);
  EXPECT_EQ(config.get_optional_int("activation_checkpointing.number_checkpoints"), std::nullopt);
  EXPECT_EQ(config.get_int("steps"), 100);
  EXPECT_EQ(config.get_int("seed"), 1234);
  EXPECT_EQ(config.get_int("steps_per_print"), 10);
  EXPECT_DOUBLE_EQ(config.get_float("comm.timeout_s"), 300.0);
  EXPECT_EQ(config.get_string("log.level"), "info");
  EXPECT_EQ(config.get_string("run.dir"), "runs");
}

TEST(HostSchema, EveryHostKeyIsOwnedByTheHostAndDocumented) {
  Schema schema;
  add_host_keys(schema);
  EXPECT_GT(schema.keys().size(), 60u);
  for (const KeySpec* spec : schema.keys()) {
    EXPECT_EQ(spec->owner, kHostOwner) << spec->path;
    EXPECT_FALSE(spec->doc.empty()) << spec->path;
    EXPECT_TRUE(spec->default_toml || spec->optional) << spec->path << " is required";
  }
}

TEST(HostSchema, TypicalDeepSpeedStyleConfigResolves) {
  ResolvedConfig config = resolve(
      "train_batch_size = 32\n"
      "gradient_accumulation_steps = 2\n"
      "gradient_clipping = 1.0\n"
      "[zero]\n"
      "stage = 2\n"
      "reduce_bucket_size = 5e8\n"
      "overlap_comm = true\n"
      "[zero.offload_optimizer]\n"
      "device = \"cpu\"\n"
      "[bf16]\n"
      "enabled = true\n"
      "[scheduler]\n"
      "type = \"WarmupCosineLR\"\n"
      "total_num_steps = 1000\n");
  EXPECT_EQ(config.get_optional_int("train_batch_size"), 32);
  EXPECT_EQ(config.get_int("zero.stage"), 2);
  EXPECT_TRUE(config.get_bool("zero.overlap_comm"));
  EXPECT_TRUE(config.get_bool("bf16.enabled"));
  EXPECT_EQ(config.get_string("scheduler.type"), "WarmupCosineLR");
}

TEST(HostSchema, OneCycleNeedsItsLearningRates) {
  EXPECT_EQ(error_of("[scheduler]\ntype = \"OneCycle\"\ncycle_max_lr = 1e-3\n"),
            "train.toml:2: scheduler.type = \"OneCycle\" needs scheduler.cycle_min_lr and scheduler.cycle_max_lr; "
            "set both under [scheduler], e.g. cycle_min_lr = 1e-5 and cycle_max_lr = 1e-3");
  EXPECT_EQ(error_of("[scheduler]\ntype = \"OneCycle\"\ncycle_min_lr = 1e-2\ncycle_max_lr = 1e-3\n"),
            "train.toml:2: scheduler.cycle_min_lr (0.01) is above scheduler.cycle_max_lr (0.001); swap them");
  EXPECT_NO_THROW(resolve("[scheduler]\ntype = \"OneCycle\"\ncycle_min_lr = 1e-5\ncycle_max_lr = 1e-3\n"));
}

TEST(HostSchema, ModelShapesMustDivide) {
  EXPECT_EQ(error_of("[model]\nwidth = 250\nheads = 4\n"),
            "train.toml:2: model.width = 250 is not divisible by model.heads = 4; pick a width that is a multiple of "
            "heads, e.g. 252");
  EXPECT_EQ(error_of("[model]\ntype = \"llama\"\nheads = 8\nkv_heads = 3\n"),
            "train.toml:4: model.heads = 8 is not divisible by model.kv_heads = 3; use kv_heads that divides heads "
            "(1, a divisor of heads, or 0 = same as heads)");
}

TEST(HostSchema, OffloadNeedsPartitionedStates) {
  EXPECT_EQ(error_of("[zero]\noffload_optimizer.device = \"cpu\"\n"),
            "train.toml:2: zero.offload_optimizer.device = \"cpu\" needs zero.stage 1, 2 or 3 (stage 0 keeps whole "
            "optimizer states on every rank); set zero.stage = 2");
  EXPECT_EQ(error_of("[zero]\nstage = 2\noffload_optimizer.device = \"cpu\"\noffload_param.device = \"cpu\"\n"),
            "train.toml:4: zero.offload_param.device = \"cpu\" needs zero.stage = 3 (only stage 3 partitions "
            "parameters)");
  // Parameter offload alone is DeepSpeed's too (Note [Parameter offload alone] in plugins/stage3).
  EXPECT_NO_THROW(resolve("[zero]\nstage = 3\noffload_param.device = \"cpu\"\n"));
  EXPECT_NO_THROW(resolve("[zero]\nstage = 1\noffload_optimizer.device = \"cpu\"\n"));
}

TEST(HostSchema, FileDataNeedsAPath) {
  EXPECT_EQ(error_of("[data]\ntype = \"tokens\"\n"),
            "train.toml:2: data.type = \"tokens\" reads a file, but data.path is empty; set data.path to the file, or "
            "use data.type = \"synthetic\"");
  EXPECT_NO_THROW(resolve("[data]\ntype = \"tokens\"\npath = \"train.bin\"\n"));
}

}  // namespace
}  // namespace zhost::config
