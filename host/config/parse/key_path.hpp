// host/config/parse/key_path.hpp: dotted key paths ("zero.offload_optimizer.device"): splitting, joining and
// checking them. Segments are TOML bare keys: letters, digits, '_' and '-'.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace zhost::config {

// "a.b.c" -> {"a", "b", "c"}; empty segments are kept ("a..b" -> {"a", "", "b"}).
std::vector<std::string> split_path(std::string_view path);
// True when every segment is a non-empty bare key.
bool is_valid_path(std::string_view path);
// "zero.stage" -> "zero"; "seed" -> "".
std::string parent_path(const std::string& path);
// "zero.stage" -> "stage"; "seed" -> "seed".
std::string last_segment(const std::string& path);
// ("zero", "stage") -> "zero.stage"; ("", "seed") -> "seed".
std::string join_path(const std::string& table, std::string_view key);
// Every table `path` lies in: "a.b.c" -> {"a", "a.b"}.
std::vector<std::string> enclosing_tables(const std::string& path);
// True when `path` is `prefix` or lies under it ("zero.stage" under "zero", not under "ze").
bool is_within(const std::string& path, const std::string& prefix);

}  // namespace zhost::config
