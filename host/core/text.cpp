// host/core/text.cpp: edit distance and suggestion helpers for error messages.
#include "host/core/text.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace zhost::text {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  // A plausible typo: at most a third of the word's length, and at least one edit allowed.
  const size_t allowed = std::max<size_t>(1, word.size() / 3);
  for (const auto& candidate : candidates) {
    // The distance is at least the difference in length: skip the quadratic work for hopeless candidates.
    const size_t longer = std::max(word.size(), candidate.size()), shorter = std::min(word.size(), candidate.size());
    if (longer - shorter > allowed) continue;
    size_t d = edit_distance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best_distance <= allowed ? best : std::string();
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  std::string match = closest_match(word, candidates);
  return match.empty() ? std::string() : "; did you mean '" + match + "'?";
}

std::string excerpt(std::string_view text, size_t max_bytes) {
  // Control characters (a newline in a quoted key, a tab) as \xNN, so that the message stays one line.
  std::string shown;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      shown += c;
      continue;
    }
    char escaped[5];
    std::snprintf(escaped, sizeof(escaped), "\\x%02x", byte);
    shown += escaped;
  }
  if (shown.size() <= max_bytes) return shown;
  // Cut at UTF-8 character boundaries (never inside a multi-byte sequence).
  auto is_continuation = [&shown](size_t i) { return (static_cast<unsigned char>(shown[i]) & 0xC0) == 0x80; };
  size_t head = max_bytes / 2, tail = shown.size() - max_bytes / 2;
  while (head > 0 && is_continuation(head)) --head;
  while (tail < shown.size() && is_continuation(tail)) ++tail;
  return shown.substr(0, head) + "...(" + std::to_string(text.size()) + " bytes)..." + shown.substr(tail);
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  if (items.empty()) return "none";
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += items[i];
  }
  return out;
}

}  // namespace zhost::text
