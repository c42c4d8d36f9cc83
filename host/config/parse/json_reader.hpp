// host/config/parse/json_reader.hpp: reading a JSON config (DeepSpeed's ds_config.json) as people write it:
// comments (// and /* */) and trailing commas before } or ] are accepted, like DeepSpeed's hjson reader,
// and every object key's line and column is kept for messages. Internal to host/config.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace zhost::config {

struct TextPosition {
  int64_t line = 0;    // 1-based; 0 = no place in the file
  int64_t column = 0;  // 1-based, in bytes
};

struct JsonConfig {
  nlohmann::json root;  // an object
  // Where each key starts (its opening quote), by JSON pointer: "/zero_optimization/stage".
  std::map<std::string, TextPosition> key_positions;
  // Keys written twice in one object ("FILE:LINE:COL: ..."), which DeepSpeed refuses too; the last wins.
  std::vector<std::string> duplicate_keys;
};

// Throws UsageError "FILE:LINE:COL: <what is wrong>; <what to do>" for text that is not a JSON object.
JsonConfig read_json_config(std::string_view text, const std::string& source_name);

// True when the text's first non-blank character is '{' (TOML never starts so).
bool looks_like_json(std::string_view text);

// `key` as one reference token of a JSON pointer (RFC 6901: "~" -> "~0", "/" -> "~1").
std::string escape_json_pointer_token(const std::string& key);

}  // namespace zhost::config
