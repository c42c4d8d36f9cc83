// host/data/unicode_classes.hpp: what byte-level BPE pre-tokenizers need of Unicode (pretokenizer.cpp): the class
// of a code point as their regexes see it (\p{L}, \p{N}, \s, or none of them), and UTF-8 decoding that never fails.
// The tables are generated from Python's unicodedata by unicode_classes.py (its Unicode version is in
// unicode_classes.inc).
#pragma once

#include <cstdint>
#include <string_view>

namespace zhost::data {

enum class UnicodeClass : uint8_t {
  kOther,   // none of the three
  kLetter,  // \p{L}: General_Category L*
  kNumber,  // \p{N}: General_Category N*
  kSpace,   // \s: U+0009..U+000D, U+0085, General_Category Zs, Zl, Zp
};

// Not a code point: what decode_utf8 gives for a byte that starts no valid UTF-8 sequence (its class is kOther).
inline constexpr char32_t kInvalidUtf8 = 0x110000;

UnicodeClass unicode_class(char32_t code_point);

struct CodePoint {
  char32_t value;   // kInvalidUtf8 for an invalid byte
  uint32_t length;  // bytes: 1 to 4 (1 for an invalid byte)
};

// The code point starting at text[at] (at < text.size()). A byte that starts no valid sequence (a stray
// continuation byte, an overlong form, a surrogate, a truncated sequence) decodes alone as kInvalidUtf8.
CodePoint decode_utf8(std::string_view text, size_t at);

}  // namespace zhost::data
