// host/config/document/document_data.hpp: internal to host/config (it holds the toml++ tree): what a Document
// holds, for the code that reads a document's tree (validation, the TOML printout of an import).
#pragma once

#include <toml++/toml.h>

#include <map>
#include <string>
#include <vector>

#include "host/config/deepspeed/deepspeed_import.hpp"

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

}  // namespace zhost::config
