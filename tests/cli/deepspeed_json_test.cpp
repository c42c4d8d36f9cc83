// tests/cli/deepspeed_json_test.cpp: DeepSpeed's ds_config.json read directly by the zhost executable:
// every problem of a file in one run with line:column, notes instead of refusals for keys that change
// nothing here, deprecated names mapped, `config import` round-tripping, `config check --nproc`, a raw
// JSON config training, and the corpus of real DeepSpeed configs (tests/config/deepspeed_corpus) each
// giving its expected outcome (deepspeed_corpus_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/cli_support.hpp"
#include "tests/support/scratch_dir.hpp"

namespace fs = std::filesystem;
using zhost::testing::CliResult;
using zhost::testing::run_zhost;
using zhost::testing::ScratchDir;

namespace {

// zhost finds its own plugins next to the executable.
const std::string kPlugins;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The resolved values of `config check`'s printout, without the origin comments.
std::vector<std::string> resolved_values(const std::string& out) {
  std::vector<std::string> values;
  for (std::string line : lines_of(out)) {
    if (line.empty() || line[0] == '#') continue;
    if (size_t comment = line.find("  #"); comment != std::string::npos) line.resize(comment);
    values.push_back(line);
  }
  return values;
}

TEST(DeepSpeedJson, ReportsEveryProblemOfAFileAtOnceWithLineAndColumn) {
  ScratchDir dir;
  dir.write("ds.json", R"({
  // comments and trailing commas, as people write them
  "train_micro_batch_size_per_gpu": 2,
  "prescale_gradients": 1,
  "optimizer": {"type": "Adam", "params": {"lr": "auto", "amsgrad": true,},},
  "zero_optimization": {"stage": 2, "stage3_max_live_parameters": 1e9, "reduce_bucket_sise": 5e8},
  "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.0001, "cycle_max_lr": 0.001}},
})");
  CliResult r = run_zhost(dir.path(), "config check ds.json" + kPlugins);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  const std::vector<std::string> expected = {
      "zhost: error: ds.json:4:3: prescale_gradients must be true or false, got integer 1",
      "zhost: error: ds.json:5:58: optimizer.params.amsgrad = true: AMSGrad is not supported by zhost",
      "zhost: error: ds.json:6:72: 'zero_optimization.reduce_bucket_sise' is not a DeepSpeed key in "
      "zero_optimization; did you mean 'zero_optimization.reduce_bucket_size'?"};
  const std::vector<std::string> lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 3u) << r.err;  // lr's "auto" takes HF Trainer's default (Note [HF's "auto"])
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(lines[i].rfind(expected[i], 0), 0u) << lines[i];
  // Never "remove it" for a key that changes the math.
  EXPECT_EQ(r.err.find("remove it"), std::string::npos) << r.err;
}

TEST(DeepSpeedJson, KeysThatChangeNothingHereAreAcceptedWithANote) {
  ScratchDir dir;
  dir.write("ds.json", R"({
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": 2,
  "zero_optimization": {"stage": 2, "cpu_offload": true, "stage3_prefetch_bucket_size": 5e7,
                        "allgather_partitions": true, "reduce_bucket_size": "auto"},
  "bfloat16": {"enabled": false},
  "tensorboard": {"enabled": true, "output_path": "tb/"},
  "zhost": {"steps": 3, "model": {"layers": 1, "width": 32, "heads": 2, "seq_len": 8}}
})");
  CliResult r = run_zhost(dir.path(), "config check ds.json" + kPlugins);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* expected : {
           "# ds.json:2:3: note: train_batch_size = \"auto\": derived as",
           "# ds.json:4:37: warning: cpu_offload is deprecated in DeepSpeed; read as "
           "zero_optimization.offload_optimizer.device = \"cpu\"",
           "# ds.json:4:58: note: zero.stage3_prefetch_bucket_size is not read by this config",
           "# ds.json:5:25: note: zero_optimization.allgather_partitions = true:",
           "# ds.json:5:55: note: zero_optimization.reduce_bucket_size = \"auto\":",
           "# ds.json:6:3: note: bfloat16 is DeepSpeed's deprecated name of bf16",
           "# ds.json:7:19: note: tensorboard.enabled = true: monitoring only",
       }) {
    EXPECT_NE(r.out.find(expected), std::string::npos) << expected << "\n" << r.out;
  }
  EXPECT_NE(r.out.find("device = \"cpu\"  # ds.json:4 (host)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layers = 1  # ds.json:8 (host)"), std::string::npos) << r.out;
}

// Lamb (BERT's pretraining configs) and OneCycle's momentum cycling, DeepSpeed's default, are read with DeepSpeed's
// meaning, and the job trains on 2 ranks.
TEST(DeepSpeedJson, LambAndOneCycleMomentumTrainWithDeepSpeedsMeaning) {
  ScratchDir dir;
  dir.write("ds.json", R"({
  "train_batch_size": 4,
  "optimizer": {"type": "Lamb", "params": {"lr": 1e-3, "weight_decay": 0.01, "bias_correction": false,
                                           "max_coeff": 0.3, "min_coeff": 0.01}},
  "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3,
                                               "cycle_first_step_size": 2, "cycle_max_mom": 0.95}},
  "zhost": {"steps": 4, "model": {"layers": 1, "width": 32, "heads": 2, "seq_len": 8}}
})");
  CliResult check = run_zhost(dir.path(), "config check ds.json" + kPlugins);
  ASSERT_EQ(check.exit_code, 0) << check.err;
  for (const char* expected : {"type = \"Lamb\"", "max_coeff = 0.3", "bias_correction = false", "cycle_momentum = true",
                               "cycle_max_mom = 0.95"}) {
    EXPECT_NE(check.out.find(expected), std::string::npos) << expected << "\n" << check.out;
  }
  CliResult run = run_zhost(dir.path(), "run ds.json --nproc 2" + kPlugins);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  // Lamb under ZeRO is refused at the file's stage, as DeepSpeed refuses it without zero_allow_untested_optimizer.
  dir.write("zero.json",
            R"({"train_batch_size": 4, "optimizer": {"type": "Lamb"}, "zero_optimization": {"stage": 1}})");
  CliResult zero = run_zhost(dir.path(), "config check zero.json" + kPlugins);
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.err.find("optimizer.type = \"Lamb\" needs zero.stage = 0"), std::string::npos) << zero.err;
}

