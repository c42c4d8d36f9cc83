// host/model/hf_config.hpp: a Hugging Face model folder (config.json + safetensors) as zhost reads it for
// model.type = "hf" (internal to zhost_model; see docs/models.md). No LibTorch.
//
// Supported: model_type "gpt2" (GPT2LMHeadModel: Conv1D weights stored [in, out], tied head, learned
// positions) and "llama" / "mistral" (LlamaForCausalLM / MistralForCausalLM: grouped-query attention,
// head_dim, rope_theta at the top level or in rope_parameters, RMSNorm, SiLU-gated MLP, tied or untied
// head). Every other value that would change the computation is refused with what to do.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zhost::formats {
class SafetensorsSet;
}

namespace zhost::model {

struct HfConfig {
  std::string dir;         // the model folder
  std::string model_type;  // gpt2 | llama | mistral
  int64_t layers = 0, width = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn_width = 0, vocab = 0;
  int64_t max_positions = 0;  // n_positions (gpt2: the position table's rows) or max_position_embeddings
  double norm_eps = 0;
  double rope_theta = 0;       // llama, mistral
  bool tied = false;           // the head's projection is the token embedding
  int64_t sliding_window = 0;  // mistral: attention window; 0 = none (zhost's attention is full causal)
  // Dropout probabilities config.json asks for (HF's defaults when absent: GPT-2 0.1 each, Llama/Mistral 0),
  // as "key value"; zhost's models apply none (unapplied_hf_settings in model.hpp).
  std::vector<std::pair<std::string, double>> dropout;
  bool gpt2() const { return model_type == "gpt2"; }
};

// Reads and checks DIR/config.json; a problem is one UsageError naming the file and the field.
HfConfig read_hf_config(const std::string& dir);

// One parameter as HF names and stores it: name, shape, owning block, and the name in the safetensors
// (GPT-2 files written by GPT2Model lack the "transformer." prefix GPT2LMHeadModel writes).
struct HfParameter {
  std::string name;
  std::vector<int64_t> shape;
  int block;
  bool lookup_only;
};
// Every parameter of the model in registry order (block 0, the layers, the head).
std::vector<HfParameter> hf_parameters(const HfConfig& config);

// The name each parameter has in `weights`: the HF name, or the name without GPT-2's "transformer."
// prefix when the file was saved from GPT2Model. Checks that every parameter is there with its shape
// and a floating-point dtype (F32, F16, BF16, F64), and that nothing else is (but the buffers HF writes
// next to parameters: GPT-2's attn.bias / attn.masked_bias masks, rotary_emb.inv_freq; an lm_head.weight
// next to tie_word_embeddings = true is refused, since it may differ from the embedding). One UsageError
// line for the first problem.
std::vector<std::string> match_weights(const HfConfig& config, const std::vector<HfParameter>& params,
                                       const formats::SafetensorsSet& weights);

}  // namespace zhost::model
