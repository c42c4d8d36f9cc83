// tests/hf/hf_model_test.cpp: model.type = "hf" at the model level. Tiny GPT-2, Llama (grouped-query,
// untied, sharded) and Mistral (grouped-query, tied, head_dim != hidden/heads, rope_theta in
// rope_parameters, BF16 weights) made by hf_models.py with HF's names and layouts; zhost's logits equal
// hf_models.py's independent PyTorch implementation; stage 3's range loading equals whole loading; export
// then load is bitwise; config.json / weights that do not fit are refused with one clear line.
//
// Python: tests/support/reference_python.hpp (the project's venv, torch 2.11).
#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "host/core/error.hpp"
#include "host/formats/safetensors.hpp"
#include "host/model/model.hpp"
#include "tests/support/reference_python.hpp"
#include "tests/support/scratch_dir.hpp"

namespace zhost::model {
namespace {

using zhost::testing::ScratchDir;

// Logits agree when max |zhost - reference| <= kRelativeTolerance * max |reference|: fp32 rounding of
// differently ordered sums (an architecture or layout mismatch gives errors of order 1).
constexpr double kRelativeTolerance = 1e-5;

std::string python() { return zhost::testing::reference_python(); }
#define REQUIRE_PYTHON() ZHOST_REQUIRE_REFERENCE_PYTHON()

void run_script(const std::string& args) {
  const std::string command = "'" + python() + "' " ZHOST_SOURCE_DIR "/tests/hf/hf_models.py " + args;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
}

// The tests' models (hf_models.py make-set), made once for the whole binary: DIR/gpt2, DIR/llama (3
// shards), DIR/llama1 (one file), DIR/mistral (BF16).
std::string model_set() {
  static const ScratchDir dir;
  static const bool made = [] {
    run_script("make-set " + dir.path().string());
    return true;
  }();
  (void)made;
  return dir.path().string();
}
std::string model_folder(const std::string& name) { return model_set() + "/" + name; }

std::unique_ptr<Model> load(const std::string& folder, int64_t seq_len = 12, bool materialize = true) {
  ModelSpec spec;
  spec.type = "hf";
  spec.path = folder;
  spec.seq_len = seq_len;
  return make_model(spec, Placement{at::kCPU, at::kFloat, materialize});
}

nlohmann::json read_json(const std::string& file) {
  return nlohmann::json::parse(zhost::testing::read_text_file(file));
}
void write_json(const std::string& file, const nlohmann::json& value) { std::ofstream(file) << value.dump(2); }

// gpt2; llama with grouped-query attention, 3 shards and an untied head; mistral with grouped-query
// attention, a tied head, head_dim != hidden/heads, rope_theta in rope_parameters and BF16 weights.
TEST(HfLogits, EqualAnIndependentPyTorchImplementation) {
  REQUIRE_PYTHON();
  ScratchDir dir;
  std::string args;
  std::vector<at::Tensor> ours;
  const std::vector<std::string> kinds = {"gpt2", "llama", "mistral"};
  for (const std::string& kind : kinds) {
    const auto model = load(model_folder(kind));
    const at::Tensor tokens = at::randint(model->spec().vocab, {2, 12}, at::TensorOptions().dtype(at::kLong));
    ours.push_back(model->forward(tokens).detach());
    const std::string tokens_file = (dir.path() / (kind + ".tokens")).string();
    std::ofstream(tokens_file, std::ios::binary).write(static_cast<const char*>(tokens.data_ptr()), tokens.nbytes());
    std::ofstream(tokens_file + ".json") << "[2, 12]";
    args += " " + model_folder(kind) + " " + tokens_file + " " + (dir.path() / (kind + ".logits")).string();
  }
  run_script("logits" + args);
  for (size_t i = 0; i < kinds.size(); ++i) {
    at::Tensor reference = at::empty(ours[i].sizes(), at::TensorOptions().dtype(at::kFloat));
    std::ifstream(dir.path() / (kinds[i] + ".logits"), std::ios::binary)
        .read(static_cast<char*>(reference.data_ptr()), reference.nbytes());
    const double scale = reference.abs().max().item<double>();
    const double difference = (ours[i] - reference).abs().max().item<double>();
    EXPECT_GT(scale, 0.1) << kinds[i];
    EXPECT_LE(difference, kRelativeTolerance * scale)
        << kinds[i] << ": max |difference| " << difference << ", max |logit| " << scale;
  }
}

// Stage 3 fills each rank's shards through init_parameter_shard: any range, read from the map, equals the
// same range of the whole parameter, and elements past the end (padding) are zero.
TEST(HfLoading, RangesEqualTheWholeParameter) {
  REQUIRE_PYTHON();
  const std::string folder = model_folder("mistral");
  const auto whole = load(folder);
  const auto empty = load(folder, 12, /*materialize=*/false);
  ASSERT_EQ(whole->parameters().size(), empty->parameters().size());
  for (size_t id = 0; id < whole->parameters().size(); ++id) {
    const at::Tensor expected = whole->parameters()[id].tensor.detach().reshape({-1});
    const int64_t numel = expected.numel(), chunk = 37;
    for (int64_t offset = 0; offset < numel; offset += chunk) {
      at::Tensor shard = at::empty({chunk}, at::TensorOptions().dtype(at::kFloat)).fill_(99.0);
      empty->init_parameter_shard(id, offset, shard);
      const int64_t valid = std::min(chunk, numel - offset);
      ASSERT_TRUE(at::equal(shard.narrow(0, 0, valid), expected.narrow(0, offset, valid))) << id << " @" << offset;
      if (valid < chunk) EXPECT_TRUE(at::equal(shard.narrow(0, valid, chunk - valid), at::zeros({chunk - valid})));
    }
  }
}

// Export writes HF's names and layout; loading the export gives the same bits, and an F32 source's tensor
// bytes come back unchanged (a BF16 source's are widened to F32).
TEST(HfExport, ExportThenLoadIsBitwise) {
  REQUIRE_PYTHON();
  ScratchDir dir;
  for (const std::string kind : {"gpt2", "llama", "mistral"}) {
    const std::string folder = model_folder(kind);
    const auto model = load(folder);
    std::vector<std::string> names;
    std::vector<at::Tensor> values;
    for (const ParamEntry& p : model->parameters()) {
      names.push_back(p.name);
      values.push_back(p.tensor.detach());
    }
    const std::string out = (dir.path() / kind).string();
    export_hf(model->spec(), names, values, out);
    EXPECT_EQ(read_json(out + "/config.json").at("model_type"), read_json(folder + "/config.json").at("model_type"));
    const auto source = formats::SafetensorsSet::open(folder);
    const formats::SafetensorsFile exported(out + "/model.safetensors");
    EXPECT_EQ(source.names().size(), exported.header().tensors.size()) << kind;
    for (const std::string& name : source.names()) {
      const auto found = source.find(name);
      const formats::TensorEntry* back = exported.header().find(name);
      ASSERT_NE(back, nullptr) << kind << " " << name;
      EXPECT_EQ(back->shape, found.entry->shape);
      if (found.entry->dtype == "F32")
        EXPECT_EQ(std::memcmp(found.file->data(*found.entry), exported.data(*back), back->end - back->begin), 0)
            << name;
    }
    const auto reloaded = load(out);
    for (size_t id = 0; id < names.size(); ++id)
      EXPECT_TRUE(at::equal(reloaded->parameters()[id].tensor, values[id])) << kind << " " << names[id];
  }
}

// Each edit of a valid model folder is refused by make_model (and so by `zhost config check`) with one
// line holding `phrase`.
TEST(HfConfigCheck, RefusesWhatDoesNotFit) {
  REQUIRE_PYTHON();
  ScratchDir dir;
  const std::string good = model_folder("llama1");
  const nlohmann::json config = read_json(good + "/config.json");
  const auto expect_refused = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit,
                                  const std::string& phrase, int64_t seq_len = 12) {
    const std::string folder = (dir.path() / name).string();
    std::filesystem::create_directories(folder);
    std::filesystem::copy_file(good + "/model.safetensors", folder + "/model.safetensors",
                               std::filesystem::copy_options::overwrite_existing);
    nlohmann::json edited = config;
    edit(edited);
    write_json(folder + "/config.json", edited);
    try {
      load(folder, seq_len, false);
      ADD_FAILURE() << name << ": accepted; expected " << phrase;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << name << ": " << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  };
  expect_refused(
      "type", [](auto& c) { c["model_type"] = "bert"; }, "model_type \"bert\" is not supported");
  expect_refused(
      "missing", [](auto& c) { c.erase("hidden_size"); }, "\"hidden_size\" is missing");
  expect_refused(
      "negative", [](auto& c) { c["num_hidden_layers"] = -1; }, "must be a positive integer");
  expect_refused(
      "scaling",
      [](auto& c) {
        c["rope_scaling"] = {{"type", "linear"}, {"factor", 2}};
      },
      "rope_scaling");
  expect_refused(
      "ropetype",
      [](auto& c) {
        c["rope_parameters"] = {{"rope_type", "yarn"}};
      },
      "rope_type is \"yarn\"");
  expect_refused(
      "gqa", [](auto& c) { c["num_key_value_heads"] = 3; }, "not a multiple of num_key_value_heads 3");
  expect_refused(
      "act", [](auto& c) { c["hidden_act"] = "gelu"; }, "\"hidden_act\" is \"gelu\"");
  expect_refused(
      "bias", [](auto& c) { c["attention_bias"] = true; }, "attention_bias");
  expect_refused(
      "ffn", [](auto& c) { c["intermediate_size"] = 100; }, "has shape [96, 64], but config.json implies [100, 64]");
  expect_refused(
      "layers", [](auto& c) { c["num_hidden_layers"] = 3; }, "has no tensor \"model.layers.2.input_layernorm.weight\"");
  expect_refused(
      "tied", [](auto& c) { c["tie_word_embeddings"] = true; }, "holds tensor \"lm_head.weight\"");
  expect_refused(
      "positions", [](auto&) {}, "model.seq_len 65 is above the 64 positions", 65);
  expect_refused(
      "window", [](auto& c) { c["sliding_window"] = 8; }, "sliding_window 8, and zhost", 12);
  dir.write("notjson/config.json", "{\"model_type\": ");
  EXPECT_THROW(load((dir.path() / "notjson").string()), UsageError);
  dir.write("noweights/config.json", config.dump());
  try {
    load((dir.path() / "noweights").string());
    ADD_FAILURE() << "a folder without weights was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("neither model.safetensors nor"), std::string::npos) << e.what();
  }
  try {
    load((dir.path() / "nowhere").string());
    ADD_FAILURE() << "a missing folder was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a folder"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zhost::model
