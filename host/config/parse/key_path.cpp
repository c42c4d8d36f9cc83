// host/config/parse/key_path.cpp: dotted key path helpers.
#include "host/config/parse/key_path.hpp"

#include <cctype>

namespace zhost::config {
namespace {

bool is_bare_key(const std::string& segment) {
  if (segment.empty()) return false;
  for (char c : segment) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

}  // namespace

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> segments;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    if (dot == std::string_view::npos) {
      segments.emplace_back(path.substr(start));
      return segments;
    }
    segments.emplace_back(path.substr(start, dot - start));
    start = dot + 1;
  }
}

bool is_valid_path(std::string_view path) {
  for (const auto& segment : split_path(path)) {
    if (!is_bare_key(segment)) return false;
  }
  return true;
}

std::string parent_path(const std::string& path) {
  size_t dot = path.rfind('.');
  return dot == std::string::npos ? std::string() : path.substr(0, dot);
}

std::string last_segment(const std::string& path) {
  size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

std::string join_path(const std::string& table, std::string_view key) {
  return table.empty() ? std::string(key) : table + "." + std::string(key);
}

std::vector<std::string> enclosing_tables(const std::string& path) {
  std::vector<std::string> tables;
  for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', dot + 1)) {
    tables.push_back(path.substr(0, dot));
  }
  return tables;
}

bool is_within(const std::string& path, const std::string& prefix) {
  return path == prefix ||
         (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 && path[prefix.size()] == '.');
}

}  // namespace zhost::config