// sglang's offload configs leave offload_param.buffer_size = "auto" for their launcher: a size that changes no
// value, so zhost's default stands (and stage 3 still checks it against the largest shard).
TEST(DeepSpeedJson, AutoParamBufferSizeTakesTheDefaultWithANote) {
  ScratchDir dir;
  dir.write("ds.json", R"({
  "train_batch_size": 2,
  "zero_optimization": {"stage": 3,
                        "offload_param": {"device": "cpu", "pin_memory": true, "buffer_size": "auto"}},
  "zhost": {"steps": 2, "model": {"layers": 1, "width": 32, "heads": 2, "seq_len": 8}}
})");
  CliResult r = run_zhost(dir.path(), "config check ds.json" + kPlugins);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("note: zero_optimization.offload_param.buffer_size = \"auto\": its launcher sizes it"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("buffer_size = 100000000"), std::string::npos) << r.out;
}

TEST(DeepSpeedJson, ImportRoundTripsToTheSameResolvedConfig) {
  ScratchDir dir;
  dir.write("ds.json", R"({
  "train_batch_size": 8, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
  "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 10, "total_num_steps": 100}},
  "zero_optimization": {"stage": 3, "overlap_comm": true, "allgather_bucket_size": 2e8,
                        "offload_optimizer": {"device": "cpu", "pin_memory": true, "buffer_count": 4}},
  "fp16": {"enabled": false, "loss_scale_window": 500}
})");
  dir.write("zhost.toml", "steps = 5\n[model]\nlayers = 1\nwidth = 32\nheads = 2\nseq_len = 8\n");
  CliResult imported = run_zhost(dir.path(), "config import ds.json --companion zhost.toml" + kPlugins);
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  EXPECT_NE(imported.out.find("# allgather_bucket_size = 200000000.0  # from "
                              "zero_optimization.allgather_bucket_size, ds.json:5:59: not read by this config"),
            std::string::npos)
      << imported.out;
  dir.write("train.toml", imported.out);
  CliResult from_json = run_zhost(dir.path(), "config check ds.json --companion zhost.toml" + kPlugins);
  CliResult from_toml = run_zhost(dir.path(), "config check train.toml" + kPlugins);
  ASSERT_EQ(from_json.exit_code, 0) << from_json.err;
  ASSERT_EQ(from_toml.exit_code, 0) << from_toml.err;
  EXPECT_EQ(resolved_values(from_json.out), resolved_values(from_toml.out));
  EXPECT_NE(from_toml.out.find("warmup_max_lr = 0.001"), std::string::npos) << from_toml.out;  // DeepSpeed's default
}

// What DeepSpeed reads depends on the stage (offload_param only at stage 3) and on the offload devices (the
// aio table only when something goes to NVMe): --set zero.stage and --set zero.offload_*.device decide that
// mapping as they would in DeepSpeed's own config.
TEST(DeepSpeedJson, SetStageAndDevicesDecideWhatTheJsonMapsTo) {
  ScratchDir dir;
  dir.write("ds.json", R"({
  "train_micro_batch_size_per_gpu": 2,
  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}},
  "aio": {"queue_depth": 16},
  "zhost": {"steps": 3, "model": {"layers": 1, "width": 32, "heads": 2, "seq_len": 8}}
})");
  const std::string param_note = "DeepSpeed reads offload_param only at stage 3, so it changes nothing at this stage";
  const std::string aio_note =
      "aio.queue_depth = 16: configures DeepSpeed's NVMe I/O, and this config offloads nothing";
  CliResult two = run_zhost(dir.path(), "config check ds.json" + kPlugins);
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_NE(two.out.find(param_note), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("[zero.offload_param]\ndevice = \"none\"  # default"), std::string::npos) << two.out;

  CliResult three = run_zhost(dir.path(), "config check ds.json --set zero.stage=3" + kPlugins);
  ASSERT_EQ(three.exit_code, 0) << three.err;
  EXPECT_EQ(three.out.find(param_note), std::string::npos) << three.out;
  // nvme_path is offload_nvme's key, active because a swap may bring that tier in (Note [Storage swap]).
  EXPECT_NE(three.out.find("device = \"cpu\"  # ds.json:3 (host)\nmax_in_cpu = 1000000000  # default (stage3)\n"
                           "nvme_path = \"\"  # default (offload_nvme)\npin_memory = false  # default (offload_nvme)\n"
                           "swap_schedule = []  # default (host)\n\n# plugins"),
            std::string::npos)
      << three.out;

  CliResult nvme = run_zhost(
      dir.path(),
      "config check ds.json --set zero.offload_optimizer.device=nvme --set zero.offload_optimizer.nvme_path=." +
          kPlugins);
  ASSERT_EQ(nvme.exit_code, 0) << nvme.err;
  EXPECT_NE(two.out.find(aio_note), std::string::npos) << two.out;
  EXPECT_EQ(nvme.out.find(aio_note), std::string::npos) << nvme.out;
  EXPECT_NE(nvme.out.find("queue_depth = 16  # ds.json:4"), std::string::npos) << nvme.out;
}

// DeepSpeed's activation_checkpointing keys map to zhost's own. They refine zhost's switch (the "zhost"
// table's activation_checkpointing.enabled): without it they change nothing and are noted, as DeepSpeed
// ignores them unless the model calls its checkpointing API; partition_activations = true is refused (no
// model parallelism).
TEST(DeepSpeedJson, ActivationCheckpointingKeysMapToZhostsOwn) {
  ScratchDir dir;
  dir.write("ds.json", R"({
  "train_micro_batch_size_per_gpu": 2,
  "activation_checkpointing": {"partition_activations": false, "cpu_checkpointing": true,
                               "contiguous_memory_optimization": true, "number_checkpoints": 1,
                               "synchronize_checkpoint_boundary": false},
  "zhost": {"steps": 3, "model": {"layers": 1, "width": 32, "heads": 2, "seq_len": 8},
            "activation_checkpointing": {"enabled": true}}
})");
  CliResult r = run_zhost(dir.path(), "config check ds.json" + kPlugins);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* expected :
       {"cpu_checkpointing = true  # ds.json:3 (host)", "contiguous_memory_optimization = true  # ds.json:4 (host)",
        "number_checkpoints = 1  # ds.json:4 (host)",
        "note: activation_checkpointing.synchronize_checkpoint_boundary = false: a knob of "
        "DeepSpeed's checkpointing API"}) {
    EXPECT_NE(r.out.find(expected), std::string::npos) << expected << "\n" << r.out;
  }
  // With zhost's switch off they change nothing, as in DeepSpeed when the model does not call its
  // checkpointing API: accepted with a note each, and left at zhost's defaults.
  CliResult off = run_zhost(dir.path(), "config check ds.json --set activation_checkpointing.enabled=false" + kPlugins);
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_NE(off.out.find("# ds.json:3:64: note: activation_checkpointing.cpu_checkpointing: DeepSpeed reads it only "
                         "when the model calls its checkpointing API, and zhost only with "
                         "activation_checkpointing.enabled = true, which is off here: it changes nothing"),
            std::string::npos)
      << off.out;
  EXPECT_NE(off.out.find("cpu_checkpointing = false  # default"), std::string::npos) << off.out;
  dir.write("alone.json", R"({"train_micro_batch_size_per_gpu": 2,
  "activation_checkpointing": {"cpu_checkpointing": true, "number_checkpoints": 2}})");
  CliResult alone = run_zhost(dir.path(), "config check alone.json" + kPlugins);
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_NE(alone.out.find("# alone.json:2:59: note: activation_checkpointing.number_checkpoints: DeepSpeed reads"),
            std::string::npos)
      << alone.out;
  // A --set refinement without the switch stays an error: the user asked for it here.
  CliResult asked =
      run_zhost(dir.path(), "config check alone.json --set activation_checkpointing.number_checkpoints=1" + kPlugins);
  EXPECT_EQ(asked.exit_code, 2) << asked.out;
  dir.write("partition.json", R"({"activation_checkpointing": {"partition_activations": true}})");
  CliResult partition = run_zhost(dir.path(), "config check partition.json" + kPlugins);
  EXPECT_EQ(partition.exit_code, 2);
  EXPECT_NE(partition.err.find("activation_checkpointing.partition_activations = true is not supported: it shards "
                               "activations that model-parallel ranks replicate"),
            std::string::npos)
      << partition.err;
}

