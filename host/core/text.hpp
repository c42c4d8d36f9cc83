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

// "a, b, c" (or "none").
std::string join(const std::vector<std::string>& items, std::string_view separator = ", ");

}  // namespace zhost::text
