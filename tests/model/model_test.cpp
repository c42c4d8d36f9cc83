// tests/model/model_test.cpp: the built-in models' contract: deterministic initialisation (whole and
// sharded), block chaining, the parameter registry (order, names, owners, tied gpt head), GQA shapes,
// parameter and FLOP counts, spec checks and dtype conversion.
#include "host/model/model.hpp"

#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/randint.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "host/core/error.hpp"

namespace zhost::model {
namespace {

ModelSpec small_spec(const std::string& type) {
  ModelSpec spec;
  spec.type = type;
  spec.layers = 2;
  spec.heads = 4;
  spec.kv_heads = type == "llama" ? 2 : 0;
  spec.width = 32;
  spec.vocab = 61;
  spec.seq_len = 12;
  spec.seed = 1234;
  return spec;
}

at::Tensor random_tokens(const ModelSpec& spec, int64_t batch, int64_t time) {
  return at::randint(spec.vocab, {batch, time}, at::TensorOptions().dtype(at::kLong));
}

class EveryModel : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Types, EveryModel, ::testing::Values("mlp", "gpt", "llama"));

TEST_P(EveryModel, SameSeedGivesBitwiseIdenticalParameters) {
  const auto first = make_model(small_spec(GetParam()));
  const auto second = make_model(small_spec(GetParam()));
  ModelSpec other_seed = small_spec(GetParam());
  other_seed.seed += 1;
  const auto third = make_model(other_seed);
  ASSERT_EQ(first->parameters().size(), second->parameters().size());
  bool any_differs = false;
  for (size_t i = 0; i < first->parameters().size(); ++i) {
    EXPECT_TRUE(at::equal(first->parameters()[i].tensor, second->parameters()[i].tensor))
        << first->parameters()[i].name;
    any_differs |= !at::equal(first->parameters()[i].tensor, third->parameters()[i].tensor);
  }
  EXPECT_TRUE(any_differs) << "a different seed should change the initialisation";
}

TEST_P(EveryModel, InitParameterReproducesEachParameterAlone) {
  const auto model = make_model(small_spec(GetParam()));
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    const at::Tensor& param = model->parameters()[i].tensor;
    at::Tensor fresh = at::empty_like(param);
    model->init_parameter(i, fresh);
    EXPECT_TRUE(at::equal(fresh, param)) << model->parameters()[i].name;
  }
}

TEST_P(EveryModel, InitParameterShardsConcatenateToTheFullParameterPlusZeroPadding) {
  const auto model = make_model(small_spec(GetParam()));
  const int64_t shards = 3;
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    const at::Tensor flat = model->parameters()[i].tensor.detach().reshape({-1});
    const int64_t shard_size = (flat.numel() + shards - 1) / shards + 1;  // +1: always some padding
    std::vector<at::Tensor> pieces;
    for (int64_t s = 0; s < shards; ++s) {
      at::Tensor shard = at::empty({shard_size});
      model->init_parameter_shard(i, s * shard_size, shard);
      pieces.push_back(shard);
    }
    const at::Tensor joined = at::cat(pieces);
    EXPECT_TRUE(at::equal(joined.narrow(0, 0, flat.numel()), flat)) << model->parameters()[i].name;
    EXPECT_EQ(joined.narrow(0, flat.numel(), joined.numel() - flat.numel()).abs().sum().item<float>(), 0.0f);
  }
}

TEST_P(EveryModel, ForwardBlockByBlockEqualsForward) {
  const auto model = make_model(small_spec(GetParam()));
  const at::Tensor tokens = random_tokens(model->spec(), 2, model->spec().seq_len);
  at::Tensor x = tokens;
  for (size_t b = 0; b < model->num_blocks(); ++b) x = model->forward_block(b, x);
  const at::Tensor logits = model->forward(tokens);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, model->spec().seq_len, model->spec().vocab}));
  EXPECT_TRUE(at::equal(x, logits));
  // A pure function of (params, x): running a block again gives the same bits (recomputation is exact).
  const at::Tensor hidden = model->forward_block(0, tokens);
  EXPECT_TRUE(at::equal(model->forward_block(1, hidden), model->forward_block(1, hidden)));
}

