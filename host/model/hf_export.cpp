// host/model/hf_export.cpp: writes trained weights back as a Hugging Face model folder (see export_hf in
// model.hpp): model.safetensors with HF's names and layouts, config.json and the tokenizer files copied.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "host/core/error.hpp"
#include "host/formats/safetensors.hpp"
#include "host/model/model.hpp"

namespace zhost::model {

void export_hf(const ModelSpec& spec, const std::vector<std::string>& names, const std::vector<at::Tensor>& values,
               const std::string& out_dir) {
  namespace fs = std::filesystem;
  ZHOST_ASSERT(spec.type == "hf" && names.size() == values.size());
  std::error_code error;
  fs::create_directories(out_dir, error);
  if (error) fail("cannot create the export folder '{}': {}", out_dir, error.message());
  std::vector<at::Tensor> kept;  // fp32, contiguous, alive until written
  std::vector<formats::TensorToWrite> tensors;
  for (size_t i = 0; i < names.size(); ++i) {
    kept.push_back(values[i].detach().to(at::kCPU, at::kFloat).contiguous());
    tensors.push_back({names[i], "F32", kept.back().sizes().vec(), kept.back().data_ptr(), kept.back().nbytes()});
  }
  formats::write_safetensors((fs::path(out_dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  // config.json, with the dtype of what was written; the tokenizer files as they are.
  std::ifstream in(fs::path(spec.path) / "config.json");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json config = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) fail("cannot re-read '{}/config.json' to export it", spec.path);
  config["torch_dtype"] = "float32";
  std::ofstream(fs::path(out_dir) / "config.json") << config.dump(2) << "\n";
  copy_hf_side_files(spec.path, out_dir);
}

int copy_hf_side_files(const std::string& from, const std::string& out_dir) {
  namespace fs = std::filesystem;
  std::error_code error;
  int copied = 0;
  for (const char* file : {"tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "generation_config.json", "vocab.json", "merges.txt"}) {
    if (!fs::is_regular_file(fs::path(from) / file, error)) continue;
    fs::copy_file(fs::path(from) / file, fs::path(out_dir) / file, fs::copy_options::overwrite_existing, error);
    if (error) fail("cannot copy '{}/{}' into the export folder '{}': {}", from, file, out_dir, error.message());
    ++copied;
  }
  return copied;
}

}  // namespace zhost::model