// DeepSpeed turns LoCo on by the presence of zeropp_loco_param; its two keys map to zhost's, a misspelt one is
// refused with a suggestion, and LoCo without qgZ is refused with the reason.
TEST(DeepSpeedJson, ZeroppLocoTableTurnsLocoOnWithItsValues) {
  ScratchDir dir;
  dir.write("ds.json", R"({
  "train_micro_batch_size_per_gpu": 2,
  "zero_optimization": {"stage": 3, "zero_quantized_gradients": true,
                        "zeropp_loco_param": {"err_beta": 0.5, "reset_T": 64}},
  "zhost": {"steps": 3, "model": {"layers": 1, "width": 32, "heads": 2, "seq_len": 8}}
})");
  CliResult r = run_zhost(dir.path(), "config check ds.json" + kPlugins);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* expected : {"[zero.zeropp_loco_param]\nenabled = true  # ds.json:4 (host; read by quant_zeropp)\n"
                               "err_beta = 0.5  # ds.json:4 (host; read by quant_zeropp)\nreset_T = 64  # ds.json:4"}) {
    EXPECT_NE(r.out.find(expected), std::string::npos) << expected << "\n" << r.out;
  }
  dir.write("typo.json", R"({"zero_optimization": {"stage": 3, "zero_quantized_gradients": true,
                        "zeropp_loco_param": {"err_bta": 0.5}}})");
  CliResult typo = run_zhost(dir.path(), "config check typo.json" + kPlugins);
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.err.find("'zero_optimization.zeropp_loco_param.err_bta' is not a DeepSpeed key in "
                          "zero_optimization.zeropp_loco_param; did you mean "
                          "'zero_optimization.zeropp_loco_param.err_beta'?"),
            std::string::npos)
      << typo.err;
  dir.write("alone.json", R"({"zero_optimization": {"stage": 3, "zeropp_loco_param": {}}})");
  CliResult alone = run_zhost(dir.path(), "config check alone.json" + kPlugins);
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_NE(alone.err.find("zero.zeropp_loco_param.enabled = true needs zero.zero_quantized_gradients = true"),
            std::string::npos)
      << alone.err;
}

TEST(DeepSpeedJson, CheckpointKeysAreNotedOrRefusedWithTheReason) {
  ScratchDir dir;
  dir.write("ds.json", R"({
  "train_micro_batch_size_per_gpu": 2,
  "checkpoint": {"tag_validation": "Warn", "load_universal": true, "parallel_write": {"pipeline_stage": false}},
  "zhost": {"steps": 3, "model": {"layers": 1, "width": 32, "heads": 2, "seq_len": 8}}
})");
  CliResult r = run_zhost(dir.path(), "config check ds.json" + kPlugins);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* expected :
       {"note: checkpoint.tag_validation = \"Warn\": DeepSpeed checks that every rank saves under one tag",
        "note: checkpoint.load_universal = true: zhost's checkpoints load on any world size and stage",
        "note: checkpoint.parallel_write"})
    EXPECT_NE(r.out.find(expected), std::string::npos) << expected << "\n" << r.out;
  dir.write("local.json", R"({"checkpoint": {"use_node_local_storage": true}})");
  CliResult local = run_zhost(dir.path(), "config check local.json" + kPlugins);
  EXPECT_EQ(local.exit_code, 2);
  EXPECT_NE(local.err.find("checkpoint.use_node_local_storage = true: zhost's ranks write one checkpoint folder"),
            std::string::npos)
      << local.err;
}

TEST(DeepSpeedJson, CheckWithNprocChecksTheBatchArithmetic) {
  ScratchDir dir;
  dir.write("ds.json", R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 2})");
  CliResult unchecked = run_zhost(dir.path(), "config check ds.json" + kPlugins);
  EXPECT_EQ(unchecked.exit_code, 0) << unchecked.err;
  CliResult r = run_zhost(dir.path(), "config check ds.json --nproc 2 --nnodes 2" + kPlugins);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("zhost: error: ds.json:1:2: with --nproc 2 --nnodes 2 (world size 4): train_batch_size = 30 "
                       "does not match train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size = "
                       "4 * 2 * 4 = 32"),
            std::string::npos)
      << r.err;
  dir.write("ok.json", R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})");
  dir.write("hpz.json", R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3,
                              "zero_hpz_partition_size": 4}})");
  CliResult hpz = run_zhost(dir.path(), "config check hpz.json --nproc 2 --nnodes 2" + kPlugins);
  EXPECT_EQ(hpz.exit_code, 2);
  EXPECT_NE(hpz.err.find("zhost: error: hpz.json:2:31: with --nproc 2 --nnodes 2: zero.zero_hpz_partition_size = 4, "
                         "but zhost's hpZ keeps the secondary partition within a node and this launch runs 2 ranks "
                         "per node; set it to 2"),
            std::string::npos)
      << hpz.err;
  EXPECT_EQ(run_zhost(dir.path(), "config check hpz.json --nproc 4" + kPlugins).exit_code, 0);
  CliResult ok = run_zhost(dir.path(), "config check ok.json --nproc 4" + kPlugins);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("is valid for 4 ranks"), std::string::npos) << ok.out;
}