TEST_P(EveryModel, ShorterSequencesWork) {
  const auto model = make_model(small_spec(GetParam()));
  const at::Tensor tokens = random_tokens(model->spec(), 2, 5);
  const at::Tensor logits = model->forward(tokens);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 5, model->spec().vocab}));
  // Causality: the first 5 positions of a longer sequence give the same logits.
  const at::Tensor longer = at::cat({tokens, random_tokens(model->spec(), 2, 4)}, 1);
  const at::Tensor prefix = model->forward(longer).narrow(1, 0, 5);
  EXPECT_LT((prefix - logits).abs().max().item<float>(), 1e-5f);
}

TEST_P(EveryModel, RegistryIsConsistent) {
  const auto model = make_model(small_spec(GetParam()));
  const auto& params = model->parameters();
  const auto& used = model->params_used_by_block();
  ASSERT_EQ(used.size(), model->num_blocks());
  int64_t total = 0;
  int previous_block = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_GE(params[i].block, previous_block) << "parameters are ordered by owning block";
    previous_block = params[i].block;
    EXPECT_TRUE(params[i].tensor.requires_grad());
    const auto& users = used[static_cast<size_t>(params[i].block)];
    EXPECT_NE(std::find(users.begin(), users.end(), i), users.end()) << params[i].name << " is used by its owner";
    total += params[i].tensor.numel();
  }
  EXPECT_EQ(model->num_parameters(), total);
  for (const auto& ids : used) EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
}

TEST_P(EveryModel, LossIsNearLogVocabAtInitAndBackwardReachesEveryParameter) {
  const auto model = make_model(small_spec(GetParam()));
  const at::Tensor tokens = random_tokens(model->spec(), 2, model->spec().seq_len);
  const at::Tensor targets = random_tokens(model->spec(), 2, model->spec().seq_len);
  const at::Tensor loss = model->loss(model->forward(tokens), targets);
  EXPECT_NEAR(loss.item<double>(), std::log(static_cast<double>(model->spec().vocab)), 0.3);
  loss.backward();
  for (const ParamEntry& param : model->parameters()) {
    ASSERT_TRUE(param.tensor.grad().defined()) << param.name;
    EXPECT_EQ(param.tensor.grad().sizes(), param.tensor.sizes());
  }
}

TEST_P(EveryModel, ToDoubleConvertsInPlaceAndKeepsHandles) {
  const auto model = make_model(small_spec(GetParam()));
  const at::Tensor handle = model->parameters()[0].tensor;  // taken before the conversion
  const at::Tensor before = handle.detach().clone();
  model->to(at::kDouble);
  EXPECT_EQ(handle.scalar_type(), at::kDouble);
  EXPECT_TRUE(handle.requires_grad());
  EXPECT_TRUE(at::equal(handle.detach().to(at::kFloat), before));
  const at::Tensor logits = model->forward(random_tokens(model->spec(), 1, 4));
  EXPECT_EQ(logits.scalar_type(), at::kDouble);
}

TEST(Gpt, ParameterNamesOrderAndOwnersAreFixed) {
  ModelSpec spec = small_spec("gpt");
  spec.layers = 1;
  const auto model = make_model(spec);
  const std::vector<std::pair<std::string, int>> expected = {
      {"embed.tokens.weight", 0},       {"embed.positions.weight", 0},
      {"blocks.0.attn_norm.weight", 1}, {"blocks.0.attn_norm.bias", 1},
      {"blocks.0.attn.qkv.weight", 1},  {"blocks.0.attn.qkv.bias", 1},
      {"blocks.0.attn.proj.weight", 1}, {"blocks.0.attn.proj.bias", 1},
      {"blocks.0.mlp_norm.weight", 1},  {"blocks.0.mlp_norm.bias", 1},
      {"blocks.0.mlp.fc.weight", 1},    {"blocks.0.mlp.fc.bias", 1},
      {"blocks.0.mlp.proj.weight", 1},  {"blocks.0.mlp.proj.bias", 1},
      {"head.norm.weight", 2},          {"head.norm.bias", 2}};
  ASSERT_EQ(model->parameters().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(model->parameters()[i].name, expected[i].first);
    EXPECT_EQ(model->parameters()[i].block, expected[i].second);
  }
}

