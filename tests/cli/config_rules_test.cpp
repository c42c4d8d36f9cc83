// tests/cli/config_rules_test.cpp: every config `zhost run` would refuse is refused by `zhost config check`
// first, with the same line. Each case is a config that breaks one rule (a range, a cross-key rule, a key
// the chosen type does not read, the data source, a capability not built yet); both commands must exit
// with 2 and print the expected line, and `run` must stop before training (no run directory).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "tests/cli/cli_support.hpp"
#include "tests/support/loop_disks.hpp"
#include "tests/support/scratch_dir.hpp"

namespace fs = std::filesystem;

namespace {

struct RuleCase {
  const char* name;
  std::string config;
  std::string expected;  // the error line from its location on, e.g. "train.toml:2: optimizer.betas holds"
};

// gtest prints a failing case by its name.
void PrintTo(const RuleCase& rule, std::ostream* out) { *out << rule.name; }

// A small model that trains in a second, for the cases to break one thing of.
const std::string kModel = "steps = 1\n[model]\nlayers = 1\nwidth = 32\nheads = 2\nseq_len = 8\n";

std::vector<RuleCase> rule_cases() {
  return {
      // Ranges, and numbers that are not numbers.
      {"BetasOfWrongLength", "[optimizer]\nbetas = [0.9]\n",
       "train.toml:2: optimizer.betas holds 1 number, but it takes exactly two"},
      {"BetaOfOne", "[optimizer]\nbetas = [0.9, 1.0]\n", "train.toml:2: optimizer.betas[1] = 1.0 is out of range"},
      {"NanLearningRate", "[optimizer]\nlr = nan\n", "train.toml:2: optimizer.lr = nan is not a finite number"},
      {"HugeLearningRate", "[optimizer]\nlr = 1e300\n", "train.toml:2: optimizer.lr = 1e+300 is out of range"},
      {"InfiniteInitStd", "[model]\ninit_std = inf\n", "train.toml:2: model.init_std = inf is not a finite number"},
      {"ZeroInitStd", "[model]\ninit_std = 0.0\n", "train.toml:2: model.init_std = 0.0 is out of range"},
      {"LayerDropOfOne", "[model]\nlayer_drop = 1.0\n", "train.toml:2: model.layer_drop = 1.0 is out of range"},
      {"NanClipping", "gradient_clipping = nan\n", "train.toml:1: gradient_clipping = nan is not a finite number"},
      {"InfiniteTimeout", "[comm]\ntimeout_s = inf\n", "train.toml:2: comm.timeout_s = inf is not a finite number"},
      {"TimeoutTooSmallToMeanAnything", "[comm]\ntimeout_s = 1e-9\n",
       "train.toml:2: comm.timeout_s = 1e-09 is out of range; use a value between 1 and 604800"},
      {"ZeroWarmup", "[scheduler]\ntype = \"WarmupLR\"\nwarmup_num_steps = 0\n",
       "train.toml:3: scheduler.warmup_num_steps = 0 is out of range"},
      {"PartitionActivations", "[activation_checkpointing]\npartition_activations = true\n",
       "train.toml:2: activation_checkpointing.partition_activations = true is not supported: it shards "
       "activations that model-parallel ranks replicate"},
      {"CpuCheckpointingWithoutCheckpointing", "[activation_checkpointing]\ncpu_checkpointing = true\n",
       "train.toml:2: activation_checkpointing.cpu_checkpointing is set, but only activation_checkpointing.enabled "
       "= true reads it"},
      {"NumberCheckpointsWithoutCheckpointing", "[activation_checkpointing]\nnumber_checkpoints = 2\n",
       "train.toml:2: activation_checkpointing.number_checkpoints is set, but only activation_checkpointing.enabled "
       "= true reads it"},
      {"MoreCheckpointsThanBlocks",
       "[model]\nlayers = 2\n[activation_checkpointing]\nenabled = true\nnumber_checkpoints = 3\n",
       "train.toml:5: activation_checkpointing.number_checkpoints = 3 is more than the model's 2 transformer "
       "blocks (model.layers); set it to 2 or less"},
      // Rules across keys.
      {"KvHeadsOnGpt", kModel + "kv_heads = 1\n",
       "train.toml:7: model.kv_heads is set, but only model.type = \"llama\" reads it"},
      {"LlamaOddHeadDim", "[model]\ntype = \"llama\"\nwidth = 36\nheads = 4\n",
       "train.toml:3: model.type = \"llama\" needs an even head dimension"},
      {"CosineWithoutLength", "steps = 0\n[scheduler]\ntype = \"WarmupCosineLR\"\n",
       "train.toml:1: scheduler.type = \"WarmupCosineLR\" needs a schedule length"},
      {"TextWithSmallVocab", "[model]\nvocab = 100\n[data]\ntype = \"text\"\npath = \"corpus.txt\"\n",
       "train.toml:2: model.vocab = 100 is too small for data.type = \"text\""},
      {"Uint16TokensWithLargeVocab", "[model]\nvocab = 70000\n[data]\ntype = \"tokens\"\npath = \"tokens.bin\"\n",
       "train.toml:2: model.vocab = 70000 does not fit data.token_dtype = \"uint16\""},
      // Keys that the chosen type does not read.
      {"CosMinRatioUnderWarmupLR", "[scheduler]\ntype = \"WarmupLR\"\ncos_min_ratio = 0.1\n",
       "train.toml:3: scheduler.cos_min_ratio is set, but only scheduler.type = \"WarmupCosineLR\" reads it"},
      {"BetasUnderSgd", "[optimizer]\ntype = \"SGD\"\nbetas = [0.9, 0.99]\n",
       "train.toml:3: optimizer.betas is set, but only optimizer.type = \"AdamW\" or"},
      {"AdamWModeUnderAdamW", "[optimizer]\nadam_w_mode = false\n",
       "train.toml:2: optimizer.adam_w_mode is set, but only optimizer.type = \"Adam\" reads it"},
      {"LossScaleWithoutFp16", "[fp16]\nloss_scale = 128.0\n",
       "train.toml:2: fp16.loss_scale is set, but only fp16.enabled = true reads it"},
      {"HeadsOnMlp", "[model]\ntype = \"mlp\"\nheads = 2\n",
       "train.toml:3: model.heads is set, but only model.type = \"gpt\" or model.type = \"llama\" reads it"},
      {"PathWithSyntheticData", "[data]\npath = \"corpus.txt\"\n",
       "train.toml:2: data.path is set, but only data.type = \"tokens\" or data.type = \"text\" reads it"},
      // run.name stays one folder inside run.dir.
      {"RunNameLeavingRunDir", "[run]\nname = \"../x\"\n", "train.toml:2: run.name = \"../x\" contains '/'"},
      {"AbsoluteRunName", "[run]\nname = \"/tmp/x\"\n", "train.toml:2: run.name = \"/tmp/x\" contains '/'"},
      {"DotDotRunName", "[run]\nname = \"..\"\n", "train.toml:2: run.name = \"..\" would name run.dir itself"},
      {"LongRunName", "[run]\nname = \"" + std::string(300, 'a') + "\"\n",
       "train.toml:2: run.name is 300 bytes long, but a folder name holds at most 255"},
      // Offload tiers and ZeRO++.
      {"EmptyDevice", "[zero]\nstage = 2\n[zero.offload_optimizer]\ndevice = \"\"\n",
       "train.toml:4: zero.offload_optimizer.device is empty; write \"none\""},
      {"DeviceNotAName", "[zero]\nstage = 2\n[zero.offload_optimizer]\ndevice = \"a b\"\n",
       "train.toml:4: zero.offload_optimizer.device = \"a b\" is not a tier name"},
      {"NvmeTierWithoutPath", "[zero]\nstage = 2\n[zero.offload_optimizer]\ndevice = \"nvme\"\n",
       "train.toml:4: zero.offload_optimizer.device = \"nvme\" needs zero.offload_optimizer.nvme_path, a folder on "
       "the NVMe disk; set it"},
      // The NVMe tier's own check (Note [NVMe config check]), as one config line at its key.
      {"NvmeFolderIsAFile",
       "[zero]\nstage = 2\n[zero.offload_optimizer]\ndevice = \"nvme\"\nnvme_path = \"corpus.txt\"\n",
       "train.toml:5: zero.offload_optimizer.nvme_path = \"corpus.txt\" is not a folder; create it or fix the path"},
      {"QuantizedWeights", "[zero]\nzero_quantized_weights = true\n",
       "train.toml:2: zero.zero_quantized_weights = true needs zero.stage = 3 (ZeRO++ quantizes stage 3's "
       "parameter gathers and gradient reductions; zero.stage is 0)"},
      {"HpzBelowStage3", "[zero]\nstage = 2\nzero_hpz_partition_size = 8\n",
       "train.toml:3: zero.zero_hpz_partition_size = 8 needs zero.stage = 3"},
      {"LocoWithoutQgz", "[zero]\nstage = 3\n[zero.zeropp_loco_param]\nenabled = true\n",
       "train.toml:4: zero.zeropp_loco_param.enabled = true needs zero.zero_quantized_gradients = true"},
      {"LocoWithDynamicFp16",
       "[fp16]\nenabled = true\n[zero]\nstage = 3\nzero_quantized_gradients = true\n"
       "[zero.zeropp_loco_param]\nenabled = true\n",
       "train.toml:7: zero.zeropp_loco_param with dynamic fp16 loss scaling is not supported"},
      {"LocoBetaOne", "[zero.zeropp_loco_param]\nerr_beta = 1.0\n", "train.toml:2: zero.zeropp_loco_param.err_beta"},
      // The data source.
      {"MissingDataFile", "[data]\ntype = \"text\"\npath = \"nowhere.txt\"\n",
       "train.toml:3: data.path: text path 'nowhere.txt' does not exist"},
      {"DeviceAsData", "[data]\ntype = \"tokens\"\npath = \"/dev/zero\"\n",
       "train.toml:3: data.path: token file '/dev/zero' is not a regular file"},
      {"EmptyTokenFile", "[data]\ntype = \"tokens\"\npath = \"empty.bin\"\n",
       "train.toml:3: data.path: token file 'empty.bin' is empty"},
      {"TokenIdAboveVocab", "[model]\nvocab = 256\nseq_len = 8\n[data]\ntype = \"tokens\"\npath = \"tokens.bin\"\n",
       "train.toml:6: data.path: 'tokens.bin' holds token id 300 at token 5, but model.vocab is 256"},
      // Lamb needs whole parameters (Note [Lamb steps whole parameters]); OneCycle's momentum must stay below 1.
      {"LambUnderZero", "[optimizer]\ntype = \"Lamb\"\n[zero]\nstage = 2\n",
       "train.toml:2: optimizer.type = \"Lamb\" needs zero.stage = 0: its trust ratio is a norm over each whole "
       "parameter"},
      {"LambBoundsSwapped", "[optimizer]\ntype = \"Lamb\"\nmin_coeff = 2.0\nmax_coeff = 1.0\n",
       "train.toml:3: optimizer.min_coeff (2) is above optimizer.max_coeff (1); swap them"},
      {"OneCycleMomentumPastOne",
       "steps = 100\n[scheduler]\ntype = \"OneCycle\"\ncycle_min_lr = 1e-4\ncycle_max_lr = 1e-3\n"
       "cycle_first_step_size = 5\ndecay_step_size = 5\ndecay_mom_rate = 0.1\n",
       "train.toml:8: scheduler.decay_mom_rate = 0.1 raises OneCycle's beta1 to"},
      {"MomentumKeysWithCyclingOff",
       "[scheduler]\ntype = \"OneCycle\"\ncycle_min_lr = 1e-4\ncycle_max_lr = 1e-3\ncycle_momentum = false\n"
       "cycle_max_mom = 0.95\n",
       "train.toml:6: scheduler.cycle_max_mom is set, but only scheduler.cycle_momentum = true reads it"},
      // bf16 master weights (Note [bf16 master weights]): DeepSpeed's asserts, then what zhost does not build.
      {"Bf16MasterAtStage0", "[bf16]\nenabled = true\nmaster_weights_and_grads = true\n",
       "train.toml:3: bf16.master_weights_and_grads = true needs zero.stage 1, 2 or 3 (DeepSpeed: bf16 master "
       "weights and gradients are only supported with ZeRO stages 1-3)"},
      {"Bf16MasterWithoutOffloadOrBf16States",
       "[bf16]\nenabled = true\nmaster_weights_and_grads = true\n[zero]\nstage = 2\n",
       "train.toml:3: bf16.master_weights_and_grads = true without ZeRO-Offload needs bf16.optimizer_states = true, "
       "as in DeepSpeed (fp32 moments beside bf16 masters need its CPU Adam)"},
      {"Bf16MasterWithoutOffloadNotAdam",
       "[bf16]\nenabled = true\nmaster_weights_and_grads = true\noptimizer_states = true\n[optimizer]\n"
       "type = \"SGD\"\n[zero]\nstage = 3\n",
       "train.toml:3: bf16.master_weights_and_grads = true without ZeRO-Offload is built for optimizer.type Adam and "
       "AdamW, and this config has SGD"},
      {"Bf16MasterWithoutOffloadInFp32Training",
       "[bf16]\nmaster_weights_and_grads = true\noptimizer_states = true\n[zero]\nstage = 1\n",
       "train.toml:2: bf16.master_weights_and_grads = true is built for bf16 training, and bf16.enabled is false"},
      {"Bf16MasterWithLion",
       "[bf16]\nenabled = true\nmaster_weights_and_grads = true\n[optimizer]\ntype = \"Lion\"\n[zero]\nstage = 1\n"
       "[zero.offload_optimizer]\ndevice = \"cpu\"\n",
       "train.toml:3: bf16.master_weights_and_grads = true needs ZeRO-Offload with DeepSpeed's CPU Adam"},
      {"Bf16MasterOnNvme",
       "[bf16]\nenabled = true\nmaster_weights_and_grads = true\n[zero]\nstage = 3\n"
       "[zero.offload_optimizer]\ndevice = \"nvme\"\nnvme_path = \"/tmp\"\n",
       "train.toml:3: bf16.master_weights_and_grads = true with zero.offload_optimizer.device = \"nvme\" is not "
       "built"},
      {"Bf16MasterInFp32Training",
       "[bf16]\nmaster_weights_and_grads = true\n[zero]\nstage = 2\n[zero.offload_optimizer]\ndevice = \"cpu\"\n",
       "train.toml:2: bf16.master_weights_and_grads = true is built for bf16 training, and bf16.enabled is false"},
      {"Bf16MasterWithSwapSchedule",
       "steps = 4\n[bf16]\nenabled = true\nmaster_weights_and_grads = true\n[zero]\nstage = 2\n"
       "[zero.offload_optimizer]\ndevice = \"cpu\"\nswap_schedule = [\"2:cpu\"]\n",
       "train.toml:4: bf16.master_weights_and_grads = true keeps the masters in host memory: "
       "zero.offload_optimizer.swap_schedule is not built for them"},
      // fp16 master weights: DeepSpeed's asserts (ZeRO-Offload's CPU Adam, stages 1-3), then fp16 training.
      {"Fp16MasterAtStage0", "[fp16]\nenabled = true\nmaster_weights_and_grads = true\n",
       "train.toml:3: fp16.master_weights_and_grads = true needs zero.stage 1, 2 or 3"},
      {"Fp16MasterWithoutOffload", "[fp16]\nenabled = true\nmaster_weights_and_grads = true\n[zero]\nstage = 2\n",
       "train.toml:3: fp16.master_weights_and_grads = true needs ZeRO-Offload with DeepSpeed's CPU Adam"},
      {"Fp16MasterInBf16Training",
       "[bf16]\nenabled = true\n[fp16]\nmaster_weights_and_grads = true\n[zero]\nstage = 2\n"
       "[zero.offload_optimizer]\ndevice = \"cpu\"\n",
       "train.toml:4: fp16.master_weights_and_grads = true is built for fp16 training, and fp16.enabled is false"},
      {"Fp16AndBf16Masters",
       "[bf16]\nmaster_weights_and_grads = true\n[fp16]\nenabled = true\nmaster_weights_and_grads = true\n[zero]\n"
       "stage = 2\n[zero.offload_optimizer]\ndevice = \"cpu\"\n",
       "train.toml:5: fp16.master_weights_and_grads and bf16.master_weights_and_grads are both true"},
      {"Bf16StatesWithoutMasters",
       "[bf16]\nenabled = true\noptimizer_states = true\n[zero]\nstage = 2\n[zero.offload_optimizer]\n"
       "device = \"cpu\"\n",
       "train.toml:3: bf16.optimizer_states = true needs bf16.master_weights_and_grads = true, as in DeepSpeed"},
      // The file itself.
      // A JSON file is DeepSpeed's config, read with DeepSpeed's names (deepspeed_json_test.cpp).
      {"DeepSpeedJsonKeyChangingTheMath", "{\"train_batch_size\": 8, \"gradient_allreduce_op\": \"sum\"}\n",
       "train.toml:1:25: gradient_allreduce_op = \"sum\": zhost averages gradients over the ranks"},
      {"UnterminatedString", "[run]\nname = \"abc\nsteps = 1\n",
       "train.toml:2:8: the string that starts here (\"abc) is not closed before the end of the line"},
  };
}

class ConfigRule : public ::testing::TestWithParam<RuleCase> {
 protected:
  void SetUp() override {
    unsetenv("ZHOST_PLUGIN_PATH");
    scratch_.write("corpus.txt", std::string(4096, 'x'));
    scratch_.write("empty.bin", "");
    // 64 uint16 ids: 0..63, except id 300 at token 5.
    std::string ids;
    for (uint16_t id = 0; id < 64; ++id) {
      const uint16_t value = id == 5 ? 300 : id;
      ids.append(reinterpret_cast<const char*>(&value), sizeof(value));
    }
    scratch_.write("tokens.bin", ids);
  }

