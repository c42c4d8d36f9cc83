// host/data/pretokenizer.hpp: the regex splits of byte-level BPE tokenizers, written by hand (no regex engine):
// the text is cut into the pieces that HF tokenizers' regex finds, each of which BPE then encodes on its own
// (Note [Byte-level BPE], bpe_tokenizer.cpp).
#pragma once

#include <string_view>

namespace zhost::data {

enum class SplitPattern {
  kNone,    // the whole text is one piece (ByteLevel with use_regex = false and no Split before it)
  kGpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
            //   \s*[\r\n]+|\s+(?!\S)|\s+
};

// The regexes as tokenizer.json writes them (a Split's pattern.Regex; ByteLevel's use_regex means kGpt2).
inline constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
    R"(\s*[\r\n]+|\s+(?!\S)|\s+)";

// The pieces of `text` in order, covering it whole: every code point matches one of the patterns' alternatives,
// so the matches follow one another with nothing between them (Split's "Isolated" keeps nothing else). Text that
// is not UTF-8 splits as if each invalid byte were a punctuation mark (HF's Python API takes no such text).
class PreTokenizer {
 public:
  PreTokenizer(SplitPattern pattern, std::string_view text) : pattern_(pattern), text_(text) {}
  // The next piece into `piece`; false at the end of the text.
  bool next(std::string_view& piece);

 private:
  size_t gpt2_match(size_t at) const;    // the end of the match at `at`
  size_t llama3_match(size_t at) const;  // the end of the match at `at`

  SplitPattern pattern_;
  std::string_view text_;
  size_t at_ = 0;
};

}  // namespace zhost::data
