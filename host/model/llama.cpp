// host/model/llama.cpp: the Llama architecture (RMSNorm, rotary embeddings in HF's rotate_half layout,
// grouped-query attention, SwiGLU MLP, final RMSNorm, untied head; no biases), initialised as HF Llama:
// normal(0, init_std) for every matrix, norm weights 1.
#include <ATen/TensorOperators.h>
#include <ATen/ops/embedding.h>
#include <ATen/ops/linear.h>

#include <string>
#include <vector>

#include "host/model/architectures.hpp"
#include "host/model/layers.hpp"

namespace zhost::model {
namespace {

constexpr double kRmsNormEps = 1e-5;
constexpr double kRopeTheta = 10000.0;

class Llama final : public Model {
 public:
  Llama(const ModelSpec& spec, const Placement& placement) : Model(spec, placement) {
    const int64_t C = spec.width, F = spec.ffn_width, D = spec.width / spec.heads;
    const int64_t q_width = spec.heads * D, kv_width = spec.kv_heads * D;
    const ParamInit normal{Init::kNormal, spec.init_std, false}, ones{Init::kOnes, 0, false};

    token_embedding_ = add_parameter("embed.tokens.weight", 0, {spec.vocab, C},
                                     {Init::kNormal, spec.init_std, /*lookup_only=*/true});  // [V, C]
    for (int64_t i = 0; i < spec.layers; ++i) {
      const int block = static_cast<int>(i) + 1;
      const std::string prefix = "blocks." + std::to_string(i) + ".";
      Layer layer;
      layer.attn_norm_weight = add_parameter(prefix + "attn_norm.weight", block, {C}, ones);
      layer.q_weight = add_parameter(prefix + "attn.q.weight", block, {q_width, C}, normal);   // [H*D, C]
      layer.k_weight = add_parameter(prefix + "attn.k.weight", block, {kv_width, C}, normal);  // [KV*D, C]
      layer.v_weight = add_parameter(prefix + "attn.v.weight", block, {kv_width, C}, normal);  // [KV*D, C]
      layer.attn_proj_weight = add_parameter(prefix + "attn.proj.weight", block, {C, q_width}, normal);
      layer.mlp_norm_weight = add_parameter(prefix + "mlp_norm.weight", block, {C}, ones);
      layer.gate_weight = add_parameter(prefix + "mlp.gate.weight", block, {F, C}, normal);  // [F, C]
      layer.up_weight = add_parameter(prefix + "mlp.up.weight", block, {F, C}, normal);      // [F, C]
      layer.down_weight = add_parameter(prefix + "mlp.down.weight", block, {C, F}, normal);  // [C, F]
      layers_.push_back(layer);
    }
    const int head = static_cast<int>(spec.layers) + 1;
    final_norm_weight_ = add_parameter("head.norm.weight", head, {C}, ones);
    head_weight_ = add_parameter("head.proj.weight", head, {spec.vocab, C}, normal);  // [V, C]
  }

 protected:
  bool has_attention() const override { return true; }
  bool positions_from_embedding() const override { return false; }

  at::Tensor run_block(size_t block, const at::Tensor& x) const override {
    if (block == 0) return at::embedding(token_embedding_, x);  // tokens [B, T] -> [B, T, C]
    if (block == layers_.size() + 1) {
      // x: [B, T, C] -> logits [B, T, V]
      return at::linear(layers::rms_norm(x, final_norm_weight_, kRmsNormEps), head_weight_);
    }
    const Layer& layer = layers_[block - 1];
    const int64_t heads = spec().heads, kv_heads = spec().kv_heads;
    // attention: x [B, T, C] -> q [B, H, T, D], k and v [B, KV, T, D] -> y [B, T, H*D] -> [B, T, C]
    const at::Tensor h = layers::rms_norm(x, layer.attn_norm_weight, kRmsNormEps);
    const layers::Rotary rotary = layers::rotary_tables(x.size(1), spec().width / heads, kRopeTheta, x);
    const at::Tensor q = layers::apply_rotary(layers::split_heads(at::linear(h, layer.q_weight), heads), rotary);
    const at::Tensor k = layers::apply_rotary(layers::split_heads(at::linear(h, layer.k_weight), kv_heads), rotary);
    const at::Tensor v = layers::split_heads(at::linear(h, layer.v_weight), kv_heads);
    const at::Tensor y = layers::merge_heads(layers::causal_attention(q, k, v, spec().attention));
    const at::Tensor after_attention = x + at::linear(y, layer.attn_proj_weight);
    // MLP: [B, T, C] -> [B, T, F] -> [B, T, C]
    return after_attention +
           layers::swiglu_feed_forward(layers::rms_norm(after_attention, layer.mlp_norm_weight, kRmsNormEps),
                                       layer.gate_weight, layer.up_weight, layer.down_weight);
  }

 private:
  struct Layer {
    at::Tensor attn_norm_weight, q_weight, k_weight, v_weight, attn_proj_weight;
    at::Tensor mlp_norm_weight, gate_weight, up_weight, down_weight;
  };
  at::Tensor token_embedding_;
  std::vector<Layer> layers_;
  at::Tensor final_norm_weight_, head_weight_;
};

}  // namespace

std::unique_ptr<Model> make_llama(const ModelSpec& spec, const Placement& placement) {
  return std::make_unique<Llama>(spec, placement);
}

}  // namespace zhost::model