  zhost::testing::ScratchDir scratch_;
};

TEST_P(ConfigRule, ConfigCheckAndRunRefuseWithTheSameLine) {
  const RuleCase& rule = GetParam();
  scratch_.write("train.toml", rule.config);
  const std::string line = "zhost: error: " + rule.expected;

  auto check = zhost::testing::run_zhost(scratch_.path(), "config check train.toml");
  EXPECT_EQ(check.exit_code, 2) << check.out << check.err;
  EXPECT_NE(check.err.find(line), std::string::npos) << "expected: " << line << "\ngot: " << check.err;

  auto run = zhost::testing::run_zhost(scratch_.path(), "run train.toml");
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find(line), std::string::npos) << "expected: " << line << "\ngot: " << run.err;
  EXPECT_FALSE(fs::exists(scratch_.path() / "runs")) << "run created its run directory: it started training";
}

INSTANTIATE_TEST_SUITE_P(Cases, ConfigRule, ::testing::ValuesIn(rule_cases()),
                         [](const ::testing::TestParamInfo<RuleCase>& param) { return std::string(param.param.name); });

// The neighbours of the cases above that are right: each rule refuses only what it says.
TEST(ConfigRuleNeighbours, AreAccepted) {
  zhost::testing::ScratchDir scratch;
  scratch.write("corpus.txt", std::string(4096, 'x'));
  const std::vector<std::string> configs = {
      "[model]\ntype = \"llama\"\nwidth = 32\nheads = 4\nkv_heads = 2\n",
      "[scheduler]\ntype = \"WarmupCosineLR\"\ncos_min_ratio = 0.1\n",
      "[optimizer]\ntype = \"Lion\"\nbetas = [0.9, 0.99]\n",
      "[optimizer]\ntype = \"Adam\"\nadam_w_mode = false\n",
      "[optimizer]\ntype = \"Lamb\"\nmax_coeff = 0.3\nbias_correction = false\n",
      "steps = 20\n[scheduler]\ntype = \"OneCycle\"\ncycle_min_lr = 1e-4\ncycle_max_lr = 1e-3\n"
      "cycle_first_step_size = 5\ndecay_step_size = 5\ndecay_mom_rate = 0.01\n",
      "[fp16]\nenabled = true\nloss_scale = 128.0\n[run]\ndevice = \"cuda\"\n",
      "[model]\ntype = \"mlp\"\nwidth = 33\n",
      "[model]\nvocab = 256\n[data]\ntype = \"text\"\npath = \"corpus.txt\"\n",
      "[run]\nname = \"exp-1.b\"\n",
      "[zero]\nstage = 2\n[zero.offload_optimizer]\ndevice = \"cpu\"\n",
      "[bf16]\nenabled = true\nmaster_weights_and_grads = true\n[optimizer]\ntype = \"Adam\"\n[zero]\nstage = 3\n"
      "[zero.offload_optimizer]\ndevice = \"cpu\"\n",
      "[bf16]\nenabled = true\nmaster_weights_and_grads = true\noptimizer_states = true\n[zero]\nstage = 1\n"
      "[zero.offload_optimizer]\ndevice = \"cpu\"\n",
      "[optimizer]\nlr = 10\n[model]\nlayer_drop = 0.99\n",
      "[activation_checkpointing]\nenabled = true\ncpu_checkpointing = true\ncontiguous_memory_optimization = "
      "true\nnumber_checkpoints = 2\n",
  };
  for (const auto& config : configs) {
    scratch.write("train.toml", config);
    auto check = zhost::testing::run_zhost(scratch.path(), "config check train.toml");
    EXPECT_EQ(check.exit_code, 0) << config << "\n" << check.err;
  }
}