// HF Trainer's "auto" (Note [HF's "auto"]): where zhost cannot derive the value, the trainer's arguments fill
// it, and zhost's arguments are --set, the companion TOML and the "zhost" table. What none of them gives takes
// HF Trainer's default, as the Trainer run without that argument would, each noted with the --set that
// gives another value; with them the file trains with theirs.
TEST(DeepSpeedJson, HfAutoIsFilledBySetCompanionOrZhostTable) {
  ScratchDir dir;
  dir.write("ds.json", R"({
  "train_micro_batch_size_per_gpu": "auto",
  "gradient_accumulation_steps": "auto",
  "gradient_clipping": "auto",
  "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": 1e-8, "weight_decay": 0.01}},
  "fp16": {"enabled": "auto", "loss_scale_window": 500},
  "bf16": {"enabled": "auto"},
  "zero_optimization": {"stage": 2}
})");
  CliResult defaults = run_zhost(dir.path(), "config check ds.json" + kPlugins);
  ASSERT_EQ(defaults.exit_code, 0) << defaults.err;
  for (const char* expected : {
           "# ds.json: \"auto\" that no --set, companion or \"zhost\" table fills took HF Trainer's default: "
           "train_micro_batch_size_per_gpu = 8, gradient_accumulation_steps = 1, gradient_clipping = 1.0, "
           "optimizer.lr = 5e-5, optimizer.betas = [0.9, 0.999], fp16.enabled = false, bf16.enabled = false; give "
           "yours with --set KEY=VALUE",
           "# ds.json:2:3: note: train_micro_batch_size_per_gpu = \"auto\": train_micro_batch_size_per_gpu = 8, HF "
           "Trainer's default (--per_device_train_batch_size); give yours with --set "
           "train_micro_batch_size_per_gpu=VALUE",
           "# ds.json:5:59: note: optimizer.params.betas = \"auto\": optimizer.betas = [0.9, 0.999], HF Trainer's "
           "default (--adam_beta1/--adam_beta2)",
           "train_micro_batch_size_per_gpu = 8  # ds.json:2 (auto: HF Trainer default) (host)",
           "  # ds.json:5 (auto: HF Trainer default) (host)",
       }) {
    EXPECT_NE(defaults.out.find(expected), std::string::npos) << expected << "\n" << defaults.out;
  }
  EXPECT_EQ(defaults.out.find("gradient_clipping = 1.0, set"), std::string::npos) << defaults.out;

  // The same file with zhost's arguments: --set, a companion, and a "zhost" table in a copy of the file.
  std::ifstream in(dir.path() / "ds.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.insert(text.rfind('}'), R"(, "zhost": {"bf16": {"enabled": true}, "steps": 2,
    "model": {"layers": 1, "width": 32, "heads": 2, "seq_len": 8}, "run": {"name": "auto"}})");
  dir.write("hf.json", text);
  dir.write("args.toml", "gradient_clipping = 0.5\n");
  const std::string args =
      " --companion args.toml --set train_micro_batch_size_per_gpu=2 --set gradient_accumulation_steps=2"
      " --set optimizer.lr=3e-4 --set 'optimizer.betas=[0.9, 0.95]' --set fp16.enabled=false" +
      kPlugins;
  CliResult filled = run_zhost(dir.path(), "config check hf.json" + args);
  ASSERT_EQ(filled.exit_code, 0) << filled.err;
  for (const char* expected : {
           "# hf.json:2:3: note: train_micro_batch_size_per_gpu = \"auto\": train_micro_batch_size_per_gpu = 2, set "
           "by --set train_micro_batch_size_per_gpu=2",
           "# hf.json:4:3: note: gradient_clipping = \"auto\": gradient_clipping = 0.5, set at args.toml:1:",
           "# hf.json:5:59: note: optimizer.params.betas = \"auto\": optimizer.betas = [0.9, 0.95], set by --set",
           "# hf.json:7:12: note: bf16.enabled = \"auto\": bf16.enabled = true, set at hf.json:",
           // fp16 is off (--set), so DeepSpeed reads none of its other keys.
           "# hf.json:6:31: note: fp16.loss_scale_window = 500: fp16 is not enabled",
       }) {
    EXPECT_NE(filled.out.find(expected), std::string::npos) << expected << "\n" << filled.out;
  }
  const std::vector<std::string> values = resolved_values(filled.out);
  for (const char* expected : {"train_micro_batch_size_per_gpu = 2", "gradient_accumulation_steps = 2",
                               "gradient_clipping = 0.5", "lr = 0.0003", "betas = [0.9, 0.95]", "enabled = true"}) {
    EXPECT_NE(std::find(values.begin(), values.end(), expected), values.end()) << expected << "\n" << filled.out;
  }
  CliResult trained =
      run_zhost(dir.path(), "run hf.json --nproc 2 --set run.intra_op_threads=1" + args, "timeout 120 ");
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  EXPECT_TRUE(fs::exists(dir.path() / "runs" / "auto" / "metrics.jsonl")) << trained.err;
}

// Note [DeepSpeed's clipping default]: a file that does not write gradient_clipping is clipped at 1.0, as
// DeepSpeed clips it (measured against DeepSpeed 0.19.8 by bench/vs_deepspeed), with a note; 0 written in the
// file, --set or the companion give another value without a clash, and a TOML config still does not clip.
TEST(DeepSpeedJson, UnwrittenClippingTakesDeepSpeedsDefault) {
  ScratchDir dir;
  dir.write("ds.json", R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}})");
  dir.write("off.json", R"({"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.0})");
  dir.write("args.toml", "gradient_clipping = 0.5\n");
  dir.write("train.toml", "train_micro_batch_size_per_gpu = 2\n");
  const auto clipping = [&](const std::string& args) {
    CliResult r = run_zhost(dir.path(), "config check " + args + kPlugins);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
    for (const std::string& line : resolved_values(r.out))
      if (line.rfind("gradient_clipping = ", 0) == 0)
        return line + (r.out.find("not written") != std::string::npos ? " noted" : "");
    return std::string("absent");
  };
  EXPECT_EQ(clipping("ds.json"), "gradient_clipping = 1.0 noted");
  EXPECT_EQ(clipping("ds.json --set gradient_clipping=0"), "gradient_clipping = 0.0");
  EXPECT_EQ(clipping("ds.json --companion args.toml"), "gradient_clipping = 0.5");
  EXPECT_EQ(clipping("off.json"), "gradient_clipping = 0.0");
  EXPECT_EQ(clipping("train.toml"), "gradient_clipping = 0.0");
  CliResult noted = run_zhost(dir.path(), "config check ds.json" + kPlugins);
  EXPECT_NE(noted.out.find("# ds.json:1:1: note: gradient_clipping not written: gradient_clipping = 1.0, DeepSpeed's "
                           "default"),
            std::string::npos)
      << noted.out;
  // config import writes the value DeepSpeed would use.
  CliResult imported = run_zhost(dir.path(), "config import ds.json" + kPlugins);
  EXPECT_NE(imported.out.find("\ngradient_clipping = 1.0"), std::string::npos) << imported.out;
}

