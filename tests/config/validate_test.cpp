// tests/config/validate_test.cpp: validation messages (unknown, wrong type, range, choice, inactive,
// missing), their locations, and collecting every error.
#include "config_test_support.hpp"

namespace zhost::config {
namespace {

using test_support::error_of;
using test_support::errors_of;
using test_support::resolve;

TEST(Validate, UnknownKeySuggestsTheKeyInTheSameTable) {
  EXPECT_EQ(error_of("[zero]\nstgae = 2\n"),
            "train.toml:2: unknown key 'zero.stgae'; did you mean 'zero.stage'? (or remove it)");
  EXPECT_EQ(error_of("steps = 10\n\n[zero]\nstage = 2\nreduce_bucket_sise = 5e8\n"),
            "train.toml:5: unknown key 'zero.reduce_bucket_sise'; did you mean 'zero.reduce_bucket_size'? (or remove "
            "it)");
}

TEST(Validate, UnknownKeySuggestsTheSameNameInAnotherTable) {
  EXPECT_EQ(error_of("stage = 2\n"), "train.toml:1: unknown key 'stage'; did you mean 'zero.stage'? (or remove it)");
}

// Suggestions name a misspelling of a key of the same table, never another setting that looks alike.
TEST(Validate, UnknownKeyIsNotPointedToAnotherSettingThatLooksAlike) {
  const InactiveKeys stage3{
      {"zero.offload_param.buffer_count", "it belongs to plugin 'stage3', which this config does not use"},
      {"zero.stage3_param_persistence_threshold", "it belongs to plugin 'stage3', which this config does not use"}};
  for (const char* toml :
       {"[zero.offload_optimizer]\nbuffer_size = 4\n", "[zero]\nstage3_model_persistence_threshold = 100\n"}) {
    const std::string error = error_of(toml, {}, stage3);
    EXPECT_TRUE(test_support::contains(error, "; remove it (`zhost config check` prints every known key)")) << error;
  }
  EXPECT_EQ(error_of("[zero]\nstage3_param_persistance_threshold = 100\n", {}, stage3),
            "train.toml:2: unknown key 'zero.stage3_param_persistance_threshold'; did you mean "
            "'zero.stage3_param_persistence_threshold'? (or remove it)");
}

TEST(Validate, UnknownKeySuggestsByFullPath) {
  EXPECT_EQ(error_of("[model]\nlayer = 2\n"),
            "train.toml:2: unknown key 'model.layer'; did you mean 'model.layers'? (or remove it)");
  EXPECT_EQ(error_of("zero.offload_optimiser.device = \"cpu\"\n"),
            "train.toml:1: unknown table [zero.offload_optimiser]; did you mean [zero.offload_optimizer]? (or remove "
            "it)");
}

TEST(Validate, UnknownKeyWithoutAnythingClose) {
  EXPECT_EQ(error_of("[model]\nbananas = 3\n"),
            "train.toml:2: unknown key 'model.bananas'; remove it (`zhost config check` prints every known key)");
}

TEST(Validate, DeepSpeedTableNamesPointToZhostTables) {
  EXPECT_EQ(error_of("[zero_optimization]\nstage = 2\n"),
            "train.toml:1: unknown table [zero_optimization]; did you mean [zero]? (or remove it)");
  EXPECT_EQ(error_of("[optimizer]\ntype = \"AdamW\"\n[optimizer.params]\nlr = 1e-4\n"),
            "train.toml:3: unknown table [optimizer.params]; did you mean [optimizer]? (or remove it)");
}

TEST(Validate, UnknownOverrideIsRejectedLikeAFileKey) {
  EXPECT_EQ(error_of("", {"zero.stgae=2"}),
            "--set zero.stgae=2: unknown key 'zero.stgae'; did you mean 'zero.stage'? (or remove it)");
}

TEST(Validate, UnknownTableCreatedByAnOverrideNamesTheOverride) {
  EXPECT_EQ(error_of("seed = 1\n", {"seed=2", "zerro.stage=2"}),
            "--set zerro.stage=2: unknown table [zerro]; did you mean [zero]? (or remove it)");
}

TEST(Validate, WrongTypeNamesExpectedAndGot) {
  EXPECT_EQ(error_of("[fp16]\nenabled = 1\n"),
            "train.toml:2: fp16.enabled must be true or false, got integer 1; write e.g. enabled = false");
  EXPECT_EQ(error_of("[zero]\nstage = \"2\"\n"),
            "train.toml:2: zero.stage must be an integer, got string \"2\"; remove the quotes: stage = 2");
  EXPECT_EQ(error_of("[run]\nname = 7\n"),
            "train.toml:2: run.name must be a string, got integer 7; put it in quotes: name = \"7\"");
  EXPECT_EQ(error_of("[optimizer]\nbetas = 0.9\n"),
            "train.toml:2: optimizer.betas must be a list of numbers, got float 0.9; write e.g. betas = [0.9, 0.999]");
  EXPECT_EQ(error_of("[optimizer]\nbetas = [0.9, \"x\"]\n"),
            "train.toml:2: optimizer.betas[1] must be a number, got string \"x\"");
  EXPECT_EQ(error_of("[zero.stage]\nx = 1\n"),
            "train.toml:1: zero.stage must be an integer, got a table; write e.g. stage = 0");
  EXPECT_EQ(error_of("zero = 2\n"),
            "train.toml:1: zero is a table of settings, not a value; write [zero] and set its keys below it");
}

TEST(Validate, WrongTypeFromOverride) {
  EXPECT_EQ(error_of("", {"zero.stage=two"}),
            "--set zero.stage=two: zero.stage must be an integer, got string \"two\"; write e.g. stage = 0");
}

TEST(Validate, IntAcceptsIntegralFloats) {
  ResolvedConfig config = resolve("[zero]\nreduce_bucket_size = 5e8\nstage = 2.0\n");
  EXPECT_EQ(config.get_int("zero.reduce_bucket_size"), 500000000);
  EXPECT_EQ(config.get_int("zero.stage"), 2);
}

TEST(Validate, IntRejectsFractions) {
  EXPECT_EQ(error_of("[zero]\nstage = 1.5\n"),
            "train.toml:2: zero.stage must be an integer, got 1.5; write a whole number such as 1 or 2");
  EXPECT_EQ(error_of("[zero]\nreduce_bucket_size = 1e30\n"),
            "train.toml:2: zero.reduce_bucket_size = 1e+30 does not fit a 64-bit integer; write a smaller number");
}

TEST(Validate, FloatAcceptsIntegers) {
  ResolvedConfig config = resolve("[comm]\ntimeout_s = 60\n");
  EXPECT_DOUBLE_EQ(config.get_float("comm.timeout_s"), 60.0);
}

TEST(Validate, OutOfRangeGivesTheRange) {
  EXPECT_EQ(error_of("[zero]\nstage = 5\n"),
            "train.toml:2: zero.stage = 5 is out of range; use a value between 0 and 3");
  EXPECT_EQ(error_of("[comm]\ntimeout_s = 0\n"),
            "train.toml:2: comm.timeout_s = 0.0 is out of range; use a value between 1 and 604800");
  EXPECT_EQ(error_of("steps_per_print = 0\n"),
            "train.toml:1: steps_per_print = 0 is out of range; use a value of at least 1");
  EXPECT_EQ(error_of("[optimizer]\nbetas = [0.9, 1.5]\n"),
            "train.toml:2: optimizer.betas[1] = 1.5 is out of range; use a value 0 or more and below 1");
}

TEST(Validate, BadChoiceListsTheChoices) {
  EXPECT_EQ(
      error_of("[optimizer]\ntype = \"adamw\"\n"),
      "train.toml:2: optimizer.type = \"adamw\" is not a valid choice; choose one of: AdamW, Adam, SGD, Lion, Lamb "
      "(did you mean 'AdamW'?)");
  EXPECT_EQ(error_of("[model]\ntype = \"lama\"\n"),
            "train.toml:2: model.type = \"lama\" is not a valid choice; choose one of: mlp, gpt, llama, hf (did you "
            "mean 'llama'?)");
  EXPECT_EQ(error_of("", {"comm.backend=glooo"}),
            "--set comm.backend=glooo: comm.backend = \"glooo\" is not a valid choice; choose one of: auto, gloo, nccl "
            "(did you mean 'gloo'?)");
  // Short values get no suggestion: "gpu" is one letter from "cpu", but that suggestion would mislead.
  EXPECT_EQ(error_of("[log]\nlevel = \"dbg\"\n"),
            "train.toml:2: log.level = \"dbg\" is not a valid choice; choose one of: trace, debug, info, warn, error");
  EXPECT_EQ(error_of("[data]\ntype = \"parquet\"\n"),
            "train.toml:2: data.type = \"parquet\" is not a valid choice; choose one of: synthetic, tokens, text");
}

TEST(Validate, InactiveKeyGivesTheReason) {
  InactiveKeys inactive{
      {"zero.reduce_bucket_size", "it belongs to plugin 'stage2', and zero.stage = 1 does not use it"}};
  EXPECT_EQ(error_of("[zero]\nstage = 1\nreduce_bucket_size = 5e8\n", {}, inactive),
            "train.toml:3: zero.reduce_bucket_size is set, but it belongs to plugin 'stage2', and zero.stage = 1 does "
            "not use it; remove it");
}

TEST(Validate, InactiveKeysAreLeftOutOfTheResolvedConfig) {
  InactiveKeys inactive{{"zero.overlap_comm", "it belongs to plugin 'stage2', and zero.stage = 1 does not use it"}};
  ResolvedConfig config = resolve("[zero]\nstage = 1\n", {}, inactive);
  EXPECT_EQ(config.get_int("zero.stage"), 1);
  try {
    config.get_bool("zero.overlap_comm");
    ADD_FAILURE() << "an inactive key was readable";
  } catch (const UsageError&) {
    ADD_FAILURE() << "reading an inactive key is a bug, not a usage error";
  } catch (const Error& error) {
    EXPECT_TRUE(test_support::contains(error.what(), "not active in this config (it belongs to plugin 'stage2'"))
        << error.what();
  }
}

TEST(Validate, InactiveKeysOfUnknownPluginTablesAreRecognized) {
  InactiveKeys inactive{{"aio.block_size", "it belongs to plugin 'offload_nvme', which this config does not use"}};
  EXPECT_EQ(error_of("[aio]\nblock_size = 1048576\n", {}, inactive),
            "train.toml:2: aio.block_size is set, but it belongs to plugin 'offload_nvme', which this config does not "
            "use; remove it");
  EXPECT_EQ(error_of("[aio]\nblock_sise = 1048576\n", {}, inactive),
            "train.toml:2: unknown key 'aio.block_sise'; did you mean 'aio.block_size'? (or remove it)");
}

TEST(Validate, MissingRequiredKey) {
  Schema schema;
  add_host_keys(schema);
  KeySpec swap_folder =
      test_support::plugin_key("zero.offload_optimizer.swap_folder", ValueType::String, std::nullopt, "offload_nvme");
  swap_folder.doc = "folder for NVMe swap files";
  schema.add(swap_folder);
  try {
    validate(Document::parse("[zero]\nstage = 3\n", "train.toml"), schema);
    ADD_FAILURE() << "a missing required key was accepted";
  } catch (const ConfigErrors& errors) {
    EXPECT_EQ(errors.errors(),
              (std::vector<std::string>{
                  "train.toml: missing required key zero.offload_optimizer.swap_folder (folder for NVMe "
                  "swap files); add it under [zero.offload_optimizer] or pass --set "
                  "zero.offload_optimizer.swap_folder=VALUE"}));
  }
  // Not required when it belongs to a plugin the config does not use.
  InactiveKeys inactive{{"zero.offload_optimizer.swap_folder", "offload_nvme is not used"}};
  EXPECT_NO_THROW(validate(Document::parse("[zero]\nstage = 3\n", "train.toml"), schema, inactive));
}

TEST(Validate, CollectsAllErrorsInFileOrderThenOverrides) {
  std::string toml =
      "seed = 1\n"          // 1
      "[zero]\n"            // 2
      "stage = 9\n"         // 3
      "\n"                  // 4
      "[optimizer]\n"       // 5
      "type = \"Adamw\"\n"  // 6
      "lr = \"fast\"\n"     // 7
      "[model]\n"           // 8
      "layres = 2\n";       // 9
  try {
    resolve(toml, {"comm.timeout_s=-1", "zero.overlap_comm=yes"});
    ADD_FAILURE() << "the config was accepted";
  } catch (const ConfigErrors& errors) {
    std::vector<std::string> expected = {
        "train.toml:3: zero.stage = 9 is out of range; use a value between 0 and 3",
        "train.toml:6: optimizer.type = \"Adamw\" is not a valid choice; choose one of: AdamW, Adam, SGD, Lion, Lamb "
        "(did you mean 'AdamW'?)",
        "train.toml:7: optimizer.lr must be a number, got string \"fast\"; write e.g. lr = 0.001",
        "train.toml:9: unknown key 'model.layres'; did you mean 'model.layers'? (or remove it)",
        "--set comm.timeout_s=-1: comm.timeout_s = -1.0 is out of range; use a value between 1 and 604800",
        "--set zero.overlap_comm=yes: zero.overlap_comm must be true or false, got string \"yes\"; write e.g. "
        "overlap_comm = false",
    };
    EXPECT_EQ(errors.errors(), expected);
    EXPECT_EQ(std::string(errors.what()), expected.front() + " (and 5 more errors)");
    EXPECT_EQ(errors.exit_code(), 2);
  }
}

TEST(Validate, OneMoreErrorIsSingular) {
  try {
    resolve("[zero]\nstage = 9\nstgae = 1\n");
    ADD_FAILURE() << "the config was accepted";
  } catch (const UsageError& error) {
    EXPECT_EQ(std::string(error.what()),
              "train.toml:2: zero.stage = 9 is out of range; use a value between 0 and 3 (and 1 more error)");
  }
}

TEST(Validate, RulesRunOnlyOnValidKeys) {
  // bf16.enabled is broken, so the fp16/bf16 rule stays quiet and only the type error shows.
  EXPECT_EQ(error_of("[fp16]\nenabled = true\n[bf16]\nenabled = \"true\"\n"),
            "train.toml:4: bf16.enabled must be true or false, got string \"true\"; remove the quotes: enabled = true");
}

TEST(Validate, Fp16AndBf16TogetherIsAnError) {
  EXPECT_EQ(error_of("[fp16]\nenabled = true\n\n[bf16]\nenabled = true\n"),
            "train.toml:2: fp16.enabled and bf16.enabled are both true (bf16.enabled from train.toml:5); keep one: "
            "bf16 where the GPU supports it (Ampere or newer), fp16 otherwise");
  EXPECT_EQ(error_of("[fp16]\nenabled = true\n", {"bf16.enabled=true"}),
            "train.toml:2: fp16.enabled and bf16.enabled are both true (bf16.enabled from --set bf16.enabled=true); "
            "keep one: bf16 where the GPU supports it (Ampere or newer), fp16 otherwise");
}

}  // namespace
}  // namespace zhost::config

