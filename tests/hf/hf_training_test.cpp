// tests/hf/hf_training_test.cpp: the zhost executable trains Hugging Face models (model.type = "hf") from
// their safetensors at ZeRO stage 3 on 2 ranks to the same final weights as stage 0 (stages 1 and 2 were
// checked the same way by hand: docs/models.md); stage 3 (each rank loading only its shards) starts from
// exactly the file's values; the RUN_DIR/hf export loads back
// bit for bit; `zhost config check` refuses a folder that does not fit with model.path's location.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "host/formats/safetensors.hpp"
#include "tests/support/reference_python.hpp"
#include "tests/support/scratch_dir.hpp"
#include "tests/training/training_test_support.hpp"

using namespace zhost::testing;

namespace {

std::string python() { return reference_python(); }
#define REQUIRE_PYTHON() ZHOST_REQUIRE_REFERENCE_PYTHON()

// The tests' models (hf_models.py make-set), made once: DIR/gpt2, DIR/llama (3 shards), DIR/llama1,
// DIR/mistral.
std::string model_folder(const std::string& name) {
  static const ScratchDir dir;
  static const bool made = [] {
    const std::string command =
        "'" + python() + "' " ZHOST_SOURCE_DIR "/tests/hf/hf_models.py make-set " + dir.path().string();
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    return true;
  }();
  (void)made;
  return (dir.path() / name).string();
}

// Text data (byte ids: the tiny models' vocabularies are above 256), fp32, 2 ranks, no accumulation.
std::string job_config(const std::string& folder) {
  return R"(steps = 4
seed = 7
steps_per_print = 1
gradient_clipping = 0.5
train_micro_batch_size_per_gpu = 2
gradient_accumulation_steps = 1
[model]
type = "hf"
path = ")" +
         folder + R"("
seq_len = 16
[data]
type = "text"
path = "/usr/share/common-licenses"
[optimizer]
type = "AdamW"
lr = 0.003
weight_decay = 0.1
[run]
save_final_weights = true
device = "cpu"
[comm]
timeout_s = 60
)";
}

RunOutput train(const ScratchDir& dir, const std::string& folder, const std::string& name, const std::string& args) {
  RunOutput r = run_zhost(dir.path(), job_config(folder), name, "--nproc 2 " + args);
  EXPECT_EQ(r.exit_code, 0) << name << ":\n" << r.err << r.out;
  return r;
}

// Stage 3 bucket sizes small enough that every layer is gathered and released (persistence threshold 40).
const char* kStage3 =
    " --set zero.stage=3 --set zero.stage3_param_persistence_threshold=40"
    " --set zero.stage3_prefetch_bucket_size=20000 --set zero.stage3_max_reuse_distance=0";

// Stage 3 on 2 ranks without accumulation sums gradients in stage 0's order: the same bits, though each
// rank loaded only its shards of the file.
TEST(HfTraining, Stage3GivesStageZerosWeights) {
  REQUIRE_PYTHON();
  ScratchDir dir;
  for (const std::string kind : {"llama", "gpt2"}) {
    const std::string folder = model_folder(kind);
    const RunOutput base = train(dir, folder, kind + "0", "--set zero.stage=0");
    ASSERT_EQ(base.losses.size(), 4u);
    EXPECT_LT(base.losses.back(), base.losses.front()) << kind << " did not learn";
    const RunOutput three = train(dir, folder, kind + "3", kStage3);
    EXPECT_EQ(weights_mismatch(three, base, 0, 0), "") << kind;
    expect_losses_near(three, base, 0);
  }
}

// Stage 3 with no step: the gathered weights are the file's values (loaded shard by shard); exported as
// RUN_DIR/hf, they load back (as a new model.path) and export again to the same bytes.
TEST(HfTraining, Stage3LoadsTheFileAndItsExportLoadsBack) {
  REQUIRE_PYTHON();
  ScratchDir dir;
  const std::string folder = model_folder("llama");
  const RunOutput loaded = train(dir, folder, "loaded", std::string(kStage3) + " --set steps=0");
  const zhost::formats::SafetensorsSet source = zhost::formats::SafetensorsSet::open(folder);
  ASSERT_EQ(loaded.weights.size(), source.names().size());
  for (const auto& [name, values] : loaded.weights) {
    const auto found = source.find(name);
    ASSERT_NE(found.entry, nullptr) << name;
    ASSERT_EQ(values.size() * 4, found.entry->end - found.entry->begin) << name;
    EXPECT_EQ(std::memcmp(values.data(), found.file->data(*found.entry), values.size() * 4), 0) << name;
  }
  const RunOutput trained = train(dir, folder, "trained", kStage3);
  const std::string exported = (trained.run_dir / "hf").string();
  const RunOutput again = train(dir, exported, "again", std::string(kStage3) + " --set steps=0");
  const zhost::formats::SafetensorsFile first(exported + "/model.safetensors");
  const zhost::formats::SafetensorsFile second((again.run_dir / "hf" / "model.safetensors").string());
  ASSERT_EQ(first.header().tensors.size(), second.header().tensors.size());
  for (const auto& entry : first.header().tensors) {
    const auto* other = second.header().find(entry.name);
    ASSERT_NE(other, nullptr) << entry.name;
    EXPECT_EQ(std::memcmp(first.data(entry), second.data(*other), entry.end - entry.begin), 0) << entry.name;
  }
  EXPECT_EQ(weights_mismatch(again, trained, 0, 0), "");
}

