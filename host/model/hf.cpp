// host/model/hf.cpp: Hugging Face GPT-2, Llama and Mistral models read from a model folder (config.json +
// safetensors, hf_config.hpp), with HF's parameter names and layouts, so that the safetensors map onto the
// parameters byte for byte: any element range of a parameter is read straight from the memory map
// (Note [Loading HF weights by shard]).
//
// Note [Loading HF weights by shard]: every parameter is Init::kLoaded. Materialised construction (stages
// 0-2) reads each parameter whole; stage 3 builds the model without storage and each rank asks, through
// params->initial_values -> init_parameter_shard -> load_parameter_shard, for its own element ranges only.
// A range is copied from the map (converting the file's dtype) and its whole pages are then dropped from
// the resident set (MappedFile::release), so a rank's RSS holds its shards, not the model.
#include <ATen/TensorOperators.h>
#include <ATen/ops/embedding.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/linear.h>

#include <memory>
#include <string>
#include <vector>

#include "host/core/error.hpp"
#include "host/formats/safetensors.hpp"
#include "host/model/architectures.hpp"
#include "host/model/hf_config.hpp"
#include "host/model/layers.hpp"

namespace zhost::model {
namespace {

at::ScalarType scalar_type(const std::string& dtype) {
  if (dtype == "F32") return at::kFloat;
  if (dtype == "F16") return at::kHalf;
  if (dtype == "BF16") return at::kBFloat16;
  ZHOST_ASSERT(dtype == "F64");  // match_weights admits only these four
  return at::kDouble;
}

class HfModel final : public Model {
 public:
  HfModel(const ModelSpec& spec, const Placement& placement, HfConfig config)
      : Model(spec, placement),
        config_(std::move(config)),
        weights_(std::make_unique<formats::SafetensorsSet>(formats::SafetensorsSet::open(config_.dir))) {
    const std::vector<HfParameter> params = hf_parameters(config_);
    file_names_ = match_weights(config_, params, *weights_);
    for (const HfParameter& param : params)
      tensors_.push_back(add_parameter(param.name, param.block, param.shape, {Init::kLoaded, 0, param.lookup_only}));
    if (config_.tied) add_use(static_cast<size_t>(config_.layers) + 1, 0);  // the head reads the token embedding
  }

 protected:
  bool has_attention() const override { return true; }
  bool positions_from_embedding() const override { return config_.gpt2(); }  // Llama, Mistral: rotary

  void load_parameter_shard(size_t param_index, int64_t flat_offset, at::Tensor& target) const override {
    const formats::SafetensorsSet::Found found = weights_->find(file_names_[param_index]);
    const formats::TensorEntry& entry = *found.entry;
    const uint64_t first_byte = static_cast<uint64_t>(flat_offset) * entry.element_size;
    const uint64_t bytes = static_cast<uint64_t>(target.numel()) * entry.element_size;
    ZHOST_ASSERT(first_byte + bytes <= entry.end - entry.begin);
    // A read-only view of the map: copy_ only reads it.
    auto* source = const_cast<unsigned char*>(found.file->data(entry) + first_byte);
    target.copy_(at::from_blob(source, {target.numel()}, at::TensorOptions().dtype(scalar_type(entry.dtype))));
    found.file->release(entry, first_byte, bytes);
  }

  at::Tensor run_block(size_t block, const at::Tensor& x) const override {
    return config_.gpt2() ? run_gpt2(block, x) : run_llama(block, x);
  }

 private:
  const at::Tensor& p(size_t index) const { return tensors_[index]; }

  // Parameter ids (hf_parameters' order): gpt2 has 2 embedding tensors then 12 per layer; llama 1 then 9.
  at::Tensor run_gpt2(size_t block, const at::Tensor& x) const {
    const size_t last = static_cast<size_t>(config_.layers) + 1;
    const double eps = config_.norm_eps;
    if (block == 0) return at::embedding(p(0), x) + p(1).narrow(0, 0, x.size(1));  // tokens [B, T] -> [B, T, C]
    if (block == last) {
      const size_t n = 2 + 12 * static_cast<size_t>(config_.layers);
      return at::linear(layers::layer_norm(x, p(n), p(n + 1), eps), p(0));  // [B, T, C] -> logits [B, T, V]
    }
    const size_t i = 2 + 12 * (block - 1);
    const int64_t C = config_.width, heads = config_.heads;
    // Conv1D weights are [in, out]: y = x W + b, i.e. linear with W^T.
    const at::Tensor h = layers::layer_norm(x, p(i), p(i + 1), eps);
    const std::vector<at::Tensor> qkv = at::linear(h, p(i + 2).t(), p(i + 3)).split(C, -1);  // [B, T, 3C]
    const at::Tensor y = layers::merge_heads(
        layers::causal_attention(layers::split_heads(qkv[0], heads), layers::split_heads(qkv[1], heads),
                                 layers::split_heads(qkv[2], heads), spec().attention));
    const at::Tensor after_attention = x + at::linear(y, p(i + 4).t(), p(i + 5));
    const at::Tensor h2 = layers::layer_norm(after_attention, p(i + 6), p(i + 7), eps);
    return after_attention +
           layers::feed_forward(h2, p(i + 8).t(), p(i + 9), layers::Activation::kGeluTanh, p(i + 10).t(), p(i + 11));
  }

