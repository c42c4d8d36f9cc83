// host/model/hf_layout.cpp: the name and layout maps of hf_layout.hpp. The built-in gpt computes what
// GPT2LMHeadModel computes (tanh GELU, LayerNorm eps 1e-5, tied head) and the built-in llama what
// LlamaForCausalLM computes (RMSNorm eps 1e-5, rotary theta 10000, SiLU-gated MLP, untied head): both are
// read back by zhost's own Hugging Face loader (model.type = "hf") in the export tests.
#include "host/model/hf_layout.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "host/core/error.hpp"
#include "host/model/model.hpp"

namespace zhost::model {
namespace {

using json = nlohmann::json;

int64_t field(const json& spec, const char* key) {
  if (!spec.contains(key) || !spec.at(key).is_number_integer())
    fail_usage(
        "the checkpoint's model record lacks '{}': it was saved by an older zhost; export zhost's names "
        "with --names zhost",
        key);
  return spec.at(key).get<int64_t>();
}

HfExportLayout gpt2_layout(const json& spec) {
  const int64_t L = field(spec, "layers"), C = field(spec, "width"), F = field(spec, "ffn_width"),
                V = field(spec, "vocab"), T = field(spec, "seq_len"), H = field(spec, "heads");
  HfExportLayout layout;
  auto add = [&](std::string name, std::string source, std::vector<int64_t> shape, bool transposed = false) {
    layout.tensors.push_back({std::move(name), std::move(source), std::move(shape), transposed});
  };
  add("transformer.wte.weight", "embed.tokens.weight", {V, C});
  add("transformer.wpe.weight", "embed.positions.weight", {T, C});
  for (int64_t i = 0; i < L; ++i) {
    const std::string hf = "transformer.h." + std::to_string(i) + ".", z = "blocks." + std::to_string(i) + ".";
    add(hf + "ln_1.weight", z + "attn_norm.weight", {C});
    add(hf + "ln_1.bias", z + "attn_norm.bias", {C});
    add(hf + "attn.c_attn.weight", z + "attn.qkv.weight", {C, 3 * C}, true);
    add(hf + "attn.c_attn.bias", z + "attn.qkv.bias", {3 * C});
    add(hf + "attn.c_proj.weight", z + "attn.proj.weight", {C, C}, true);
    add(hf + "attn.c_proj.bias", z + "attn.proj.bias", {C});
    add(hf + "ln_2.weight", z + "mlp_norm.weight", {C});
    add(hf + "ln_2.bias", z + "mlp_norm.bias", {C});
    add(hf + "mlp.c_fc.weight", z + "mlp.fc.weight", {C, F}, true);
    add(hf + "mlp.c_fc.bias", z + "mlp.fc.bias", {F});
    add(hf + "mlp.c_proj.weight", z + "mlp.proj.weight", {F, C}, true);
    add(hf + "mlp.c_proj.bias", z + "mlp.proj.bias", {C});
  }
  add("transformer.ln_f.weight", "head.norm.weight", {C});
  add("transformer.ln_f.bias", "head.norm.bias", {C});
  layout.config = {{"architectures", {"GPT2LMHeadModel"}},
                   {"model_type", "gpt2"},
                   {"vocab_size", V},
                   {"n_positions", T},
                   {"n_ctx", T},
                   {"n_embd", C},
                   {"n_layer", L},
                   {"n_head", H},
                   {"n_inner", F},
                   {"activation_function", "gelu_new"},
                   {"layer_norm_epsilon", 1e-5},
                   {"resid_pdrop", 0.0},
                   {"embd_pdrop", 0.0},
                   {"attn_pdrop", 0.0},
                   {"tie_word_embeddings", true},
                   {"torch_dtype", "float32"}};
  return layout;
}

HfExportLayout llama_layout(const json& spec) {
  const int64_t L = field(spec, "layers"), C = field(spec, "width"), F = field(spec, "ffn_width"),
                V = field(spec, "vocab"), T = field(spec, "seq_len"), H = field(spec, "heads"),
                KV = field(spec, "kv_heads");
  const int64_t D = C / H;
  HfExportLayout layout;
  auto add = [&](std::string name, std::string source, std::vector<int64_t> shape) {
    layout.tensors.push_back({std::move(name), std::move(source), std::move(shape), false});
  };
  add("model.embed_tokens.weight", "embed.tokens.weight", {V, C});
  for (int64_t i = 0; i < L; ++i) {
    const std::string hf = "model.layers." + std::to_string(i) + ".", z = "blocks." + std::to_string(i) + ".";
    add(hf + "input_layernorm.weight", z + "attn_norm.weight", {C});
    add(hf + "self_attn.q_proj.weight", z + "attn.q.weight", {H * D, C});
    add(hf + "self_attn.k_proj.weight", z + "attn.k.weight", {KV * D, C});
    add(hf + "self_attn.v_proj.weight", z + "attn.v.weight", {KV * D, C});
    add(hf + "self_attn.o_proj.weight", z + "attn.proj.weight", {C, H * D});
    add(hf + "post_attention_layernorm.weight", z + "mlp_norm.weight", {C});
    add(hf + "mlp.gate_proj.weight", z + "mlp.gate.weight", {F, C});
    add(hf + "mlp.up_proj.weight", z + "mlp.up.weight", {F, C});
    add(hf + "mlp.down_proj.weight", z + "mlp.down.weight", {C, F});
  }
  add("model.norm.weight", "head.norm.weight", {C});
  add("lm_head.weight", "head.proj.weight", {V, C});
  layout.config = {{"architectures", {"LlamaForCausalLM"}},
                   {"model_type", "llama"},
                   {"vocab_size", V},
                   {"hidden_size", C},
                   {"intermediate_size", F},
                   {"num_hidden_layers", L},
                   {"num_attention_heads", H},
                   {"num_key_value_heads", KV},
                   {"max_position_embeddings", T},
                   {"rms_norm_eps", 1e-5},
                   {"rope_theta", 10000.0},
                   {"hidden_act", "silu"},
                   {"attention_bias", false},
                   {"mlp_bias", false},
                   {"tie_word_embeddings", false},
                   {"torch_dtype", "float32"}};
  return layout;
}

}  // namespace

json model_spec_record(const ModelSpec& spec) {
  json record = {{"type", spec.type},         {"layers", spec.layers},  {"heads", spec.heads},
                 {"kv_heads", spec.kv_heads}, {"width", spec.width},    {"ffn_width", spec.ffn_width},
                 {"vocab", spec.vocab},       {"seq_len", spec.seq_len}};
  if (spec.type == "hf") {
    record["path"] = std::filesystem::absolute(spec.path).string();
    std::ifstream in(std::filesystem::path(spec.path) / "config.json");
    std::stringstream text;
    text << in.rdbuf();
    json config = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (!config.is_discarded()) record["hf_config"] = config;
  }
  return record;
}

HfExportLayout hf_export_layout(const json& spec) {
  const std::string type = spec.value("type", "");
  if (type == "gpt") return gpt2_layout(spec);
  if (type == "llama") return llama_layout(spec);
  if (type == "hf") {
    if (!spec.contains("hf_config") || !spec.at("hf_config").is_object())
      fail_usage(
          "the checkpoint does not record its Hugging Face config.json; export zhost's names with --names zhost");
    HfExportLayout layout;
    layout.config = spec.at("hf_config");
    layout.config["torch_dtype"] = "float32";
    layout.files_from = spec.value("path", "");
    return layout;  // tensors: the checkpoint's own, already under Hugging Face's names
  }
  fail_usage("a '{}' model has no Hugging Face architecture to export to; export zhost's names with --names zhost",
             type.empty() ? "unknown" : type);
}

}  // namespace zhost::model
