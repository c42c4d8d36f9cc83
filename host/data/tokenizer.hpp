// host/data/tokenizer.hpp: a SentencePiece model (Hugging Face's tokenizer.model for Llama and Mistral) that turns
// text into token ids, through Debian's libsentencepiece. A zhost built without it refuses data.tokenizer with
// what to install.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zhost::data {

class Tokenizer {
 public:
  // Loads the model file; a missing or malformed one is a UsageError naming it.
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  int64_t vocab() const;  // pieces in the model: every id is below it
  // Appends the ids of `text`, line by line (a newline is no token; no BOS or EOS added), to `ids`.
  void encode(std::string_view text, std::vector<uint32_t>& ids) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
};

}  // namespace zhost::data