namespace zhost::config {
namespace {

using test_support::error_of;

TEST(Validate, NanAndInfAreRefusedForEveryFloatKey) {
  EXPECT_EQ(error_of("gradient_clipping = nan\n"),
            "train.toml:1: gradient_clipping = nan is not a finite number; write a number such as 0.0");
  EXPECT_EQ(error_of("[comm]\ntimeout_s = inf\n"),
            "train.toml:2: comm.timeout_s = inf is not a finite number; write a number such as 300.0");
  EXPECT_EQ(error_of("[optimizer]\nbetas = [0.9, -inf]\n"),
            "train.toml:2: optimizer.betas[1] = -inf is not a finite number; write a number such as 0.5");
  // A plugin's key too (the check is in the reader, not in the host's declarations).
  Schema schema;
  KeySpec spec = test_support::plugin_key("tier.ratio", ValueType::Float, "0.5", "tier");
  schema.add(spec);
  EXPECT_EQ(test_support::usage_error_of([&] { validate(Document::parse("[tier]\nratio = nan\n", "t.toml"), schema); }),
            "t.toml:2: tier.ratio = nan is not a finite number; write a number such as 0.5");
}

TEST(Validate, AnExclusiveUpperBoundIsNamed) {
  EXPECT_EQ(error_of("[model]\nlayer_drop = 1.0\n"),
            "train.toml:2: model.layer_drop = 1.0 is out of range; use a value 0 or more and below 1");
}

TEST(Validate, LongValuesAreCutInMessages) {
  const std::string long_name(1 << 20, 'k');
  std::string error = error_of(long_name + " = 1\n");
  EXPECT_LT(error.size(), 300u) << error.substr(0, 300);
  EXPECT_NE(error.find("...(1048576 bytes)..."), std::string::npos) << error.substr(0, 300);
  error = error_of("[data]\ntype = \"" + long_name + "\"\n");
  EXPECT_LT(error.size(), 300u) << error.substr(0, 300);
  // A quoted key may hold a line break; the message stays one line.
  EXPECT_EQ(error_of("\"a\\nb\" = 1\n"),
            "train.toml:1: unknown key 'a\\x0ab'; remove it (`zhost config check` prints every known key)");
}

}  // namespace
}  // namespace zhost::config
