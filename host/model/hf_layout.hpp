// host/model/hf_layout.hpp: zhost's models under Hugging Face's tensor names and layouts, for `zhost export`
// (docs/checkpoints.md, "Export"). No LibTorch: a list of names, shapes and transposes, and a config.json.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zhost::model {

struct HfExportTensor {
  std::string name;            // Hugging Face's name
  std::string source;          // the zhost parameter holding it
  std::vector<int64_t> shape;  // as Hugging Face stores it
  bool transposed = false;     // the 2-D source stored transposed (GPT-2's Conv1D weights are [in, out])
};

struct HfExportLayout {
  std::vector<HfExportTensor> tensors;  // in the order to write them
  nlohmann::json config;                // config.json
  std::string files_from;               // "hf" models: the folder whose tokenizer files come along ("" = none)
};

// What a checkpoint records of its model (`job.model_spec` in checkpoint.json): ModelSpec's resolved fields,
// and for "hf" models their config.json as "hf_config".
nlohmann::json model_spec_record(const struct ModelSpec& spec);

// The Hugging Face layout of a recorded model: gpt -> GPT2LMHeadModel, llama -> LlamaForCausalLM, hf -> its
// own names and config.json. An mlp has no Hugging Face architecture: UsageError saying to export zhost's
// names instead.
HfExportLayout hf_export_layout(const nlohmann::json& model_spec);

}  // namespace zhost::model
