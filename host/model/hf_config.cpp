// host/model/hf_config.cpp: reading config.json and matching the safetensors to the parameters it implies
// (see hf_config.hpp).
#include "host/model/hf_config.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "host/core/error.hpp"
#include "host/core/text.hpp"
#include "host/formats/safetensors.hpp"

namespace zhost::model {
namespace {

using nlohmann::json;

// Typed access to config.json's fields; every problem names the file and the field.
class Fields {
 public:
  Fields(json root, std::string file) : root_(std::move(root)), file_(std::move(file)) {}

  [[noreturn]] void bad(const std::string& what) const { fail_usage("model config '{}': {}", file_, what); }
  bool has(const char* key) const { return root_.contains(key) && !root_[key].is_null(); }
  const json& raw(const char* key) const { return root_[key]; }

  int64_t positive(const char* key) const {
    if (!has(key)) bad(fmt::format("\"{}\" is missing; a {} config.json has it", key, type()));
    return positive_value(key, root_[key]);
  }
  int64_t positive_or(const char* key, int64_t fallback) const { return has(key) ? positive(key) : fallback; }
  int64_t positive_value(const char* key, const json& value) const {
    if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > (int64_t{1} << 40))
      bad(fmt::format("\"{}\" is {}, but it must be a positive integer", key, value.dump()));
    return value.get<int64_t>();
  }
  double number_or(const char* key, double fallback) const {
    return has(key) ? number_value(key, root_[key]) : fallback;
  }
  double number_value(const char* key, const json& value) const {
    if (!value.is_number() || !(value.get<double>() > 0) || !std::isfinite(value.get<double>()))
      bad(fmt::format("\"{}\" is {}, but it must be a positive number", key, value.dump()));
    return value.get<double>();
  }
  // A probability (dropout): a number in [0, 1].
  double probability_or(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const json& value = root_[key];
    if (!value.is_number() || !(value.get<double>() >= 0 && value.get<double>() <= 1))
      bad(fmt::format("\"{}\" is {}, but it must be a probability from 0 to 1", key, value.dump()));
    return value.get<double>();
  }
  bool flag_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!root_[key].is_boolean())
      bad(fmt::format("\"{}\" is {}, but it must be true or false", key, root_[key].dump()));
    return root_[key].get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!root_[key].is_string()) bad(fmt::format("\"{}\" is {}, but it must be a string", key, root_[key].dump()));
    return root_[key].get<std::string>();
  }
  // A setting zhost does not implement: refused unless it has the value that changes nothing.
  void require(bool holds, const char* key, const std::string& needed) const {
    if (!holds)
      bad(fmt::format("\"{}\" is {}, which zhost does not implement (it supports {}); use a model without it", key,
                      root_[key].dump(), needed));
  }
  std::string type() const {
    return root_.contains("model_type") && root_["model_type"].is_string() ? root_["model_type"].get<std::string>()
                                                                           : "model";
  }

 private:
  json root_;
  std::string file_;
};

void read_gpt2(const Fields& f, HfConfig& c) {
  c.layers = f.positive("n_layer");
  c.width = f.positive("n_embd");
  c.heads = f.positive("n_head");
  c.kv_heads = c.heads;
  c.ffn_width = f.positive_or("n_inner", 4 * c.width);
  c.vocab = f.positive("vocab_size");
  c.max_positions = f.positive("n_positions");
  c.norm_eps = f.number_or("layer_norm_epsilon", 1e-5);
  for (const char* key : {"embd_pdrop", "attn_pdrop", "resid_pdrop"})
    c.dropout.emplace_back(key, f.probability_or(key, 0.1));
  const std::string act = f.string_or("activation_function", "gelu_new");
  f.require(act == "gelu_new" || act == "gelu_pytorch_tanh", "activation_function", "\"gelu_new\"");
  f.require(f.flag_or("scale_attn_weights", true), "scale_attn_weights", "true");
  f.require(!f.flag_or("scale_attn_by_inverse_layer_idx", false), "scale_attn_by_inverse_layer_idx", "false");
  f.require(f.flag_or("tie_word_embeddings", true), "tie_word_embeddings", "true for gpt2");
  c.tied = true;
  if (c.width % c.heads != 0) f.bad(fmt::format("n_embd {} is not divisible by n_head {}", c.width, c.heads));
  c.head_dim = c.width / c.heads;
}

