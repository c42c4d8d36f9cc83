// host/data/unicode_classes.cpp: code point classes from the generated ranges (unicode_classes.inc), with a table
// for ASCII, and a strict UTF-8 decoder.
#include "host/data/unicode_classes.hpp"

#include <algorithm>
#include <array>
#include <iterator>

namespace zhost::data {
namespace {

struct Range {
  char32_t first;
  char32_t last;
  UnicodeClass klass;
};

constexpr Range kRanges[] = {
#include "host/data/unicode_classes.inc"
};

constexpr std::array<UnicodeClass, 128> ascii_classes() {
  std::array<UnicodeClass, 128> classes{};
  for (const Range& range : kRanges) {
    for (char32_t c = range.first; c <= range.last && c < 128; ++c) classes[c] = range.klass;
  }
  return classes;
}

constexpr std::array<UnicodeClass, 128> kAscii = ascii_classes();

static_assert(std::is_sorted(std::begin(kRanges), std::end(kRanges),
                             [](const Range& a, const Range& b) { return a.last < b.first; }),
              "unicode_classes.inc: ranges must be sorted and disjoint");

}  // namespace

UnicodeClass unicode_class(char32_t code_point) {
  if (code_point < 128) return kAscii[code_point];
  // the first range ending at or after the code point
  const Range* range = std::lower_bound(std::begin(kRanges), std::end(kRanges), code_point,
                                        [](const Range& r, char32_t c) { return r.last < c; });
  if (range != std::end(kRanges) && range->first <= code_point) return range->klass;
  return UnicodeClass::kOther;
}

CodePoint decode_utf8(std::string_view text, size_t at) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return {lead, 1};
  uint32_t length;
  char32_t value;
  char32_t minimum;  // below it the form is overlong
  if ((lead & 0xE0) == 0xC0) {
    length = 2, value = lead & 0x1F, minimum = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, value = lead & 0x0F, minimum = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, value = lead & 0x07, minimum = 0x10000;
  } else {
    return {kInvalidUtf8, 1};
  }
  if (text.size() - at < length) return {kInvalidUtf8, 1};
  for (uint32_t i = 1; i < length; ++i) {
    const unsigned char next = byte(at + i);
    if ((next & 0xC0) != 0x80) return {kInvalidUtf8, 1};
    value = (value << 6) | (next & 0x3F);
  }
  if (value < minimum || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return {kInvalidUtf8, 1};
  return {value, length};
}

}  // namespace zhost::data