// Note [DeepSpeed's overlap_comm default]: a stage-3 file that does not write overlap_comm means true, as in
// DeepSpeed, with a note; written, set or at another stage it is what it says (zhost's default at stages 1-2).
TEST(DeepSpeedJson, UnwrittenOverlapCommAtStage3TakesDeepSpeedsDefault) {
  ScratchDir dir;
  dir.write("z3.json", R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3}})");
  dir.write("z3off.json",
            R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3, "overlap_comm": false}})");
  dir.write("z2.json", R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}})");
  const auto overlap = [&](const std::string& args) {
    CliResult r = run_zhost(dir.path(), "config check " + args + kPlugins);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
    for (const std::string& line : resolved_values(r.out))
      if (line.rfind("overlap_comm = ", 0) == 0)
        return line + (r.out.find("overlap_comm not written") != std::string::npos ? " noted" : "");
    return std::string("absent");
  };
  EXPECT_EQ(overlap("z3.json"), "overlap_comm = true noted");
  EXPECT_EQ(overlap("z3.json --set zero.overlap_comm=false"), "overlap_comm = false");
  EXPECT_EQ(overlap("z3off.json"), "overlap_comm = false");
  EXPECT_EQ(overlap("z2.json"), "overlap_comm = false");
  EXPECT_EQ(overlap("z2.json --set zero.stage=3"), "overlap_comm = true noted");
  CliResult noted = run_zhost(dir.path(), "config check z3.json" + kPlugins);
  EXPECT_NE(noted.out.find("# z3.json:1:39: note: zero_optimization.overlap_comm not written: zero.overlap_comm = "
                           "true, DeepSpeed's default at stage 3"),
            std::string::npos)
      << noted.out;
  CliResult imported = run_zhost(dir.path(), "config import z3.json" + kPlugins);
  EXPECT_NE(imported.out.find("\noverlap_comm = true"), std::string::npos) << imported.out;
}

// With --set fp16.enabled=true on fp16's "auto", DeepSpeed would read fp16's other keys: so does the mapping.
TEST(DeepSpeedJson, SetFp16DecidesWhetherItsKeysAreRead) {
  ScratchDir dir;
  dir.write("ds.json",
            R"({"train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": "auto", "loss_scale_window": 500}})");
  CliResult imported = run_zhost(dir.path(), "config import ds.json --set fp16.enabled=true" + kPlugins);
  EXPECT_NE(imported.out.find("loss_scale_window = 500  # from fp16.loss_scale_window"), std::string::npos)
      << imported.out << imported.err;
}

TEST(DeepSpeedJson, SyntaxErrorsPointAtLineAndColumn) {
  ScratchDir dir;
  dir.write("bad.json", "{\n  \"zero_optimization\": {\"stage\": 2,, }\n}\n");
  CliResult r = run_zhost(dir.path(), "config check bad.json" + kPlugins);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("zhost: error: bad.json:2:38: not valid JSON:", 0), 0u) << r.err;
}

TEST(DeepSpeedJson, ARawDeepSpeedConfigTrains) {
  ScratchDir dir;
  dir.write("ds.json", R"({
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 2,
  "prescale_gradients": true,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
  "zero_optimization": {"stage": 2, "contiguous_gradients": true, "overlap_comm": true},
  "zhost": {"steps": 2, "model": {"layers": 1, "width": 32, "heads": 2, "seq_len": 8}, "run": {"name": "json"}}
})");
  CliResult r = run_zhost(dir.path(), "run ds.json --nproc 2 --set run.intra_op_threads=1" + kPlugins, "timeout 120 ");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir.path() / "runs" / "json" / "metrics.jsonl")) << r.err;
}

// DeepSpeed's LR range test: step k (from 1) trains at min_lr * (1 + step_rate * (k - 1) / step_size), the
// quotient floored with staircase (deepspeed/runtime/lr_schedules.py; the schedule's unit test covers the
// formula, this one that the JSON reaches it and that the steps are counted as DeepSpeed counts them).
TEST(DeepSpeedJson, LrRangeTestScheduleTrainsWithDeepSpeedsLearningRates) {
  for (const bool staircase : {false, true}) {
    ScratchDir dir;
    dir.write("ds.json", std::string(R"({
  "train_micro_batch_size_per_gpu": 2,
  "steps_per_print": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "scheduler": {"type": "LRRangeTest", "params": {"lr_range_test_min_lr": 1e-4, "lr_range_test_step_size": 2,
                                                 "lr_range_test_step_rate": 5, "lr_range_test_staircase": )") +
                             (staircase ? "true" : "false") + R"(}},
  "zhost": {"steps": 5, "model": {"layers": 1, "width": 32, "heads": 2, "seq_len": 8}, "run": {"name": "lrrt"}}
})");
    CliResult r = run_zhost(dir.path(), "run ds.json --set run.intra_op_threads=1" + kPlugins, "timeout 120 ");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::ifstream metrics(dir.path() / "runs" / "lrrt" / "metrics.jsonl");
    std::vector<double> lrs;
    for (std::string line; std::getline(metrics, line);) lrs.push_back(nlohmann::json::parse(line)["lr"].get<double>());
    ASSERT_EQ(lrs.size(), 5u) << r.err;
    for (int k = 1; k <= 5; ++k) {
      const double quotient = staircase ? std::floor((k - 1) / 2.0) : (k - 1) / 2.0;
      EXPECT_NEAR(lrs[k - 1], 1e-4 * (1 + 5 * quotient), 1e-15) << "step " << k << (staircase ? " (staircase)" : "");
    }
  }
}

// The HF configuration guide's ZeRO-2 template, every value "auto" as written there, with nothing to fill
// them: each takes HF Trainer's default (Note [HF's "auto"]), `config check` shows where each value came
// from, and the file trains, logging the one line that lists what was filled.
TEST(DeepSpeedJson, HfTemplateWithEveryValueAutoTrainsOnHfTrainerDefaults) {
  ScratchDir dir;
  dir.write("ds_config.json", R"({
  "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
           "hysteresis": 2, "min_loss_scale": 1},
  "bf16": {"enabled": "auto"},
  "optimizer": {"type": "AdamW",
                "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
  "scheduler": {"type": "WarmupLR",
                "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto"}},
  "zero_optimization": {"stage": 2, "allgather_partitions": true, "allgather_bucket_size": 2e8,
                        "overlap_comm": true, "reduce_scatter": true, "reduce_bucket_size": "auto",
                        "contiguous_gradients": true},
  "gradient_accumulation_steps": "auto",
  "gradient_clipping": "auto",
  "steps_per_print": 2000,
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": "auto",
  "wall_clock_breakdown": false
})");
  CliResult checked = run_zhost(dir.path(), "config check ds_config.json" + kPlugins);
  ASSERT_EQ(checked.exit_code, 0) << checked.err;
  for (const char* expected : {
           "took HF Trainer's default: fp16.enabled = false, bf16.enabled = false, optimizer.lr = 5e-5, "
           "optimizer.betas = [0.9, 0.999], optimizer.eps = 1e-8, optimizer.weight_decay = 0.0, "
           "scheduler.warmup_num_steps = 2, gradient_accumulation_steps = 1, gradient_clipping = 1.0, "
           "train_micro_batch_size_per_gpu = 8; give yours with --set KEY=VALUE",
           "train_micro_batch_size_per_gpu = 8  # ds_config.json:16 (auto: HF Trainer default)",
           "gradient_accumulation_steps = 1  # ds_config.json:12 (auto: HF Trainer default)",
           "warmup_num_steps = 2  # ds_config.json:8 (auto: HF Trainer default)",
       }) {
    EXPECT_NE(checked.out.find(expected), std::string::npos) << expected << "\n" << checked.out;
  }
  CliResult trained = run_zhost(
      dir.path(), "run ds_config.json --nproc 2 --set steps=2 --set run.intra_op_threads=1" + kPlugins, "timeout 120 ");
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  EXPECT_NE(trained.err.find("took HF Trainer's default: fp16.enabled = false"), std::string::npos) << trained.err;
  EXPECT_NE(trained.err.find("give yours with --set KEY=VALUE"), std::string::npos) << trained.err;
}