TEST(Gpt, HeadIsTiedToTheTokenEmbedding) {
  const auto model = make_model(small_spec("gpt"));
  const size_t head = model->num_blocks() - 1;
  const auto& head_params = model->params_used_by_block()[head];
  EXPECT_EQ(head_params.front(), 0u) << "the head uses parameter 0, embed.tokens.weight";
  for (const ParamEntry& param : model->parameters()) EXPECT_NE(param.name, "head.proj.weight");
  // The head's projection reads the embedding's storage: zero it and every logit is zero.
  const at::Tensor hidden = model->forward_block(0, random_tokens(model->spec(), 1, 4));
  {
    const at::NoGradGuard no_grad;
    model->parameters()[0].tensor.zero_();
  }
  EXPECT_EQ(model->forward_block(head, hidden).abs().max().item<float>(), 0.0f);
}

TEST(Gpt, InitialisationFollowsGpt2) {
  ModelSpec spec = small_spec("gpt");
  spec.width = 256;
  spec.layers = 8;
  const auto model = make_model(spec);
  const double residual_std = spec.init_std / std::sqrt(2.0 * static_cast<double>(spec.layers));
  for (const ParamEntry& param : model->parameters()) {
    const at::Tensor t = param.tensor.detach();
    const std::string& name = param.name;
    if (name.find("norm.weight") != std::string::npos) {
      EXPECT_EQ(t.min().item<float>(), 1.0f) << name;
    } else if (name.find(".bias") != std::string::npos) {
      EXPECT_EQ(t.abs().max().item<float>(), 0.0f) << name;
    } else {
      // sample std and mean within 4 standard errors of the target
      const double target = name.find(".proj.weight") != std::string::npos ? residual_std : spec.init_std;
      const double n = static_cast<double>(t.numel());
      EXPECT_NEAR(t.std().item<double>(), target, 4.0 * target / std::sqrt(2.0 * n)) << name;
      EXPECT_NEAR(t.mean().item<double>(), 0.0, 4.0 * target / std::sqrt(n)) << name;
    }
  }
}

TEST(Gpt, ParameterAndFlopCounts) {
  const ModelSpec spec = resolve_spec(small_spec("gpt"));
  const auto model = make_model(spec);
  const int64_t C = spec.width, L = spec.layers, V = spec.vocab, T = spec.seq_len;
  EXPECT_EQ(model->num_parameters(), V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C);
  const double expected = 6.0 * static_cast<double>(model->num_parameters() - T * C) + 12.0 * L * C * T;
  EXPECT_DOUBLE_EQ(model->flops_per_token(), expected);
}

TEST(Llama, GroupedQueryAttentionShapes) {
  ModelSpec spec = small_spec("llama");
  spec.heads = 8;
  spec.kv_heads = 2;
  const auto model = make_model(spec);
  const int64_t C = spec.width, D = C / spec.heads, F = llama_default_ffn_width(C);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const ParamEntry& param : model->parameters()) shapes[param.name] = param.tensor.sizes().vec();
  EXPECT_EQ(shapes["blocks.0.attn.q.weight"], (std::vector<int64_t>{8 * D, C}));
  EXPECT_EQ(shapes["blocks.0.attn.k.weight"], (std::vector<int64_t>{2 * D, C}));
  EXPECT_EQ(shapes["blocks.0.attn.v.weight"], (std::vector<int64_t>{2 * D, C}));
  EXPECT_EQ(shapes["blocks.0.attn.proj.weight"], (std::vector<int64_t>{C, 8 * D}));
  EXPECT_EQ(shapes["blocks.1.mlp.gate.weight"], (std::vector<int64_t>{F, C}));
  EXPECT_EQ(shapes["head.proj.weight"], (std::vector<int64_t>{spec.vocab, C}));
  for (const ParamEntry& param : model->parameters()) EXPECT_EQ(param.name.find(".bias"), std::string::npos);
  const int64_t per_layer = 2 * C + 8 * D * C * 2 + 2 * D * C * 2 + 3 * F * C;
  EXPECT_EQ(model->num_parameters(), spec.vocab * C * 2 + spec.layers * per_layer + C);
  EXPECT_DOUBLE_EQ(model->flops_per_token(), 6.0 * static_cast<double>(model->num_parameters() - spec.vocab * C) +
                                                 12.0 * spec.layers * C * spec.seq_len);
  EXPECT_EQ(model->forward(random_tokens(model->spec(), 2, 6)).sizes(), (std::vector<int64_t>{2, 6, spec.vocab}));
}