// fp16 on the CPU: LibTorch 2.11 has half-precision kernels there, so both commands accept it (the refusal
// that LibTorch 1.13 needed, check_precision_supported, must not fire).
TEST(PrecisionCheck, Fp16OnTheCpuIsAcceptedByBothCommands) {
  zhost::testing::ScratchDir scratch;
  scratch.write("train.toml", kModel + "[fp16]\nenabled = true\n[run]\ndevice = \"cpu\"\n");
  auto check = zhost::testing::run_zhost(scratch.path(), "config check train.toml");
  EXPECT_EQ(check.exit_code, 0) << check.err;
  auto run = zhost::testing::run_zhost(scratch.path(), "run train.toml --nproc 1");
  EXPECT_EQ(run.exit_code, 0) << run.err;
}

// A model whose states alone exceed this machine's memory is refused before anything is allocated.
TEST(MemoryCheck, RefusesAModelTooLargeForTheMachineAtOnce) {
  zhost::testing::ScratchDir scratch;
  // gpt, 24 blocks of width 4096: 4.8e9 parameters; stage 2 in fp32 on one rank keeps 20 bytes each (97 GB).
  scratch.write("train.toml",
                "steps = 1\n[model]\nlayers = 24\nwidth = 4096\nheads = 32\nseq_len = 128\n[zero]\nstage = 2\n");
  const auto start = std::chrono::steady_clock::now();
  auto run = zhost::testing::run_zhost(scratch.path(), "run train.toml");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("zhost: error: the model states alone need 90.1 GiB of host memory on this machine (1 "
                         "rank(s) here of 1, ZeRO stage 2), but it has "),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("GiB available (MemAvailable in /proc/meminfo); use zero.stage = 3"), std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("set run.memory_check = false to start anyway"), std::string::npos) << run.err;
  EXPECT_LT(seconds, 5.0) << "the refusal took " << seconds << " s";
  auto launched = zhost::testing::run_zhost(scratch.path(), "run train.toml --nproc 2");
  EXPECT_EQ(launched.exit_code, 2) << launched.err;
  EXPECT_NE(launched.err.find("(2 rank(s) here of 2, ZeRO stage 2)"), std::string::npos) << launched.err;
  // config check has no world size: it does not refuse the model.
  EXPECT_EQ(zhost::testing::run_zhost(scratch.path(), "config check train.toml").exit_code, 0);
}