  at::Tensor run_llama(size_t block, const at::Tensor& x) const {
    const size_t last = static_cast<size_t>(config_.layers) + 1;
    const double eps = config_.norm_eps;
    if (block == 0) return at::embedding(p(0), x);  // tokens [B, T] -> [B, T, C]
    if (block == last) {
      const size_t n = 1 + 9 * static_cast<size_t>(config_.layers);
      const at::Tensor& projection = config_.tied ? p(0) : p(n + 1);
      return at::linear(layers::rms_norm(x, p(n), eps), projection);  // [B, T, C] -> logits [B, T, V]
    }
    const size_t i = 1 + 9 * (block - 1);
    const int64_t heads = config_.heads, kv_heads = config_.kv_heads;
    // attention: x [B, T, C] -> q [B, H, T, D], k and v [B, KV, T, D] -> y [B, T, H*D] -> [B, T, C]
    const at::Tensor h = layers::rms_norm(x, p(i), eps);
    const layers::Rotary rotary = layers::rotary_tables(x.size(1), config_.head_dim, config_.rope_theta, x);
    const at::Tensor q = layers::apply_rotary(layers::split_heads(at::linear(h, p(i + 1)), heads), rotary);
    const at::Tensor k = layers::apply_rotary(layers::split_heads(at::linear(h, p(i + 2)), kv_heads), rotary);
    const at::Tensor v = layers::split_heads(at::linear(h, p(i + 3)), kv_heads);
    const at::Tensor after_attention =
        x + at::linear(layers::merge_heads(layers::causal_attention(q, k, v, spec().attention)), p(i + 4));
    // SiLU-gated MLP: [B, T, C] -> [B, T, F] -> [B, T, C]
    return after_attention +
           layers::swiglu_feed_forward(layers::rms_norm(after_attention, p(i + 5), eps), p(i + 6), p(i + 7), p(i + 8));
  }

  HfConfig config_;
  std::unique_ptr<formats::SafetensorsSet> weights_;
  std::vector<std::string> file_names_;  // each parameter's name in the safetensors
  std::vector<at::Tensor> tensors_;      // handles of parameters(), same order
};

}  // namespace

ModelSpec resolve_hf_spec(const ModelSpec& spec) {
  const HfConfig config = read_hf_config(spec.path);
  if (spec.seq_len < 1) fail_usage("model.seq_len must be at least 1 (got {})", spec.seq_len);
  if (spec.seq_len > config.max_positions)
    fail_usage("model.seq_len {} is above the {} positions '{}/config.json' allows ({}); use a seq_len of at most {}",
               spec.seq_len, config.max_positions, spec.path, config.gpt2() ? "n_positions" : "max_position_embeddings",
               config.max_positions);
  if (config.sliding_window > 0 && spec.seq_len > config.sliding_window)
    fail_usage(
        "model.seq_len {} is above '{}/config.json''s sliding_window {}, and zhost's attention is full causal "
        "attention (equal to sliding-window attention only within the window); use a seq_len of at most {}",
        spec.seq_len, spec.path, config.sliding_window, config.sliding_window);
  ModelSpec resolved = spec;
  resolved.layers = config.layers;
  resolved.heads = config.heads;
  resolved.kv_heads = config.kv_heads;
  resolved.width = config.width;
  resolved.ffn_width = config.ffn_width;
  resolved.vocab = config.vocab;
  return resolved;
}

std::vector<std::string> unapplied_hf_settings(const ModelSpec& spec) {
  std::vector<std::string> unapplied;
  if (spec.type != "hf") return unapplied;
  for (const auto& [key, probability] : read_hf_config(spec.path).dropout)
    if (probability > 0) unapplied.push_back(fmt::format("{} {}", key, probability));
  return unapplied;
}

std::unique_ptr<Model> make_hf(const ModelSpec& spec, const Placement& placement) {
  return std::make_unique<HfModel>(spec, placement, read_hf_config(spec.path));
}

}  // namespace zhost::model
