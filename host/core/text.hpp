// host/core/text.hpp: small text helpers for user-facing messages (did-you-mean suggestions, lists).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace zhost::text {

// Levenshtein distance between two strings.
size_t edit_distance(std::string_view a, std::string_view b);

// The closest candidate to `word`, if one is close enough to be a plausible typo; empty otherwise.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

// "; did you mean 'x'?" or "" when nothing is close.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

// `text` as it may appear in a one-line message: control characters written as \xNN, and when longer than
// `max_bytes`, its start and end around "...(N bytes)...", so that a pasted megabyte does not become a
// megabyte of error line.
std::string excerpt(std::string_view text, size_t max_bytes = 80);

// "a, b, c" (or "none").
std::string join(const std::vector<std::string>& items, std::string_view separator = ", ");

}  // namespace zhost::text