// Stage 3's own check (its check_config, Note [Plugin config checks]): a zero.offload_param.buffer_size below the
// largest parameter shard, which setup refuses on every rank, is refused by `config check` from the config and
// the world size alone, at its line; with room for the largest shard both accept it. Without --nproc the world
// size is not known and the shard not either, as for the memory check.
TEST(PluginConfigCheck, Stage3RefusesAnOffloadBufferBelowTheLargestShard) {
  zhost::testing::ScratchDir scratch;
  const std::string config =
      "steps = 1\n[model]\nlayers = 2\nwidth = 64\nheads = 2\nseq_len = 16\n[zero]\nstage = 3\n"
      "[zero.offload_optimizer]\ndevice = \"cpu\"\n[zero.offload_param]\ndevice = \"cpu\"\nbuffer_size = ";
  scratch.write("train.toml", config + "1\n");
  // The largest shard: half of a transformer layer's weights (its small norms and biases stay gathered).
  const std::string line =
      "zhost: error: train.toml:13: zero.offload_param.buffer_size = 1 elements is smaller than the largest "
      "parameter shard (";
  auto check = zhost::testing::run_zhost(scratch.path(), "config check train.toml --nproc 2");
  EXPECT_EQ(check.exit_code, 2) << check.out << check.err;
  EXPECT_NE(check.err.find(line), std::string::npos) << check.err;
  auto run = zhost::testing::run_zhost(scratch.path(), "run train.toml --nproc 2");
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find(line), std::string::npos) << run.err;
  EXPECT_EQ(zhost::testing::run_zhost(scratch.path(), "config check train.toml").exit_code, 0);
  scratch.write("train.toml", config + "100000\n");
  auto roomy = zhost::testing::run_zhost(scratch.path(), "config check train.toml --nproc 2");
  EXPECT_EQ(roomy.exit_code, 0) << roomy.err;
}

