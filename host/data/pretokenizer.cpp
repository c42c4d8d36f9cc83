// host/data/pretokenizer.cpp: GPT-2's and Llama 3's split regexes as hand-written matchers. Each function below
// follows its regex's alternatives in order, with the backtracking that Oniguruma (HF tokenizers' regex engine)
// does spelled out where it matters; the character classes come from unicode_classes.hpp.
#include "host/data/pretokenizer.hpp"

#include "host/data/unicode_classes.hpp"

namespace zhost::data {
namespace {

struct Char {
  char32_t value;
  size_t length;
  UnicodeClass klass;
};

Char char_at(std::string_view text, size_t at) {
  const CodePoint code_point = decode_utf8(text, at);
  return {code_point.value, code_point.length, unicode_class(code_point.value)};
}

// The end of the run of characters of class `klass` that starts at `at`.
size_t run_of(std::string_view text, size_t at, UnicodeClass klass) {
  while (at < text.size()) {
    const Char c = char_at(text, at);
    if (c.klass != klass) break;
    at += c.length;
  }
  return at;
}

bool is_cr_lf(char32_t c) { return c == '\r' || c == '\n'; }

// The length of the contraction 's 't 're 've 'm 'll 'd at text[at] (an apostrophe), 0 if there is none.
// `ignore_case`: (?i:...), where Unicode case folding also takes U+017F (long s) for s.
size_t contraction(std::string_view text, size_t at, bool ignore_case) {
  const std::string_view rest = text.substr(at + 1);
  if (ignore_case && rest.starts_with("\xC5\xBF")) return 3;
  const auto letter = [&](size_t i) -> int {
    if (i >= rest.size()) return -1;
    const unsigned char c = static_cast<unsigned char>(rest[i]);
    return ignore_case && c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
  };
  const int first = letter(0);
  if (first == 's' || first == 't' || first == 'm' || first == 'd') return 2;
  const int second = letter(1);
  if ((first == 'r' || first == 'v') && second == 'e') return 3;
  if (first == 'l' && second == 'l') return 3;
  return 0;
}

// A run of whitespace from `at` (a whitespace character): where \s+(?!\S)|\s+ ends it. \s+(?!\S) backtracks off
// the last whitespace character when a non-space follows (it goes with that non-space, e.g. " word"), unless the
// run is that one character; at the end of the text the whole run matches.
size_t whitespace_match(std::string_view text, size_t at, size_t* after_last_cr_lf = nullptr) {
  size_t last = at;  // where the run's last character starts
  size_t end = at;
  while (end < text.size()) {
    const Char c = char_at(text, end);
    if (c.klass != UnicodeClass::kSpace) break;
    last = end;
    end += c.length;
    if (after_last_cr_lf && is_cr_lf(c.value)) *after_last_cr_lf = end;
  }
  return end == text.size() || last == at ? end : last;
}

}  // namespace

bool PreTokenizer::next(std::string_view& piece) {
  if (at_ >= text_.size()) return false;
  size_t end = text_.size();
  if (pattern_ == SplitPattern::kGpt2) end = gpt2_match(at_);
  if (pattern_ == SplitPattern::kLlama3) end = llama3_match(at_);
  piece = text_.substr(at_, end - at_);
  at_ = end;
  return true;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t PreTokenizer::gpt2_match(size_t at) const {
  const Char c = char_at(text_, at);
  if (c.value == '\'') {
    if (const size_t length = contraction(text_, at, /*ignore_case=*/false)) return at + length;
  }
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': a space (U+0020 only) joins the run that follows it
  if (c.value == ' ' && at + 1 < text_.size()) {
    const Char next = char_at(text_, at + 1);
    if (next.klass != UnicodeClass::kSpace) return run_of(text_, at + 1, next.klass);
  }
  if (c.klass != UnicodeClass::kSpace) return run_of(text_, at, c.klass);
  return whitespace_match(text_, at);
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|
// \s+(?!\S)|\s+
size_t PreTokenizer::llama3_match(size_t at) const {
  const Char c = char_at(text_, at);
  if (c.value == '\'') {
    if (const size_t length = contraction(text_, at, /*ignore_case=*/true)) return at + length;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+: one character of any other kind (a space, a tab, a bracket) joins the letters after it
  if (c.klass == UnicodeClass::kLetter) return run_of(text_, at, UnicodeClass::kLetter);
  if (c.klass != UnicodeClass::kNumber && !is_cr_lf(c.value) && at + c.length < text_.size() &&
      char_at(text_, at + c.length).klass == UnicodeClass::kLetter) {
    return run_of(text_, at + c.length, UnicodeClass::kLetter);
  }
  // \p{N}{1,3}
  if (c.klass == UnicodeClass::kNumber) {
    size_t end = at + c.length;
    for (int digits = 1; digits < 3 && end < text_.size(); ++digits) {
      const Char next = char_at(text_, end);
      if (next.klass != UnicodeClass::kNumber) break;
      end += next.length;
    }
    return end;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t others = text_.size();
  if (c.klass == UnicodeClass::kOther) others = at;
  if (c.value == ' ' && at + 1 < text_.size() && char_at(text_, at + 1).klass == UnicodeClass::kOther) others = at + 1;
  if (others < text_.size()) {
    size_t end = run_of(text_, others, UnicodeClass::kOther);
    while (end < text_.size() && (text_[end] == '\r' || text_[end] == '\n')) ++end;
    return end;
  }
  // \s*[\r\n]+: \s* backtracks to the run's last \r or \n, and the match ends after it; else \s+(?!\S)|\s+
  size_t after_last_cr_lf = 0;
  const size_t end = whitespace_match(text_, at, &after_last_cr_lf);
  return after_last_cr_lf != 0 ? after_last_cr_lf : end;
}

}  // namespace zhost::data
