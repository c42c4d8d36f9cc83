// host/config/toml_node.hpp: internal to host/config (the only place that includes toml++): the parsed
// document's data, and reading TOML nodes as typed, range- and choice-checked config values.
#pragma once

#include <toml++/toml.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "host/config/deepspeed_import.hpp"
#include "host/config/schema.hpp"

namespace zhost::config {

// One command-line override as the user wrote it.
struct OverrideRecord {
  std::string assignment;  // "zero.stage=2", what followed --set
  std::string value_text;  // "2"
  size_t sequence = 0;     // 0 for the first --set applied, 1 for the next, ...
};

// A value's place when the tree's own source regions do not tell it: keys mapped from a DeepSpeed JSON
// file, and keys merged from a companion TOML file.
struct SourcePlace {
  std::string file;
  TextPosition at;
  std::string how;  // how the value was made there, when the file holds something else: "auto: HF Trainer default"
};

struct DocumentData {
  toml::table root;
  std::map<std::string, SourcePlace> places;        // dotted path -> place (JSON configs and companions only)
  bool deepspeed = false;                           // read from DeepSpeed JSON: its semantics for unread keys
  std::vector<ImportRecord> import_records;         // what became of each DeepSpeed key, in file order
  std::vector<std::string> load_errors;             // whole lines ("FILE:LINE:COL: ..."): refusals, duplicates
  std::string source_name;                          // the file name, or the name given to parse()
  std::map<std::string, OverrideRecord> overrides;  // dotted path -> the last --set that wrote it
  size_t overrides_applied = 0;
};

// A node read as a key's value: either `value`, or a one-line `problem` that starts with the key's path
// and says what to write instead ("zero.stage must be an integer, got float 1.5; ...").
struct Conversion {
  std::optional<ConfigValue> value;
  std::string problem;
};
Conversion convert_node(const toml::node& node, const KeySpec& spec);

// TOML literal text ("5e8", "[0.9, 0.95]", "\"cpu\"") parsed into a table holding it under the key "v";
// nullopt when the text is not exactly one TOML value.
std::optional<toml::table> parse_toml_literal(std::string_view text);
inline constexpr const char* kLiteralKey = "v";

// The value as TOML writes it ("3", "\"cpu\"", "[0.9, 0.999]"), for messages.
std::string value_literal(const toml::node& node);

// "integer 3", "string \"cpu\"", "a table", ... for messages.
std::string describe_node(const toml::node& node);

}  // namespace zhost::config