// What the NVMe tier keeps in files does not count: with the optimizer states and the parameter shards on
// NVMe, only the gradients stay in host memory (4 of stage 3's 16 bytes per parameter in fp32), and the
// shards' first zero.offload_param.max_in_cpu elements (DeepSpeed's default 1e9: 4 GB more).
TEST(MemoryCheck, CountsOnlyWhatStaysInHostMemoryWithNvmeOffload) {
  zhost::testing::ScratchDir scratch;
  scratch.write("train.toml",  // gpt, 24 blocks of width 8192: 1.9e10 parameters
                "steps = 1\n[model]\nlayers = 24\nwidth = 8192\nheads = 32\nseq_len = 128\n[zero]\nstage = 3\n");
  const std::string folder = (scratch.path() / "nvme").string();
  std::filesystem::create_directories(folder);
  auto in_memory = zhost::testing::run_zhost(scratch.path(), "run train.toml");
  EXPECT_EQ(in_memory.exit_code, 2) << in_memory.err;
  EXPECT_NE(in_memory.err.find("the model states alone need 288.1 GiB"), std::string::npos) << in_memory.err;
  const std::string nvme =
      "run train.toml --set zero.offload_optimizer.device=nvme --set "
      "zero.offload_optimizer.nvme_path=" +
      folder + " --set zero.offload_param.device=nvme --set zero.offload_param.nvme_path=" + folder;
  auto on_nvme = zhost::testing::run_zhost(scratch.path(), nvme + " --set zero.offload_param.max_in_cpu=0");
  EXPECT_EQ(on_nvme.exit_code, 2) << on_nvme.err;
  EXPECT_NE(on_nvme.err.find("the model states alone need 72.0 GiB"), std::string::npos) << on_nvme.err;
  auto default_kept = zhost::testing::run_zhost(scratch.path(), nvme);
  EXPECT_EQ(default_kept.exit_code, 2) << default_kept.err;
  EXPECT_NE(default_kept.err.find("the model states alone need 75.7 GiB"), std::string::npos) << default_kept.err;
}