// A DeepSpeed JSON alone holds no model, data or step count: the job says, in one line, that it trains
// zhost's defaults and how to give yours.
TEST(DeepSpeedJson, AJsonAloneSaysItTrainsZhostsDefaults) {
  ScratchDir dir;
  dir.write("ds.json", R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}})");
  CliResult alone = run_zhost(dir.path(), "config check ds.json" + kPlugins);
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_NE(alone.out.find("# ds.json: a DeepSpeed JSON names no model, data or steps, so this job trains zhost's "
                           "defaults (model.type = \"gpt\", data.type = \"synthetic\", steps = 100); give yours with "
                           "--set model.type=hf --set model.path=DIR --set data.type=text --set data.path=FILE --set "
                           "steps=N, or in a companion TOML (--companion FILE) or the file's \"zhost\" table"),
            std::string::npos)
      << alone.out;
  CliResult run = run_zhost(dir.path(),
                            "run ds.json --set steps=1 --set model.layers=1 --set model.width=32 --set model.heads=2 "
                            "--set model.seq_len=8 --set run.intra_op_threads=1" +
                                kPlugins,
                            "timeout 120 ");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("a DeepSpeed JSON names no model, data or steps, so this job trains zhost's defaults "
                         "(model.type = \"gpt\", data.type = \"synthetic\"); give yours with --set model.type=hf"),
            std::string::npos)
      << run.err;
  // Given all three, nothing is said.
  CliResult given = run_zhost(
      dir.path(), "config check ds.json --set model.type=gpt --set data.type=synthetic --set steps=3" + kPlugins);
  ASSERT_EQ(given.exit_code, 0) << given.err;
  EXPECT_EQ(given.out.find("names no model"), std::string::npos) << given.out;
}

// DeepSpeed reads its config with hjson, which takes # remarks as well as // and /* */ ones, also before
// the opening brace.
TEST(DeepSpeedJson, ReadsHashRemarksAsHjsonDoes) {
  ScratchDir dir;
  dir.write("ds.json", R"(# ZeRO-2, as hjson reads it
{
  "train_micro_batch_size_per_gpu": 2,  # per rank, "quoted" text in a remark
  "zero_optimization": {"stage": 2}  // the other kind
}
)");
  CliResult remarks = run_zhost(dir.path(), "config check ds.json" + kPlugins);
  ASSERT_EQ(remarks.exit_code, 0) << remarks.err;
  EXPECT_NE(remarks.out.find("train_micro_batch_size_per_gpu = 2  # ds.json:3"), std::string::npos) << remarks.out;
}

// zero_optimization.sub_group_size = 0 is valid in DeepSpeed: each parameter closes its sub-group. zhost reads
// it the same way: each unit a sub-group of its own.
TEST(DeepSpeedJson, SubGroupSizeZeroIsEachUnitItsOwnSubGroup) {
  ScratchDir dir;
  dir.write("ds.json", R"({"train_micro_batch_size_per_gpu": 2,
  "zero_optimization": {"stage": 3, "sub_group_size": 0},
  "zhost": {"steps": 2, "model": {"layers": 1, "width": 32, "heads": 2, "seq_len": 8}, "run": {"name": "sg0"}}})");
  CliResult checked = run_zhost(dir.path(), "config check ds.json" + kPlugins);
  ASSERT_EQ(checked.exit_code, 0) << checked.err;
  EXPECT_NE(checked.out.find("sub_group_size = 0  # ds.json:2"), std::string::npos) << checked.out;
  CliResult trained =
      run_zhost(dir.path(), "run ds.json --nproc 2 --set run.intra_op_threads=1" + kPlugins, "timeout 120 ");
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  EXPECT_TRUE(fs::exists(dir.path() / "runs" / "sg0" / "metrics.jsonl")) << trained.err;
}

// fp16 nested in zero_optimization by mistake: the refusal points to the top-level table DeepSpeed reads.
TEST(DeepSpeedJson, Fp16InsideZeroOptimizationPointsToTheTopLevelTable) {
  ScratchDir dir;
  dir.write("nested.json", R"({"train_micro_batch_size_per_gpu": 2,
  "zero_optimization": {"stage": 2, "fp16": {"enabled": true}}})");
  CliResult nested = run_zhost(dir.path(), "config check nested.json" + kPlugins);
  EXPECT_EQ(nested.exit_code, 2);
  EXPECT_NE(
      nested.err.find("zhost: error: nested.json:2:37: zero_optimization.fp16 = {\"enabled\":true}: fp16 is a "
                      "top-level table in DeepSpeed, not part of zero_optimization; move it out to the top level"),
      std::string::npos)
      << nested.err;
}