void read_llama(const Fields& f, HfConfig& c) {
  c.layers = f.positive("num_hidden_layers");
  c.width = f.positive("hidden_size");
  c.heads = f.positive("num_attention_heads");
  c.kv_heads = f.positive_or("num_key_value_heads", c.heads);
  c.ffn_width = f.positive("intermediate_size");
  c.vocab = f.positive("vocab_size");
  c.max_positions = f.positive_or("max_position_embeddings", 2048);
  c.norm_eps = f.number_or("rms_norm_eps", 1e-6);
  c.dropout.emplace_back("attention_dropout", f.probability_or("attention_dropout", 0.0));
  if (!f.has("head_dim") && c.width % c.heads != 0)
    f.bad(fmt::format("hidden_size {} is not divisible by num_attention_heads {}; give head_dim", c.width, c.heads));
  c.head_dim = f.positive_or("head_dim", c.width / c.heads);
  if (c.head_dim % 2 != 0) f.bad(fmt::format("head_dim {} is odd; the rotary embedding needs it even", c.head_dim));
  if (c.heads % c.kv_heads != 0)
    f.bad(fmt::format("num_attention_heads {} is not a multiple of num_key_value_heads {}", c.heads, c.kv_heads));
  c.tied = f.flag_or("tie_word_embeddings", false);
  f.require(f.string_or("hidden_act", "silu") == "silu", "hidden_act", "\"silu\"");
  f.require(!f.flag_or("attention_bias", false), "attention_bias", "false");
  f.require(!f.flag_or("mlp_bias", false), "mlp_bias", "false");
  f.require(f.positive_or("pretraining_tp", 1) == 1, "pretraining_tp", "1");
  // rope_theta: top level (older files) or inside rope_parameters (newer transformers); scaling refused.
  c.rope_theta = f.number_or("rope_theta", 10000.0);
  if (f.has("rope_parameters")) {
    const json& rope = f.raw("rope_parameters");
    if (!rope.is_object()) f.bad("\"rope_parameters\" is not a JSON object");
    if (rope.contains("rope_theta")) c.rope_theta = f.number_value("rope_parameters.rope_theta", rope["rope_theta"]);
    if (rope.contains("rope_type") && !rope["rope_type"].is_string())
      f.bad("\"rope_parameters.rope_type\" is not a string");
    const std::string kind = rope.contains("rope_type") ? rope["rope_type"].get<std::string>() : "default";
    if (kind != "default")
      f.bad(
          fmt::format("rope_parameters.rope_type is \"{}\", which zhost does not implement (it supports "
                      "\"default\"); use a model without RoPE scaling",
                      kind));
  }
  if (f.has("rope_scaling")) f.require(false, "rope_scaling", "null");
  c.sliding_window = f.positive_or("sliding_window", 0);
}

}  // namespace

HfConfig read_hf_config(const std::string& dir) {
  const std::string file = (std::filesystem::path(dir) / "config.json").string();
  std::error_code error;
  if (dir.empty())
    fail_usage("model.type = \"hf\" needs model.path, the folder holding config.json and the safetensors");
  if (!std::filesystem::is_directory(dir, error))
    fail_usage("model.path '{}' is not a folder; point it at a Hugging Face model folder (config.json + safetensors)",
               dir);
  if (!std::filesystem::is_regular_file(file, error))
    fail_usage("model folder '{}' has no config.json; point model.path at a Hugging Face model folder", dir);
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  const json root = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object())
    fail_usage("model config '{}' is not a JSON object; it is damaged", file);
  const Fields fields(root, file);
  HfConfig config;
  config.dir = dir;
  config.model_type = fields.string_or("model_type", "");
  if (config.gpt2()) {
    read_gpt2(fields, config);
  } else if (config.model_type == "llama" || config.model_type == "mistral") {
    read_llama(fields, config);
  } else {
    fields.bad(
        fmt::format("model_type \"{}\" is not supported; zhost reads gpt2, llama and mistral", config.model_type));
  }
  return config;
}