// Model states that cannot fit the NVMe folder's file system are refused before anything is written (Note
// [NVMe config check], with the bytes of Note [Storage space at start]), by `config check --nproc` as by `run`: a 16 MB
// disk (12.6 MiB free) and a 1.65M-parameter gpt at stage 3 whose optimizer states (16 bytes per parameter: master,
// Adam's two, the moved gradient) take 25.2 MiB and whose fp32 shards take 6.3 MiB more when max_in_cpu = 0 keeps none
// of them in host memory.
TEST(NvmeSpaceCheck, RefusesStatesThatCannotFitTheDiskBeforeWritingAny) {
  zhost::testing::ScratchDir scratch;
  zhost::testing::SmallDisk disk(scratch.path(), 16);
  if (!disk.mounted()) GTEST_SKIP() << "needs root, mkfs.ext4 and a loop device";
  scratch.write("train.toml",
                "steps = 1\n[model]\nlayers = 2\nwidth = 256\nheads = 4\nseq_len = 16\n[zero]\nstage = 3\n");
  const std::string folder = disk.path().string();
  const std::string run =
      "run train.toml --set zero.offload_optimizer.device=nvme --set zero.offload_optimizer.nvme_path=" + folder +
      " --set zero.offload_param.device=nvme --set zero.offload_param.nvme_path=" + folder;
  auto files_on_disk = [&] {
    int n = 0;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(disk.path()))
      n += entry.is_regular_file() && entry.path().string().find("lost+found") == std::string::npos;
    return n;
  };
  auto both = zhost::testing::run_zhost(scratch.path(), run + " --set zero.offload_param.max_in_cpu=0");
  EXPECT_EQ(both.exit_code, 2) << both.err;
  EXPECT_NE(both.err.find("zhost: error: --set zero.offload_optimizer.nvme_path=" + folder +
                          ": the model states on NVMe alone need 31.5 MiB on the file system of " + folder +
                          " (25.2 MiB for zero.offload_optimizer.nvme_path (" + folder +
                          ") and 6.3 MiB for zero.offload_param.nvme_path (" + folder +
                          "); 1 rank(s) here of 1), but it has "),
            std::string::npos)
      << both.err;
  EXPECT_NE(both.err.find("free; free space there, point the nvme_path keys at a larger disk, or set "
                          "run.memory_check = false to start anyway"),
            std::string::npos)
      << both.err;
  EXPECT_EQ(files_on_disk(), 0);
  // `config check`, told the world size, refuses the same at the same key.
  auto checked = zhost::testing::run_zhost(
      scratch.path(), "config check" + run.substr(3) + " --nproc 1 --set zero.offload_param.max_in_cpu=0");
  EXPECT_EQ(checked.exit_code, 2) << checked.err;
  EXPECT_NE(checked.err.find(": the model states on NVMe alone need 31.5 MiB on the file system of " + folder),
            std::string::npos)
      << checked.err;
  // The shards within max_in_cpu (the default, 1e9) stay in host memory and need no room there; two ranks
  // on this machine need the same bytes together.
  auto kept = zhost::testing::run_zhost(scratch.path(), run + " --nproc 2");
  EXPECT_EQ(kept.exit_code, 2) << kept.err;
  EXPECT_NE(kept.err.find("need 25.2 MiB on the file system of " + folder +
                          " (25.2 MiB for "
                          "zero.offload_optimizer.nvme_path (" +
                          folder + "); 2 rank(s) here of 2)"),
            std::string::npos)
      << kept.err;
  EXPECT_EQ(files_on_disk(), 0);
  // run.memory_check = false starts the job; the tier's own check then stops it when a buffer does not fit.
  auto unchecked = zhost::testing::run_zhost(scratch.path(), run + " --set run.memory_check=false");
  EXPECT_NE(unchecked.exit_code, 0);
  EXPECT_NE(unchecked.err.find("but its file system has"), std::string::npos) << unchecked.err;
  EXPECT_EQ(files_on_disk(), 0);
}