// `text` written as NAME.json and checked with `zhost config check`.
CliResult check_json(const ScratchDir& dir, const std::string& name, const std::string& text) {
  dir.write(name + ".json", text);
  return run_zhost(dir.path(), "config check " + name + ".json" + kPlugins);
}

// `text` with `from` (which it holds) replaced by `to`.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  return text.replace(text.find(from), from.size(), to);
}

constexpr const char* kCpuOffload = R"(, "offload_optimizer": {"device": "cpu"})";

// bf16_master_weights_and_grads maps to zhost's key; DeepSpeed's asserts refuse it without ZeRO-Offload's CPU Adam
// unless bf16_optimizer_states keeps the moments in bf16 on the device too (Note [bf16 masters without offload]),
// and so do both commands, and torch_adam (which replaces the CPU Adam) is refused with it.
TEST(DeepSpeedJson, Bf16MasterWeightsMapWithDeepSpeedsRules) {
  ScratchDir dir;
  const std::string offload = R"({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true,
  "bf16_master_weights_and_grads": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})";
  CliResult ok = check_json(dir, "offload", offload);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("master_weights_and_grads = true"), std::string::npos) << ok.out;

  const std::string plain = replaced(offload, kCpuOffload, "");
  CliResult refused = check_json(dir, "plain", plain);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("plain.json:2:3: bf16.master_weights_and_grads = true without ZeRO-Offload needs "
                             "bf16.optimizer_states = true"),
            std::string::npos)
      << refused.err;

  CliResult states = check_json(dir, "on_device",
                                replaced(plain, R"("bf16_master_weights_and_grads": true)",
                                         R"("bf16_master_weights_and_grads": true, "bf16_optimizer_states": true)"));
  EXPECT_EQ(states.exit_code, 0) << states.err;
  EXPECT_NE(states.out.find("optimizer_states = true"), std::string::npos) << states.out;

  CliResult torch =
      check_json(dir, "torch_adam", replaced(offload, R"("lr": 1e-3)", R"("lr": 1e-3, "torch_adam": true)"));
  EXPECT_EQ(torch.exit_code, 2);
  EXPECT_NE(torch.err.find("DeepSpeed refuses torch's Adam with bf16_master_weights_and_grads"), std::string::npos)
      << torch.err;
}

// fp16_master_weights_and_grads maps to zhost's key: accepted under ZeRO-Offload's CPU Adam, refused without it as
// DeepSpeed's assert refuses it, and fp32_optimizer_states = false (fp16 moments) is refused: zhost has none.
TEST(DeepSpeedJson, Fp16MasterWeightsMapWithDeepSpeedsRules) {
  ScratchDir dir;
  const std::string offload = R"({"train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": true,
  "fp16_master_weights_and_grads": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})";
  CliResult ok = check_json(dir, "offload", offload);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("master_weights_and_grads = true  # offload.json"), std::string::npos) << ok.out;

  CliResult refused = check_json(dir, "plain", replaced(offload, kCpuOffload, ""));
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("fp16.master_weights_and_grads = true needs ZeRO-Offload with DeepSpeed's CPU Adam"),
            std::string::npos)
      << refused.err;

  CliResult moments =
      check_json(dir, "moments", replaced(offload, R"("lr": 1e-3)", R"("lr": 1e-3, "fp32_optimizer_states": false)"));
  EXPECT_EQ(moments.exit_code, 2);
  EXPECT_NE(moments.err.find("false under fp16 master weights keeps the CPU Adam's moments in fp16, which zhost does "
                             "not build"),
            std::string::npos)
      << moments.err;
}

// Note [fp32_optimizer_states]: false under bf16 masters and ZeRO-Offload is DeepSpeed's CPU Adam with bf16 moments,
// zhost's bf16.optimizer_states; without the CPU Adam, or with fp32 masters, nothing changes and it is noted.
TEST(DeepSpeedJson, Fp32OptimizerStatesFalseIsBf16StatesUnderBf16MastersWithCpuAdam) {
  ScratchDir dir;
  const std::string base = R"({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true, MASTERS},
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "fp32_optimizer_states": VALUE}},
  "zero_optimization": {"stage": 2OFFLOAD}})";
  auto config = [&](const std::string& masters, const std::string& value, bool offload) {
    std::string text = base;
    text.replace(text.find("MASTERS"), 7, masters);
    text.replace(text.find("VALUE"), 5, value);
    text.replace(text.find("OFFLOAD"), 7, offload ? R"(, "offload_optimizer": {"device": "cpu"})" : "");
    return text;
  };
  const std::string masters = R"("bf16_master_weights_and_grads": true)";
  dir.write("states.json", config(masters, "false", true));
  CliResult states = run_zhost(dir.path(), "config check states.json" + kPlugins);
  ASSERT_EQ(states.exit_code, 0) << states.err;
  EXPECT_NE(states.out.find("optimizer_states = true"), std::string::npos) << states.out;
  EXPECT_NE(states.out.find("the CPU Adam keeps the moments in bf16"), std::string::npos) << states.out;

  dir.write("fp32.json", config(R"("immediate_grad_update": false)", "false", true));
  CliResult fp32 = run_zhost(dir.path(), "config check fp32.json" + kPlugins);
  ASSERT_EQ(fp32.exit_code, 0) << fp32.err;
  EXPECT_EQ(fp32.out.find("optimizer_states = true"), std::string::npos) << fp32.out;
  EXPECT_NE(fp32.out.find("note: optimizer.params.fp32_optimizer_states = false: the CPU Adam keeps its moments in "
                          "the masters' dtype, fp32"),
            std::string::npos)
      << fp32.out;

  // NVMe offload steps with the CPU Adam too: the moments stay in the fp32 masters' dtype.
  std::string nvme = config(R"("immediate_grad_update": false)", "false", true);
  nvme.replace(nvme.find(R"("device": "cpu")"), 15, R"("device": "nvme", "nvme_path": ")" + dir.path().string() + "\"");
  dir.write("nvme.json", nvme);
  CliResult on_nvme = run_zhost(dir.path(), "config check nvme.json" + kPlugins);
  ASSERT_EQ(on_nvme.exit_code, 0) << on_nvme.err;
  EXPECT_NE(on_nvme.out.find("the CPU Adam keeps its moments in the masters' dtype"), std::string::npos) << on_nvme.out;

  dir.write("gpu.json", config(R"("immediate_grad_update": false)", "false", false));
  CliResult gpu = run_zhost(dir.path(), "config check gpu.json" + kPlugins);
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  EXPECT_NE(gpu.out.find("read only by DeepSpeed's CPU Adam"), std::string::npos) << gpu.out;

  dir.write("contradiction.json", config(masters + R"(, "bf16_optimizer_states": false)", "false", true));
  CliResult contradiction = run_zhost(dir.path(), "config check contradiction.json" + kPlugins);
  EXPECT_EQ(contradiction.exit_code, 2);
  EXPECT_NE(contradiction.err.find("which bf16.bf16_optimizer_states = false says they are not"), std::string::npos)
      << contradiction.err;

  dir.write("text.json", config(masters, R"("no")", true));
  CliResult text = run_zhost(dir.path(), "config check text.json" + kPlugins);
  EXPECT_EQ(text.exit_code, 2);
  EXPECT_NE(text.err.find("fp32_optimizer_states = \"no\": a boolean is expected"), std::string::npos) << text.err;
}