std::vector<HfParameter> hf_parameters(const HfConfig& c) {
  std::vector<HfParameter> params;
  const int head = static_cast<int>(c.layers) + 1;
  const int64_t C = c.width, F = c.ffn_width;
  const auto add = [&](std::string name, std::vector<int64_t> shape, int block, bool lookup_only = false) {
    params.push_back({std::move(name), std::move(shape), block, lookup_only});
  };
  if (c.gpt2()) {
    add("transformer.wte.weight", {c.vocab, C}, 0);  // also the head's projection
    add("transformer.wpe.weight", {c.max_positions, C}, 0, /*lookup_only=*/true);
    for (int64_t i = 0; i < c.layers; ++i) {
      const int block = static_cast<int>(i) + 1;
      const std::string p = "transformer.h." + std::to_string(i) + ".";
      // Conv1D: weight [in, out]
      add(p + "ln_1.weight", {C}, block);
      add(p + "ln_1.bias", {C}, block);
      add(p + "attn.c_attn.weight", {C, 3 * C}, block);
      add(p + "attn.c_attn.bias", {3 * C}, block);
      add(p + "attn.c_proj.weight", {C, C}, block);
      add(p + "attn.c_proj.bias", {C}, block);
      add(p + "ln_2.weight", {C}, block);
      add(p + "ln_2.bias", {C}, block);
      add(p + "mlp.c_fc.weight", {C, F}, block);
      add(p + "mlp.c_fc.bias", {F}, block);
      add(p + "mlp.c_proj.weight", {F, C}, block);
      add(p + "mlp.c_proj.bias", {C}, block);
    }
    add("transformer.ln_f.weight", {C}, head);
    add("transformer.ln_f.bias", {C}, head);
    return params;
  }
  const int64_t q_width = c.heads * c.head_dim, kv_width = c.kv_heads * c.head_dim;
  add("model.embed_tokens.weight", {c.vocab, C}, 0, /*lookup_only=*/!c.tied);
  for (int64_t i = 0; i < c.layers; ++i) {
    const int block = static_cast<int>(i) + 1;
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {C}, block);
    add(p + "self_attn.q_proj.weight", {q_width, C}, block);
    add(p + "self_attn.k_proj.weight", {kv_width, C}, block);
    add(p + "self_attn.v_proj.weight", {kv_width, C}, block);
    add(p + "self_attn.o_proj.weight", {C, q_width}, block);
    add(p + "post_attention_layernorm.weight", {C}, block);
    add(p + "mlp.gate_proj.weight", {F, C}, block);
    add(p + "mlp.up_proj.weight", {F, C}, block);
    add(p + "mlp.down_proj.weight", {C, F}, block);
  }
  add("model.norm.weight", {C}, head);
  if (!c.tied) add("lm_head.weight", {c.vocab, C}, head);
  return params;
}

std::vector<std::string> match_weights(const HfConfig& config, const std::vector<HfParameter>& params,
                                       const formats::SafetensorsSet& weights) {
  const std::string where = weights.describe();
  // GPT2Model's own files carry no "transformer." prefix.
  const std::string gpt2_prefix = "transformer.";
  const bool bare_gpt2 = config.gpt2() && weights.find("transformer.wte.weight").entry == nullptr &&
                         weights.find("wte.weight").entry != nullptr;
  std::vector<std::string> file_names;
  std::vector<std::string> expected;
  for (const HfParameter& param : params) {
    const std::string name = bare_gpt2 ? param.name.substr(gpt2_prefix.size()) : param.name;
    const formats::SafetensorsSet::Found found = weights.find(name);
    if (found.entry == nullptr)
      fail_usage(
          "'{}' has no tensor \"{}\", which config.json's {} with {} layers needs; the weights do not belong "
          "to this config.json",
          where, name, config.model_type, config.layers);
    const std::string& dtype = found.entry->dtype;
    if (dtype != "F32" && dtype != "F16" && dtype != "BF16" && dtype != "F64")
      fail_usage("'{}': tensor \"{}\" has dtype {}; zhost loads F32, F16, BF16 or F64 weights", found.file->path(),
                 name, dtype);
    if (found.entry->shape != param.shape) {
      std::vector<std::string> got, want;
      for (int64_t d : found.entry->shape) got.push_back(std::to_string(d));
      for (int64_t d : param.shape) want.push_back(std::to_string(d));
      fail_usage(
          "'{}': tensor \"{}\" has shape [{}], but config.json implies [{}]; the weights do not belong to this "
          "config.json",
          found.file->path(), name, text::join(got), text::join(want));
    }
    file_names.push_back(name);
  }
  const auto is_buffer = [&](const std::string& name) {
    const auto ends = [&](const std::string& tail) {
      return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    };
    return ends(".attn.bias") || ends(".attn.masked_bias") || ends(".rotary_emb.inv_freq");
  };
  for (const std::string& name : weights.names()) {
    if (std::find(file_names.begin(), file_names.end(), name) != file_names.end() || is_buffer(name)) continue;
    fail_usage(
        "'{}' holds tensor \"{}\", which config.json's {} does not have; zhost would drop it: check that the "
        "weights belong to this config.json",
        where, name, config.model_type);
  }
  return file_names;
}

}  // namespace zhost::model
