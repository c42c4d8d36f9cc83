// tests/model/cuda_test.cpp: the built-in models on a CUDA device (skipped, saying so, without one):
// initialisation gives the same bits as on the CPU, fp32 loss and gradients agree with the CPU's, and
// bf16 runs with a loss close to fp32's; the two attention kernels agree there (Note [Attention kernels]).
#include <ATen/Context.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/randint.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "host/model/model.hpp"

namespace zhost::model {
namespace {

ModelSpec cuda_spec(const std::string& type) {
  ModelSpec spec;
  spec.type = type;
  spec.layers = 2;
  spec.heads = 4;
  spec.kv_heads = type == "llama" ? 2 : 0;
  spec.width = 64;
  spec.vocab = 97;
  spec.seq_len = 32;
  spec.seed = 5;
  return spec;
}

// max |a - b| / max |b|
double relative_difference(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor reference = b.detach().to(at::kCPU, at::kFloat);
  return (a.detach().to(at::kCPU, at::kFloat) - reference).abs().max().item<double>() /
         reference.abs().max().item<double>();
}

class OnCuda : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Types, OnCuda, ::testing::Values("mlp", "gpt", "llama"));

TEST_P(OnCuda, MatchesTheCpuInFp32AndRunsInBf16) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device (or LibTorch without CUDA)";
  at::globalContext().setAllowTF32CuBLAS(false);  // compare fp32 with fp32
  const auto cpu = make_model(cuda_spec(GetParam()));
  const auto cuda = make_model(cuda_spec(GetParam()), at::Device(at::kCUDA, 0));
  for (size_t i = 0; i < cpu->parameters().size(); ++i) {
    EXPECT_TRUE(at::equal(cuda->parameters()[i].tensor.cpu(), cpu->parameters()[i].tensor))
        << "initialisation differs on CUDA: " << cpu->parameters()[i].name;
  }
  const auto long_options = at::TensorOptions().dtype(at::kLong);
  const at::Tensor tokens = at::randint(97, {4, 32}, long_options), targets = at::randint(97, {4, 32}, long_options);
  const at::Tensor cpu_loss = cpu->loss(cpu->forward(tokens), targets);
  const at::Tensor cuda_loss = cuda->loss(cuda->forward(tokens.cuda()), targets.cuda());
  cpu_loss.backward();
  cuda_loss.backward();
  EXPECT_LT(relative_difference(cuda_loss, cpu_loss), 1e-5);
  for (size_t i = 0; i < cpu->parameters().size(); ++i) {
    EXPECT_LT(relative_difference(cuda->parameters()[i].tensor.grad(), cpu->parameters()[i].tensor.grad()), 1e-4)
        << cpu->parameters()[i].name;
  }

  cuda->to(at::kBFloat16);
  const at::Tensor logits = cuda->forward(tokens.cuda());
  EXPECT_EQ(logits.scalar_type(), at::kBFloat16);
  const at::Tensor bf16_loss = cuda->loss(logits, targets.cuda());
  bf16_loss.backward();
  EXPECT_NEAR(bf16_loss.item<double>(), cpu_loss.item<double>(), 2e-2);
  EXPECT_EQ(cuda->parameters()[0].tensor.grad().scalar_type(), at::kBFloat16);
}

// model.attention "sdpa" (flash or memory-efficient kernels on CUDA) against "eager" on the same weights and
// tokens: fp32 within 1e-5 (loss) and 1e-4 (gradients, relative to their largest entry), bf16 loss within 2e-2.
class AttentionKernelsOnCuda : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Types, AttentionKernelsOnCuda, ::testing::Values("gpt", "llama"));

TEST_P(AttentionKernelsOnCuda, SdpaMatchesEager) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device (or LibTorch without CUDA)";
  at::globalContext().setAllowTF32CuBLAS(false);
  ModelSpec eager_spec = cuda_spec(GetParam()), sdpa_spec = cuda_spec(GetParam());
  eager_spec.attention = Attention::kEager;
  sdpa_spec.attention = Attention::kSdpa;
  const auto long_options = at::TensorOptions().dtype(at::kLong).device(at::kCUDA);
  const at::Tensor tokens = at::randint(97, {4, 32}, long_options), targets = at::randint(97, {4, 32}, long_options);
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const auto eager = make_model(eager_spec, at::Device(at::kCUDA, 0));
    const auto sdpa = make_model(sdpa_spec, at::Device(at::kCUDA, 0));
    eager->to(dtype);
    sdpa->to(dtype);
    const at::Tensor eager_loss = eager->loss(eager->forward(tokens), targets);
    const at::Tensor sdpa_loss = sdpa->loss(sdpa->forward(tokens), targets);
    eager_loss.backward();
    sdpa_loss.backward();
    const bool fp32 = dtype == at::kFloat;
    EXPECT_LT(relative_difference(sdpa_loss, eager_loss), fp32 ? 1e-5 : 2e-2) << at::toString(dtype);
    if (!fp32) continue;
    for (size_t i = 0; i < eager->parameters().size(); ++i) {
      EXPECT_LT(relative_difference(sdpa->parameters()[i].tensor.grad(), eager->parameters()[i].tensor.grad()), 1e-4)
          << eager->parameters()[i].name;
    }
  }
}

}  // namespace
}  // namespace zhost::model