// DeepSpeed's offload_optimizer.fast_init speeds up an initial read from NVMe that zhost never makes: true is
// accepted with one warning saying so, by config check and by run alike.
TEST(NvmeConfig, FastInitIsAcceptedWithAWarningThatItChangesNothing) {
  zhost::testing::ScratchDir scratch;
  scratch.write("train.toml",
                "steps = 1\n[model]\nlayers = 1\nwidth = 32\nheads = 2\nseq_len = 8\n[zero]\nstage = 2\n");
  const std::string folder = (scratch.path() / "nvme").string();
  std::filesystem::create_directories(folder);
  const std::string args =
      " train.toml --set zero.offload_optimizer.device=nvme --set zero.offload_optimizer.nvme_path=" + folder +
      " --set zero.offload_optimizer.fast_init=true";
  const std::string warning = "warning: zero.offload_optimizer.fast_init = true changes nothing";
  auto check = zhost::testing::run_zhost(scratch.path(), "config check" + args);
  EXPECT_EQ(check.exit_code, 0) << check.err;
  EXPECT_NE((check.out + check.err).find(warning), std::string::npos) << check.out << check.err;
  auto run = zhost::testing::run_zhost(scratch.path(), "run" + args);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find(warning), std::string::npos) << run.err;
}

// Every config in examples/configs passes `config check` as shipped (infinity.toml with its nvme_path keys
// pointed at a scratch folder, which config check needs to exist).
TEST(ExampleConfigs, EveryOnePassesConfigCheck) {
  zhost::testing::ScratchDir scratch;
  const std::string folder = (scratch.path() / "nvme").string();
  std::filesystem::create_directories(folder);
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(ZHOST_SOURCE_DIR) + "/examples/configs")) {
    if (entry.path().extension() != ".toml") continue;
    std::string args = "config check " + entry.path().string();
    if (entry.path().filename() == "infinity.toml")
      args += " --set zero.offload_optimizer.nvme_path=" + folder + " --set zero.offload_param.nvme_path=" + folder;
    auto check = zhost::testing::run_zhost(scratch.path(), args);
    EXPECT_EQ(check.exit_code, 0) << entry.path() << ":\n" << check.err;
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

// Note [--set wins over the file]: a --set that makes the file's keys unused is the user's word for this run:
// one warning names the keys it made inert, and the job runs (the file's own contradictions stay errors).
TEST(SetOverFile, WinsOverTheKeysItMakesUnusedWithOneWarning) {
  zhost::testing::ScratchDir scratch;
  const std::string file = std::string(ZHOST_SOURCE_DIR) + "/examples/configs/train.toml";
  auto data = zhost::testing::run_zhost(scratch.path(), "config check " + file + " --set data.type=synthetic");
  ASSERT_EQ(data.exit_code, 0) << data.err;
  const std::string data_warning =
      "--set data.type=synthetic: warning: data.type = \"synthetic\" overrides the file, "
      "so its data.path (at " +
      file +
      ":22) is unused (only data.type = \"tokens\" or "
      "data.type = \"text\" reads it); the command line wins";
  EXPECT_NE(data.out.find(data_warning), std::string::npos) << data.out;
  auto schedule = zhost::testing::run_zhost(scratch.path(), "config check " + file + " --set scheduler.type=none");
  ASSERT_EQ(schedule.exit_code, 0) << schedule.err;
  EXPECT_NE(schedule.out.find("--set scheduler.type=none: warning: scheduler.type = \"none\" overrides the file, so "
                              "its scheduler.warmup_num_steps (at " +
                              file + ":31), scheduler.warmup_type (at " + file + ":32) are unused"),
            std::string::npos)
      << schedule.out;
  // The run warns once and trains.
  auto run = zhost::testing::run_zhost(
      scratch.path(), "run " + file + " --set data.type=synthetic --set steps=1 --set run.intra_op_threads=1",
      "timeout 120 ");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const size_t first = run.err.find("data.type = \"synthetic\" overrides the file");
  EXPECT_NE(first, std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("data.type = \"synthetic\" overrides the file", first + 1), std::string::npos) << run.err;
  // A --set key its file's selector does not read is still an error.
  auto unread = zhost::testing::run_zhost(scratch.path(), "config check " + file + " --set model.kv_heads=2");
  EXPECT_EQ(unread.exit_code, 2);
  EXPECT_NE(unread.err.find("--set model.kv_heads=2: model.kv_heads is set, but only model.type = \"llama\" reads it"),
            std::string::npos)
      << unread.err;
}

}  // namespace

