// tests/model/reference_test.cpp: checks gpt, llama (with grouped-query attention) and mlp against
// independent PyTorch implementations (reference_models.py): the C++ test writes its model's weights and a
// batch, python loads them into its own modules and writes back logits, loss and every parameter's
// gradient, and the two must agree within fp32 tolerance (kRelativeTolerance below).
//
// Python: tests/support/reference_python.hpp (the project's venv, torch 2.11).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/randint.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "host/model/model.hpp"
#include "tests/support/reference_python.hpp"
#include "tests/support/scratch_dir.hpp"

namespace zhost::model {
namespace {

// Each compared tensor (logits, loss, each gradient) must satisfy
//   max |ours - reference| <= kRelativeTolerance * max |reference|
// i.e. agreement to 1e-5 of the tensor's scale: fp32 rounding of differently ordered sums, not a
// different computation (an architecture mismatch gives errors of order 1).
constexpr double kRelativeTolerance = 1e-5;

void write_raw(const std::filesystem::path& file, const at::Tensor& tensor, at::ScalarType dtype) {
  const at::Tensor data = tensor.detach().to(dtype).contiguous();
  std::ofstream(file, std::ios::binary)
      .write(static_cast<const char*>(data.data_ptr()), static_cast<std::streamsize>(data.nbytes()));
}

at::Tensor read_raw_float(const std::filesystem::path& file, at::IntArrayRef shape) {
  at::Tensor data = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  std::ifstream in(file, std::ios::binary);
  in.read(static_cast<char*>(data.data_ptr()), static_cast<std::streamsize>(data.nbytes()));
  EXPECT_TRUE(in.good()) << "cannot read " << file;
  return data;
}

std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void expect_close(const at::Tensor& ours, const at::Tensor& reference, const std::string& what) {
  ASSERT_EQ(ours.sizes(), reference.sizes()) << what;
  const double scale = reference.abs().max().item<double>();
  const double difference = (ours.detach().to(at::kFloat) - reference).abs().max().item<double>();
  EXPECT_LE(difference, kRelativeTolerance * scale)
      << what << ": max |difference| " << difference << " vs max |reference| " << scale;
}

// `model`: a model type, with " eager" after it for model.attention = "eager" (Note [Attention kernels]).
ModelSpec reference_spec(const std::string& model) {
  ModelSpec spec;
  const size_t space = model.find(' ');
  spec.type = model.substr(0, space);
  if (space != std::string::npos && model.substr(space + 1) == "eager") spec.attention = Attention::kEager;
  spec.layers = 2;
  spec.heads = 4;
  spec.kv_heads = spec.type == "llama" ? 2 : 0;
  spec.width = 64;
  spec.vocab = 97;
  spec.seq_len = 16;
  spec.init_std = 0.1;  // larger than GPT-2's 0.02 so that every layer shapes the result
  spec.seed = 7;
  return spec;
}

class ReferenceCheck : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Types, ReferenceCheck, ::testing::Values("gpt", "llama", "mlp", "gpt eager", "llama eager"));

TEST_P(ReferenceCheck, LossLogitsAndGradientsMatchPyTorch) {
  ZHOST_REQUIRE_REFERENCE_PYTHON();
  const std::string python = zhost::testing::reference_python();

  const auto model = make_model(reference_spec(GetParam()));
  const ModelSpec& spec = model->spec();
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(99);
  const auto long_options = at::TensorOptions().dtype(at::kLong);
  const int64_t batch = 3, time = spec.seq_len;
  const at::Tensor tokens = at::randint(spec.vocab, {batch, time}, generator, long_options);   // [B, T]
  const at::Tensor targets = at::randint(spec.vocab, {batch, time}, generator, long_options);  // [B, T]

  const zhost::testing::ScratchDir folder;
  nlohmann::json manifest;
  manifest["spec"] = {{"type", spec.type},         {"layers", spec.layers},  {"heads", spec.heads},
                      {"kv_heads", spec.kv_heads}, {"width", spec.width},    {"ffn_width", spec.ffn_width},
                      {"vocab", spec.vocab},       {"seq_len", spec.seq_len}};
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    const ParamEntry& param = model->parameters()[i];
    const std::string file = "param" + std::to_string(i) + ".bin";
    write_raw(folder.path() / file, param.tensor, at::kFloat);
    manifest["params"].push_back({{"name", param.name}, {"shape", param.tensor.sizes().vec()}, {"file", file}});
  }
  write_raw(folder.path() / "tokens.bin", tokens, at::kLong);
  write_raw(folder.path() / "targets.bin", targets, at::kLong);
  manifest["tokens"] = {{"file", "tokens.bin"}, {"shape", {batch, time}}};
  manifest["targets"] = {{"file", "targets.bin"}, {"shape", {batch, time}}};
  std::ofstream(folder.path() / "manifest.json") << manifest.dump(1);

  const std::string script = std::string(ZHOST_SOURCE_DIR) + "/tests/model/reference_models.py";
  const std::filesystem::path log = folder.path() / "python.log";
  const std::string command =
      "'" + python + "' '" + script + "' '" + folder.path().string() + "' >'" + log.string() + "' 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command << "\n" << read_text(log);

  const at::Tensor logits = model->forward(tokens);
  const at::Tensor loss = model->loss(logits, targets);
  loss.backward();

  expect_close(logits, read_raw_float(folder.path() / "logits.bin", logits.sizes()), "logits");
  expect_close(loss.reshape({1}), read_raw_float(folder.path() / "loss.bin", {1}), "loss");
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    const ParamEntry& param = model->parameters()[i];
    const auto grad_file = folder.path() / "grads" / (std::to_string(i) + ".bin");
    expect_close(param.tensor.grad(), read_raw_float(grad_file, param.tensor.sizes()), "gradient of " + param.name);
  }
}

}  // namespace
}  // namespace zhost::model
