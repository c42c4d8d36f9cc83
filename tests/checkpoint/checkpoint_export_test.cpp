// tests/checkpoint/checkpoint_export_test.cpp: `zhost export` (docs/checkpoints.md, "Export").
//   - zhost's names: the exported safetensors, sharded, read back by zhost's own reader and by an independent
//     reader written here in Python (json + numpy on the documented format), equal the trained fp32 weights
//     bit for bit;
//   - Hugging Face names: a gpt exported as GPT2LMHeadModel and a llama as LlamaForCausalLM load into zhost's
//     Hugging Face model (model.type = "hf") and give the loss the built-in model gives at the same weights;
//   - a damaged checkpoint is refused before anything is written.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "host/formats/safetensors.hpp"
#include "tests/support/reference_python.hpp"
#include "tests/support/scratch_dir.hpp"
#include "tests/training/training_test_support.hpp"

using namespace zhost::testing;
namespace fs = std::filesystem;

namespace {

struct Command {
  int exit_code;
  std::string output;
};

Command run_command(const std::string& command) {
  ScratchDir out;
  const std::string file = (out.path() / "out.txt").string();
  const int status = std::system((command + " >" + file + " 2>&1").c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text_file(file)};
}

Command zhost_export(const std::string& args) { return run_command(std::string(ZHOST_EXE) + " export " + args); }

// Trains the small gpt 3 steps, saving a checkpoint at the end and the final weights.
RunOutput trained_gpt(const ScratchDir& dir) {
  return run_zhost(dir.path(), small_job_config(), "trained",
                   "--nproc 2 --set zero.stage=3 --set steps=3 --set checkpoint.at_end=true --set checkpoint.dir=ckpt");
}

TEST(Export, ShardedZhostNamesReadBackByZhostAndByAnIndependentReaderEqualTheTrainedWeights) {
  ScratchDir dir;
  RunOutput trained = trained_gpt(dir);
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const fs::path out = dir.path() / "exported";
  const Command exported =
      zhost_export((dir.path() / "ckpt").string() + " " + out.string() + " --names zhost --max-shard-size 40KB");
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  ASSERT_TRUE(fs::exists(out / "model.safetensors.index.json")) << exported.output;  // sharded

  // zhost's reader (host/formats, which validates every header and the index).
  const zhost::formats::SafetensorsSet set = zhost::formats::SafetensorsSet::open(out.string());
  ASSERT_EQ(set.names().size(), trained.weights.size());
  for (const auto& [name, values] : trained.weights) {
    const auto found = set.find(name);
    ASSERT_NE(found.entry, nullptr) << name;
    ASSERT_EQ(found.entry->dtype, "F32");
    ASSERT_EQ(found.entry->end - found.entry->begin, values.size() * sizeof(float)) << name;
    EXPECT_EQ(std::memcmp(found.file->data(*found.entry), values.data(), values.size() * sizeof(float)), 0) << name;
  }

  // An independent reader: the safetensors layout and the index as documented, against weights.bin.
  const std::string script = R"(
import json, struct, sys, os
import numpy as np
out, run = sys.argv[1], sys.argv[2]
index = json.load(open(os.path.join(out, "model.safetensors.index.json")))
tensors = {}
for file in sorted(set(index["weight_map"].values())):
    raw = open(os.path.join(out, file), "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        assert entry["dtype"] == "F32" and index["weight_map"][name] == file, name
        tensors[name] = np.frombuffer(raw[8 + n + begin:8 + n + end], dtype="<f4").reshape(entry["shape"])
weights = np.fromfile(os.path.join(run, "weights.bin"), dtype="<f4")
saved = json.load(open(os.path.join(run, "weights.json")))
assert len(saved) == len(tensors), (len(saved), len(tensors))
for entry in saved:
    expected = weights[entry["offset"]:entry["offset"] + entry["numel"]].reshape(entry["shape"])
    assert np.array_equal(tensors[entry["name"]], expected), entry["name"]
print("equal", len(tensors))
)";
  const std::string path = dir.write("independent_reader.py", script);
  const Command python =
      run_command("'" + reference_python() + "' " + path + " " + out.string() + " " + trained.run_dir.string());
  EXPECT_EQ(python.exit_code, 0) << python.output;
  EXPECT_NE(python.output.find("equal " + std::to_string(trained.weights.size())), std::string::npos) << python.output;
}

// A model trained with learning rate 0 keeps its initial weights: its first loss is the loss of the exported
// weights on the first step's batch, which the Hugging Face model must give too.
void expect_hf_export_gives_the_builtin_loss(const std::string& model_sets) {
  ScratchDir dir;
  const std::string frozen = model_sets + " --set steps=1 --set optimizer.lr=0 --set scheduler.warmup_max_lr=0";
  RunOutput builtin = run_zhost(dir.path(), small_job_config(), "builtin",
                                frozen + " --set checkpoint.at_end=true --set checkpoint.dir=ckpt");
  ASSERT_EQ(builtin.exit_code, 0) << builtin.err;
  const fs::path out = dir.path() / "hf";
  const Command exported = zhost_export((dir.path() / "ckpt").string() + " " + out.string());
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  ASSERT_TRUE(fs::exists(out / "config.json"));
  // small_job_config() with its [model] table naming the exported folder instead of the built-in dimensions.
  std::string config = small_job_config();
  const size_t model = config.find("[model]"), data = config.find("[data]");
  config.replace(model, data - model, "[model]\ntype = \"hf\"\npath = \"" + out.string() + "\"\nseq_len = 16\n");
  RunOutput hf =
      run_zhost(dir.path(), config, "hf", "--set steps=1 --set optimizer.lr=0 --set scheduler.warmup_max_lr=0");
  ASSERT_EQ(hf.exit_code, 0) << hf.err;
  ASSERT_EQ(builtin.losses.size(), 1u);
  ASSERT_EQ(hf.losses.size(), 1u);
  EXPECT_NEAR(hf.losses[0], builtin.losses[0], 1e-5 * builtin.losses[0]);
}

TEST(Export, GptAsGpt2LoadsIntoZhostsHuggingFaceModelWithTheSameLoss) {
  expect_hf_export_gives_the_builtin_loss("--set model.type=gpt");
}

TEST(Export, LlamaAsLlamaForCausalLmLoadsIntoZhostsHuggingFaceModelWithTheSameLoss) {
  expect_hf_export_gives_the_builtin_loss("--set model.type=llama --set model.kv_heads=1");
}

TEST(Export, ADamagedCheckpointIsRefusedAndNothingIsWritten) {
  ScratchDir dir;
  RunOutput trained = trained_gpt(dir);
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  fs::remove(dir.path() / "ckpt" / "step-00000003" / "rank-00001.bin");
  const fs::path out = dir.path() / "exported";
  const Command exported = zhost_export((dir.path() / "ckpt").string() + " " + out.string());
  EXPECT_EQ(exported.exit_code, 2) << exported.output;
  EXPECT_NE(exported.output.find("rank-00001.bin' is missing"), std::string::npos) << exported.output;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