TEST(Llama, DefaultFeedForwardWidth) {
  EXPECT_EQ(llama_default_ffn_width(4096), 10944);  // 2/3 * 4 * 4096 = 10922.7 -> 10944
  EXPECT_EQ(llama_default_ffn_width(64), 192);      // 170.7 -> 192
  EXPECT_EQ(resolve_spec(small_spec("llama")).ffn_width, llama_default_ffn_width(32));
  EXPECT_EQ(resolve_spec(small_spec("gpt")).ffn_width, 4 * 32);
}

// The flops profiler's per-block MACs add up to the step lines' estimate: 6 x their sum = flops_per_token.
TEST(Model, ForwardMacsPerBlockAddUpToFlopsPerToken) {
  for (const char* type : {"gpt", "llama", "mlp"}) {
    const auto model = make_model(small_spec(type));
    double macs = 0;
    for (size_t b = 0; b < model->num_blocks(); ++b) macs += model->forward_macs_per_token(b);
    EXPECT_DOUBLE_EQ(6 * macs, model->flops_per_token()) << type;
    EXPECT_EQ(model->forward_macs_per_token(0), 0) << type;  // lookups only
  }
}

TEST(Mlp, FlopsHaveNoAttentionTerm) {
  const auto model = make_model(small_spec("mlp"));
  const ModelSpec& spec = model->spec();
  EXPECT_DOUBLE_EQ(model->flops_per_token(),
                   6.0 * static_cast<double>(model->num_parameters() - spec.vocab * spec.width));
}

void expect_usage_error(const ModelSpec& spec, const std::string& fragment) {
  try {
    make_model(spec);
    ADD_FAILURE() << "expected a UsageError containing '" << fragment << "'";
  } catch (const UsageError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(ModelSpecCheck, BadSpecsGiveUsageErrors) {
  ModelSpec spec = small_spec("gpt");
  spec.type = "lama";
  expect_usage_error(spec, "did you mean 'llama'");
  spec = small_spec("gpt");
  spec.heads = 5;
  expect_usage_error(spec, "not divisible by model.heads 5");
  spec = small_spec("gpt");
  spec.kv_heads = 2;
  expect_usage_error(spec, "gpt has no grouped-query attention");
  spec = small_spec("llama");
  spec.kv_heads = 3;
  expect_usage_error(spec, "not a multiple of model.kv_heads 3");
  spec = small_spec("llama");
  spec.width = 36;  // head dim 9
  expect_usage_error(spec, "even head dimension");
  spec = small_spec("mlp");
  spec.layers = 0;
  expect_usage_error(spec, "model.layers must be at least 1");
}

TEST(ModelForward, RejectsBadInputs) {
  const auto model = make_model(small_spec("gpt"));
  EXPECT_THROW(model->forward(random_tokens(model->spec(), 1, model->spec().seq_len + 1)), Error);
  EXPECT_THROW(model->forward_block(1, at::empty({1, 4, 7})), Error);
  EXPECT_THROW(model->forward_block(model->num_blocks(), at::empty({1, 4, 32})), Error);
}

}  // namespace
}  // namespace zhost::model
