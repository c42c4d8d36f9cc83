// host/model/gpt.cpp: the GPT-2 architecture (token + learned position embeddings, pre-LayerNorm blocks
// with fused-qkv causal self-attention and a GELU(tanh) MLP, final LayerNorm, head tied to the token
// embedding), initialised as GPT-2 / nanoGPT.
#include <ATen/TensorOperators.h>
#include <ATen/ops/embedding.h>
#include <ATen/ops/linear.h>

#include <cmath>
#include <string>
#include <vector>

#include "host/model/architectures.hpp"
#include "host/model/layers.hpp"

namespace zhost::model {
namespace {

constexpr double kLayerNormEps = 1e-5;

class Gpt final : public Model {
 public:
  Gpt(const ModelSpec& spec, const Placement& placement) : Model(spec, placement) {
    const int64_t C = spec.width, F = spec.ffn_width;
    // nanoGPT: normal(0, std) everywhere, residual projections std / sqrt(2 * layers), biases 0, LN (1, 0).
    const ParamInit normal{Init::kNormal, spec.init_std, false};
    const ParamInit residual{Init::kNormal, spec.init_std / std::sqrt(2.0 * static_cast<double>(spec.layers)), false};
    const ParamInit zeros{Init::kZeros, 0, false}, ones{Init::kOnes, 0, false};

    // The token embedding also serves as the head's projection: a matmul weight, not lookup-only.
    token_embedding_ = add_parameter("embed.tokens.weight", 0, {spec.vocab, C}, normal);  // [V, C]
    position_embedding_ = add_parameter("embed.positions.weight", 0, {spec.seq_len, C},
                                        {Init::kNormal, spec.init_std, /*lookup_only=*/true});  // [T, C]
    for (int64_t i = 0; i < spec.layers; ++i) {
      const int block = static_cast<int>(i) + 1;
      const std::string prefix = "blocks." + std::to_string(i) + ".";
      Layer layer;
      layer.attn_norm_weight = add_parameter(prefix + "attn_norm.weight", block, {C}, ones);
      layer.attn_norm_bias = add_parameter(prefix + "attn_norm.bias", block, {C}, zeros);
      layer.qkv_weight = add_parameter(prefix + "attn.qkv.weight", block, {3 * C, C}, normal);  // [3C, C]
      layer.qkv_bias = add_parameter(prefix + "attn.qkv.bias", block, {3 * C}, zeros);
      layer.attn_proj_weight = add_parameter(prefix + "attn.proj.weight", block, {C, C}, residual);
      layer.attn_proj_bias = add_parameter(prefix + "attn.proj.bias", block, {C}, zeros);
      layer.mlp_norm_weight = add_parameter(prefix + "mlp_norm.weight", block, {C}, ones);
      layer.mlp_norm_bias = add_parameter(prefix + "mlp_norm.bias", block, {C}, zeros);
      layer.fc_weight = add_parameter(prefix + "mlp.fc.weight", block, {F, C}, normal);  // [F, C]
      layer.fc_bias = add_parameter(prefix + "mlp.fc.bias", block, {F}, zeros);
      layer.mlp_proj_weight = add_parameter(prefix + "mlp.proj.weight", block, {C, F}, residual);  // [C, F]
      layer.mlp_proj_bias = add_parameter(prefix + "mlp.proj.bias", block, {C}, zeros);
      layers_.push_back(layer);
    }
    const int head = static_cast<int>(spec.layers) + 1;
    final_norm_weight_ = add_parameter("head.norm.weight", head, {C}, ones);
    final_norm_bias_ = add_parameter("head.norm.bias", head, {C}, zeros);
    add_use(static_cast<size_t>(head), 0);  // the tied projection: parameter 0, embed.tokens.weight
  }

 protected:
  bool has_attention() const override { return true; }
  bool positions_from_embedding() const override { return true; }

  at::Tensor run_block(size_t block, const at::Tensor& x) const override {
    if (block == 0) {
      // x: tokens [B, T] -> [B, T, C]
      return at::embedding(token_embedding_, x) + position_embedding_.narrow(0, 0, x.size(1));
    }
    if (block == layers_.size() + 1) {
      // x: [B, T, C] -> logits [B, T, V]
      return at::linear(layers::layer_norm(x, final_norm_weight_, final_norm_bias_, kLayerNormEps), token_embedding_);
    }
    const Layer& layer = layers_[block - 1];
    const int64_t C = spec().width, heads = spec().heads;
    // attention: x [B, T, C] -> qkv [B, T, 3C] -> q, k, v [B, H, T, D] -> y [B, T, C]
    const at::Tensor h = layers::layer_norm(x, layer.attn_norm_weight, layer.attn_norm_bias, kLayerNormEps);
    const std::vector<at::Tensor> qkv = at::linear(h, layer.qkv_weight, layer.qkv_bias).split(C, -1);
    const at::Tensor y = layers::merge_heads(
        layers::causal_attention(layers::split_heads(qkv[0], heads), layers::split_heads(qkv[1], heads),
                                 layers::split_heads(qkv[2], heads), spec().attention));
    const at::Tensor after_attention = x + at::linear(y, layer.attn_proj_weight, layer.attn_proj_bias);
    // MLP: [B, T, C] -> [B, T, F] -> [B, T, C]
    return after_attention + layers::feed_forward(layers::layer_norm(after_attention, layer.mlp_norm_weight,
                                                                     layer.mlp_norm_bias, kLayerNormEps),
                                                  layer.fc_weight, layer.fc_bias, layers::Activation::kGeluTanh,
                                                  layer.mlp_proj_weight, layer.mlp_proj_bias);
  }

 private:
  struct Layer {
    at::Tensor attn_norm_weight, attn_norm_bias, qkv_weight, qkv_bias, attn_proj_weight, attn_proj_bias;
    at::Tensor mlp_norm_weight, mlp_norm_bias, fc_weight, fc_bias, mlp_proj_weight, mlp_proj_bias;
  };
  at::Tensor token_embedding_, position_embedding_;
  std::vector<Layer> layers_;
  at::Tensor final_norm_weight_, final_norm_bias_;
};

}  // namespace

std::unique_ptr<Model> make_gpt(const ModelSpec& spec, const Placement& placement) {
  return std::make_unique<Gpt>(spec, placement);
}

}  // namespace zhost::model
