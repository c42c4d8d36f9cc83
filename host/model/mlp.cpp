// host/model/mlp.cpp: the language-model-shaped MLP of the ZeRO profiling studies: token embedding ->
// N residual blocks x + Linear(F->C)(ReLU(Linear(C->F)(x))) -> head Linear(C->V) (no final norm).
// Init: normal(0, init_std) weights, the residual projections std / sqrt(layers), biases 0.
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

class Mlp final : public Model {
 public:
  Mlp(const ModelSpec& spec, const Placement& placement) : Model(spec, placement) {
    const int64_t C = spec.width, F = spec.ffn_width;
    const ParamInit normal{Init::kNormal, spec.init_std, false};
    const ParamInit residual{Init::kNormal, spec.init_std / std::sqrt(static_cast<double>(spec.layers)), false};
    const ParamInit zeros{Init::kZeros, 0, false};

    token_embedding_ = add_parameter("embed.tokens.weight", 0, {spec.vocab, C},
                                     {Init::kNormal, spec.init_std, /*lookup_only=*/true});  // [V, C]
    for (int64_t i = 0; i < spec.layers; ++i) {
      const int block = static_cast<int>(i) + 1;
      const std::string prefix = "blocks." + std::to_string(i) + ".";
      Layer layer;
      layer.fc_weight = add_parameter(prefix + "mlp.fc.weight", block, {F, C}, normal);  // [F, C]
      layer.fc_bias = add_parameter(prefix + "mlp.fc.bias", block, {F}, zeros);
      layer.proj_weight = add_parameter(prefix + "mlp.proj.weight", block, {C, F}, residual);  // [C, F]
      layer.proj_bias = add_parameter(prefix + "mlp.proj.bias", block, {C}, zeros);
      layers_.push_back(layer);
    }
    const int head = static_cast<int>(spec.layers) + 1;
    head_weight_ = add_parameter("head.proj.weight", head, {spec.vocab, C}, normal);  // [V, C]
    head_bias_ = add_parameter("head.proj.bias", head, {spec.vocab}, zeros);
  }

 protected:
  bool has_attention() const override { return false; }
  bool positions_from_embedding() const override { return true; }

  at::Tensor run_block(size_t block, const at::Tensor& x) const override {
    if (block == 0) return at::embedding(token_embedding_, x);                        // tokens [B, T] -> [B, T, C]
    if (block == layers_.size() + 1) return at::linear(x, head_weight_, head_bias_);  // [B, T, C] -> [B, T, V]
    const Layer& layer = layers_[block - 1];
    // [B, T, C] -> [B, T, F] -> [B, T, C]
    return x + layers::feed_forward(x, layer.fc_weight, layer.fc_bias, layers::Activation::kRelu, layer.proj_weight,
                                    layer.proj_bias);
  }

 private:
  struct Layer {
    at::Tensor fc_weight, fc_bias, proj_weight, proj_bias;
  };
  at::Tensor token_embedding_;
  std::vector<Layer> layers_;
  at::Tensor head_weight_, head_bias_;
};

}  // namespace

std::unique_ptr<Model> make_mlp(const ModelSpec& spec, const Placement& placement) {
  return std::make_unique<Mlp>(spec, placement);
}

}  // namespace zhost::model