// DeepSpeed refuses a config without any batch size; so does zhost (it would train at micro batch 1).
TEST(DeepSpeedJson, AFileWithoutABatchSizeIsRefusedAsDeepSpeedRefusesIt) {
  ScratchDir dir;
  dir.write("nobatch.json", R"({"zero_optimization": {"stage": 2}})");
  CliResult nobatch = run_zhost(dir.path(), "config check nobatch.json" + kPlugins);
  EXPECT_EQ(nobatch.exit_code, 2);
  EXPECT_NE(nobatch.err.find("zhost: error: nobatch.json: the file sets neither train_batch_size nor "
                             "train_micro_batch_size_per_gpu, which DeepSpeed refuses; write one"),
            std::string::npos)
      << nobatch.err;
  EXPECT_EQ(
      run_zhost(dir.path(), "config check nobatch.json --set train_micro_batch_size_per_gpu=4" + kPlugins).exit_code,
      0);
}

// fp16.auto_cast casts floating-point model inputs in DeepSpeed; zhost's models take token ids only, so it is
// noted (Note [fp16.auto_cast]), with fp16 on and off, and the file trains.
TEST(DeepSpeedJson, Fp16AutoCastIsNotedForModelsThatTakeTokenIds) {
  ScratchDir dir;
  dir.write("cast.json", R"({"train_micro_batch_size_per_gpu": 2,
  "fp16": {"enabled": "auto", "auto_cast": true},
  "zhost": {"steps": 2, "model": {"layers": 1, "width": 32, "heads": 2, "seq_len": 8}, "run": {"name": "cast"}}})");
  for (const char* fp16 : {"", " --set fp16.enabled=true"}) {
    CliResult checked = run_zhost(dir.path(), std::string("config check cast.json") + fp16 + kPlugins);
    ASSERT_EQ(checked.exit_code, 0) << fp16 << "\n" << checked.err;
    EXPECT_NE(checked.out.find("# cast.json:2:31: note: fp16.auto_cast = true: DeepSpeed casts the model's "
                               "floating-point inputs to fp16; zhost's models take token ids (int64)"),
              std::string::npos)
        << checked.out;
  }
  CliResult trained = run_zhost(dir.path(), "run cast.json --set run.intra_op_threads=1" + kPlugins, "timeout 120 ");
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  EXPECT_TRUE(fs::exists(dir.path() / "runs" / "cast" / "metrics.jsonl")) << trained.err;
}

// stage3_gather_16bit_weights_on_model_save = "auto" is filled by accelerate (HF Trainer runs on it) from its
// zero3_save_16bit_model, false by default: unfilled, it takes that; --set gives another value.
TEST(DeepSpeedJson, GatherOnSaveAutoTakesAcceleratesDefault) {
  ScratchDir dir;
  dir.write("z3.json", R"({"train_micro_batch_size_per_gpu": 2,
  "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": "auto"}})");
  CliResult unfilled = run_zhost(dir.path(), "config check z3.json" + kPlugins);
  ASSERT_EQ(unfilled.exit_code, 0) << unfilled.err;
  EXPECT_NE(unfilled.out.find("# z3.json:2:37: note: zero_optimization.stage3_gather_16bit_weights_on_model_save = "
                              "\"auto\": zero.stage3_gather_16bit_weights_on_model_save = false, HF Trainer's default "
                              "(accelerate's zero3_save_16bit_model)"),
            std::string::npos)
      << unfilled.out;
  CliResult filled = run_zhost(
      dir.path(), "config check z3.json --set zero.stage3_gather_16bit_weights_on_model_save=true" + kPlugins);
  ASSERT_EQ(filled.exit_code, 0) << filled.err;
  EXPECT_NE(filled.out.find("stage3_gather_16bit_weights_on_model_save = true  # --set"), std::string::npos)
      << filled.out;
}

// Note [Features DeepSpeed removed]: an enabled table of a feature DeepSpeed 0.19.8 removed is refused with
// that said; the same table switched off changes nothing and is noted; a feature DeepSpeed still has keeps
// the plain refusal.
TEST(DeepSpeedJson, FeaturesDeepSpeedRemovedAreRefusedSayingSo) {
  ScratchDir dir;
  dir.write("on.json", R"({"train_micro_batch_size_per_gpu": 2,
  "compression_training": {"weight_quantization": {"shared_parameters": {"enabled": true}}},
  "progressive_layer_drop": {"enabled": true, "theta": 0.5, "gamma": 0.001}})");
  CliResult on = run_zhost(dir.path(), "config check on.json" + kPlugins);
  EXPECT_EQ(on.exit_code, 2);
  for (const char* table : {"compression training", "progressive layer dropping"}) {
    EXPECT_NE(on.err.find(std::string(table) +
                          " is a feature zhost lacks, and DeepSpeed 0.19.8 refuses it too (DeepSpeed removed it: "
                          "deepspeedai/DeepSpeed#8489)"),
              std::string::npos)
        << on.err;
  }
  dir.write("off.json", R"({"train_micro_batch_size_per_gpu": 2,
  "progressive_layer_drop": {"enabled": false, "theta": 0.5}})");
  CliResult off = run_zhost(dir.path(), "config check off.json" + kPlugins);
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_NE(off.out.find("progressive_layer_drop.enabled = false: off"), std::string::npos) << off.out;
  dir.write("kept.json", R"({"train_micro_batch_size_per_gpu": 2,
  "data_efficiency": {"enabled": true, "data_sampling": {"enabled": true, "num_workers": 0}}})");
  CliResult kept = run_zhost(dir.path(), "config check kept.json" + kPlugins);
  EXPECT_EQ(kept.exit_code, 2);
  EXPECT_NE(kept.err.find("data_efficiency.data_sampling.enabled = true: curriculum learning (DeepSpeed's data "
                          "sampling) is a feature zhost lacks; set it to false, or train with DeepSpeed"),
            std::string::npos)
      << kept.err;
}

}  // namespace