TEST(HfConfigCheck, RefusesAFolderThatDoesNotFitWithItsLocation) {
  REQUIRE_PYTHON();
  ScratchDir dir;
  const std::string folder = (dir.path() / "broken").string();
  dir.write("broken/config.json", read_text_file(model_folder("llama1") + "/config.json"));
  dir.write("broken/model.safetensors", "not a safetensors file");
  dir.write("train.toml", job_config(folder));
  const std::string command =
      "cd " + dir.path().string() + " && " ZHOST_EXE " config check train.toml >out.txt 2>err.txt";
  const int status = std::system(command.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 2);
  const std::string err = read_text_file(dir.path() / "err.txt");
  EXPECT_NE(err.find("train.toml:9: model.path: safetensors file '" + folder + "/model.safetensors' declares a"),
            std::string::npos)
      << err;
}

// Note [Random-LTD]: an HF Llama folder computes rotary positions, so random-LTD is refused; `config check` reads the
// folder and refuses it with the same words as `run`, at random_ltd.layers.
TEST(HfConfigCheck, RandomLtdOnARotaryFolderIsRefusedAsRunRefusesIt) {
  REQUIRE_PYTHON();
  ScratchDir dir;
  dir.write("train.toml", job_config(model_folder("llama1")) + "[random_ltd]\nlayers = [0]\nmin_tokens = 8\n");
  const std::string refusal = "train.toml:24: random_ltd.layers is set, and " + model_folder("llama1") +
                              " computes rotary positions in every layer";
  for (const std::string command : {"config check train.toml", "run train.toml --nproc 1"}) {
    const int status =
        std::system(("cd " + dir.path().string() + " && " ZHOST_EXE " " + command + " >out.txt 2>err.txt").c_str());
    EXPECT_EQ(WEXITSTATUS(status), 2) << command;
    const std::string err = read_text_file(dir.path() / "err.txt");
    EXPECT_NE(err.find(refusal), std::string::npos) << command << ": " << err;
  }
}

}  // namespace

// HF's GPT-2 config defaults to dropout 0.1 (embd, attn, resid); zhost's models apply none, and say so once with
// what was asked. A config.json that writes 0.0 for each trains without the warning.
TEST(HfTraining, DropoutThatZhostDoesNotApplyIsWarnedAbout) {
  REQUIRE_PYTHON();
  ScratchDir dir;
  const std::string warning =
      "/config.json asks for dropout (embd_pdrop 0.1, attn_pdrop 0.1, resid_pdrop 0.1), "
      "which zhost's models do not apply";
  const RunOutput asked = run_zhost(dir.path(), job_config(model_folder("gpt2")), "asked",
                                    "--set steps=1 --set run.save_final_weights=false");
  ASSERT_EQ(asked.exit_code, 0) << asked.err;
  EXPECT_NE(asked.err.find(warning), std::string::npos) << asked.err;
  // The same folder with the three probabilities written as 0.0.
  const std::filesystem::path quiet = dir.path() / "gpt2-no-dropout";
  std::filesystem::copy(model_folder("gpt2"), quiet);
  std::ifstream in(quiet / "config.json");
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t brace = config.find('{');
  ASSERT_NE(brace, std::string::npos) << config;
  config.insert(brace + 1, "\"embd_pdrop\": 0.0, \"attn_pdrop\": 0.0, \"resid_pdrop\": 0.0, ");
  std::ofstream(quiet / "config.json") << config;
  const RunOutput none =
      run_zhost(dir.path(), job_config(quiet.string()), "none", "--set steps=1 --set run.save_final_weights=false");
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ(none.err.find("asks for dropout"), std::string::npos) << none.err;
  // A probability outside [0, 1] is the file's error, with the key.
  std::ofstream(quiet / "config.json") << std::string(config).replace(config.find("0.0"), 3, "1.5");
  const RunOutput bad = run_zhost(dir.path(), job_config(quiet.string()), "bad", "--set steps=1");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("\"embd_pdrop\" is 1.5, but it must be a probability from 0 to 1"), std::string::npos)
      << bad.err;
}