// A run.dir that cannot be created is reported with its real cause and path (here a read-only file system,
// mounted in a mount namespace of the test's own; skipped where that is not allowed), not as the missing run.log.
TEST(RunDirectory, ReadOnlyFileSystemIsNamedAsTheCause) {
  zhost::testing::ScratchDir scratch;
  scratch.write("train.toml", kModel);
  fs::create_directories(scratch.path() / "ro");
  if (std::system(("cd " + scratch.path().string() + " && unshare -m true 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "unshare -m is not allowed here";
  for (const char* nproc : {"", " --nproc 2"}) {
    auto run = zhost::testing::run_zhost(
        scratch.path(), std::string("run train.toml --set run.dir=ro/runs --set run.name=x") + nproc + "'",
        "unshare -m sh -c 'mount -t tmpfs -o ro none ro && exec ");
    EXPECT_NE(run.exit_code, 0) << nproc << "\n" << run.err;
    EXPECT_NE(run.err.find("cannot create the run directory ro/runs/x: Read-only file system; set run.dir to a "
                           "writable folder"),
              std::string::npos)
        << nproc << "\n"
        << run.err;
    EXPECT_EQ(run.err.find("No such file or directory"), std::string::npos) << run.err;
  }
}

// A run.dir on a full disk: the job fails with zhost's error naming the cause, the log file's failed writes are one
// zhost warning (not spdlog's raw "[*** LOG ERROR ***]" lines), and the terminal still has the log's lines. The
// disk is a 1 MiB tmpfs filled up, mounted in a mount namespace of the test's own.
TEST(RunDirectory, FullDiskIsZhostsWarningAndErrorWithoutRawLoggerLines) {
  zhost::testing::ScratchDir scratch;
  scratch.write("train.toml", kModel);
  fs::create_directories(scratch.path() / "full");
  if (std::system(("cd " + scratch.path().string() + " && unshare -m true 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "unshare -m is not allowed here";
  auto run = zhost::testing::run_zhost(
      scratch.path(), "run train.toml --set run.dir=full/runs --set run.name=x'",
      "unshare -m sh -c 'mount -t tmpfs -o size=1m none full && (dd if=/dev/zero of=full/fill bs=4k 2>/dev/null; "
      "true) && exec ");
  EXPECT_NE(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("No space left on device"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("LOG ERROR"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("zhost: warning: cannot write the log full/runs/x/run.log: No space left on device; its lines "
                         "go to the terminal only"),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("zhost: error: "), std::string::npos) << run.err;
}
