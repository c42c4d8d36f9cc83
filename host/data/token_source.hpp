// host/data/token_source.hpp: the sources behind DataLoader (internal to zhost_data; no LibTorch): each
// produces sample i of step s as seq_len+1 token ids, a pure function of (seed, s, i).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace zhost::data {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // Writes sample `index` of step `step` (seq_len + 1 ids) to out[0 .. seq_len].
  virtual void read_sample(int64_t step, int64_t index, int64_t* out) const = 0;
  virtual int64_t corpus_tokens() const = 0;  // 0 for synthetic
};

struct SourceParams {
  int64_t vocab;
  int64_t seq_len;
  uint64_t seed;
};

std::unique_ptr<TokenSource> open_synthetic(const SourceParams& params);
// token_bytes: 2 (uint16) or 4 (uint32), little-endian as numpy writes them on x86 and ARM.
std::unique_ptr<TokenSource> open_token_file(const std::string& path, int token_bytes, const SourceParams& params);
std::unique_ptr<TokenSource> open_text(const std::string& path, const SourceParams& params);
// The same files as open_text, each tokenized as a whole once when the source opens with `tokenizer` (a
// tokenizer.json, a SentencePiece model or a folder with one: tokenizer.hpp) and kept in memory as uint32 ids
// (4 bytes per token). The files' ids follow one another with nothing added between them.
std::unique_ptr<TokenSource> open_tokenized_text(const std::string& path, const std::string& tokenizer,
                                                 const SourceParams& params);
// What open_tokenized_text checks before it tokenizes: the tokenizer loads and fits the vocab, the files exist.
void check_tokenized_text(const std::string& path, const std::string& tokenizer, const SourceParams& params);

}  // namespace zhost::data
