// host/data/tokenizer.hpp: the tokenizer that turns data.type = "text" into token ids (data.tokenizer): an HF
// tokenizer.json of byte-level BPE (GPT-2, Llama 3: bpe_tokenizer.hpp, zhost's own code), or a SentencePiece
// tokenizer.model (Llama 2, Mistral: sentencepiece_tokenizer.hpp, through libsentencepiece), chosen from the file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zhost::data {

// One kind of tokenizer, as Tokenizer uses it.
class TokenizerModel {
 public:
  virtual ~TokenizerModel() = default;
  virtual int64_t vocab() const = 0;
  virtual void encode(std::string_view text, std::vector<uint32_t>& ids) const = 0;
};

class Tokenizer {
 public:
  // `path`: a file ending in .json is read as a tokenizer.json, any other file as a SentencePiece model; a folder
  // (an HF model's) by its tokenizer.json, else its tokenizer.model. A missing, malformed or unsupported one is a
  // one-line UsageError naming it.
  explicit Tokenizer(const std::string& path);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  const std::string& file() const { return file_; }  // the file read (in a folder: the one chosen)
  int64_t vocab() const;                             // every id is below it
  // Appends the ids of `text` to `ids`, no BOS or EOS added. Byte-level BPE encodes the text as a whole, newlines
  // included, as HF's Tokenizer.encode(text, add_special_tokens=False) does; SentencePiece encodes it line by line
  // and a newline is no token. Not thread-safe.
  void encode(std::string_view text, std::vector<uint32_t>& ids) const;

 private:
  std::string file_;
  std::unique_ptr<TokenizerModel> model_;
};

}  // namespace zhost::data
