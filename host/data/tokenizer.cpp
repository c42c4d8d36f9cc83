// host/data/tokenizer.cpp: Tokenizer: which file data.tokenizer names, and which implementation reads it.
#include "host/data/tokenizer.hpp"

#include <filesystem>

#include "host/core/error.hpp"
#include "host/data/bpe_tokenizer.hpp"
#include "host/data/sentencepiece_tokenizer.hpp"

namespace zhost::data {
namespace {

namespace fs = std::filesystem;

// The file to read: `path` itself, or in a folder its tokenizer.json, else its tokenizer.model.
std::string tokenizer_file(const std::string& path) {
  std::error_code error;
  if (fs::is_directory(path, error)) {
    for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
      const fs::path file = fs::path(path) / name;
      if (fs::is_regular_file(file, error)) return file.string();
    }
    fail_usage(
        "data.tokenizer folder '{}' holds neither tokenizer.json nor tokenizer.model; point it at an HF model folder "
        "with one, or at the file",
        path);
  }
  if (!fs::is_regular_file(path, error))
    fail_usage(
        "data.tokenizer '{}' is not a file; point it at the model's tokenizer.json (byte-level BPE) or "
        "tokenizer.model (SentencePiece), or at the HF model folder holding it",
        path);
  return path;
}

}  // namespace

Tokenizer::Tokenizer(const std::string& path) : file_(tokenizer_file(path)) {
  model_ = fs::path(file_).extension() == ".json" ? open_byte_level_bpe(file_) : open_sentencepiece(file_);
}

Tokenizer::~Tokenizer() = default;

int64_t Tokenizer::vocab() const { return model_->vocab(); }

void Tokenizer::encode(std::string_view text, std::vector<uint32_t>& ids) const { model_->encode(text, ids); }

}  // namespace zhost::data
