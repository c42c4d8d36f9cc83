// host/config/document/document.cpp: loading TOML config files and applying --set overrides.
#include "host/config/document/document.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>

#include "host/config/deepspeed/deepspeed_import.hpp"
#include "host/config/document/document_data.hpp"
#include "host/config/parse/json_reader.hpp"
#include "host/config/parse/key_path.hpp"
#include "host/config/parse/toml_node.hpp"
#include "host/core/error.hpp"
#include "host/core/text.hpp"

namespace zhost::config {
namespace {

std::string one_line(std::string_view text) {
  std::string line(text);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return line;
}

std::string trim(std::string_view text) {
  size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  size_t end = text.find_last_not_of(" \t");
  return std::string(text.substr(begin, end - begin + 1));
}

// The largest config file read: a config is a few kilobytes; more is a wrong file.
constexpr std::uintmax_t kMaxConfigBytes = 16u << 20;

// The parser's error as one line with what to do. An unclosed string is the common case, and the parser
// names only the character where it noticed (the end of the line or file), so point at the opening quote.
std::string describe_parse_error(std::string_view text, const toml::parse_error& error, const std::string& source) {
  const auto line = error.source().begin.line;
  const auto column = error.source().begin.column;
  std::string reason = one_line(error.description());
  const bool in_string =
      reason.rfind("Error while parsing string", 0) == 0 || reason.rfind("Error while parsing literal string", 0) == 0;
  const bool at_end = reason.find("encountered end-of-file") != std::string::npos;
  // The error's line, to look for the quote that opened the string.
  size_t begin = 0;
  for (toml::source_index i = 1; i < line && begin != std::string_view::npos; ++i) {
    begin = text.find('\n', begin);
    if (begin != std::string_view::npos) ++begin;
  }
  std::string_view line_text =
      begin == std::string_view::npos ? std::string_view() : text.substr(begin, text.find('\n', begin) - begin);
  const size_t error_offset = column > 0 ? static_cast<size_t>(column - 1) : 0;
  const bool at_line_end = error_offset >= line_text.size() || line_text[error_offset] == '\r';
  if (in_string && (at_end || at_line_end)) {
    size_t quote = line_text.substr(0, std::min(error_offset, line_text.size())).find_last_of("\"'");
    if (quote != std::string_view::npos && !at_end) {
      return fmt::format(
          "{}:{}:{}: the string that starts here ({}) is not closed before the end of the line; add "
          "the closing {} (a string spanning lines needs triple quotes)",
          source, line, quote + 1, text::excerpt(line_text.substr(quote), 40), line_text[quote]);
    }
    return fmt::format("{}:{}:{}: the file ends inside a string; add its closing quote", source, line, column);
  }
  if (at_end) {
    return fmt::format("{}:{}:{}: the file ends before a value is complete ({}); close the list, table or string",
                       source, line, column, reason);
  }
  return fmt::format("{}:{}:{}: {}", source, line, column, reason);
}

// How a value DeepSpeed's default filled is marked (SourcePlace::how): Note [DeepSpeed's clipping default].
constexpr const char* kDeepSpeedDefault = "DeepSpeed's default, not written";

std::string place_prefix(const std::string& file, TextPosition at) {
  return at.line > 0 ? fmt::format("{}:{}:{}:", file, at.line, at.column) : file + ":";
}

// A --set assignment's KEY and VALUE, trimmed; nullopt without '='.
std::optional<std::pair<std::string, std::string>> split_assignment(std::string_view assignment) {
  const size_t equals = assignment.find('=');
  if (equals == std::string_view::npos) return std::nullopt;
  return std::make_pair(trim(assignment.substr(0, equals)), trim(assignment.substr(equals + 1)));
}

// The values of --set assignments the DeepSpeed mapping depends on. A malformed assignment is skipped here:
// apply_override() reports it.
ImportOverrides import_overrides_from(const std::vector<std::string>& assignments) {
  ImportOverrides overrides;
  for (const std::string& assignment : assignments) {
    const auto split = split_assignment(assignment);
    if (!split) continue;
    const auto& [path, value] = *split;
    auto literal = parse_toml_literal(value);
    const toml::node* node = literal ? literal->get(kLiteralKey) : nullptr;
    if (path == "zero.stage" && node && node->is_integer()) overrides.stage = node->as_integer()->get();
    const std::string text = node && node->is_string() ? node->as_string()->get() : value;
    if (path == "zero.offload_optimizer.device") overrides.optimizer_device = text;
    if (path == "zero.offload_param.device") overrides.param_device = text;
    if (path == "fp16.enabled" && node && node->is_boolean()) overrides.fp16_enabled = node->as_boolean()->get();
  }
  return overrides;
}

// A DeepSpeed JSON config mapped onto zhost's tree (Note [DeepSpeed JSON] in docs/config.md).
void load_deepspeed_json(DocumentData& data, std::string_view text, const std::vector<std::string>& overrides) {
  JsonConfig json = read_json_config(text, data.source_name);
  DeepSpeedImport imported = import_deepspeed(json, import_overrides_from(overrides));
  data.deepspeed = true;
  data.root = std::move(imported.root);
  for (const auto& [path, at] : imported.positions) data.places[path] = SourcePlace{data.source_name, at};
  data.load_errors = std::move(json.duplicate_keys);
  for (const auto& record : imported.records) {
    if (record.kind == ImportRecord::Kind::Refused) {
      data.load_errors.push_back(place_prefix(data.source_name, record.at) + " " + record.text);
    }
  }
  data.import_records = std::move(imported.records);
}

// Copies the companion's tables and values into `into`, recording where each came from.
void merge_table(DocumentData& data, toml::table& into, const toml::table& from, const std::string& prefix,
                 const std::string& file) {
  for (auto&& [key, node] : from) {
    const std::string path = join_path(prefix, key.str());
    const TextPosition at{static_cast<int64_t>(node.source().begin.line),
                          static_cast<int64_t>(node.source().begin.column)};
    toml::node* existing = into.get(key.str());
    if (node.is_table() && (!existing || existing->is_table())) {
      if (!existing) existing = &into.insert(key.str(), toml::table{}).first->second;
      data.places.emplace(path, SourcePlace{file, at});
      merge_table(data, *existing->as_table(), *node.as_table(), path, file);
      continue;
    }
    if (existing) {
      auto first = data.places.find(path);
      data.load_errors.push_back(fmt::format("{} {} is set here and {}; keep one of them", place_prefix(file, at), path,
                                             first == data.places.end()
                                                 ? std::string("in the JSON")
                                                 : "at " + place_prefix(first->second.file, first->second.at)));
      continue;
    }
    into.insert(key.str(), node);
    data.places[path] = SourcePlace{file, at};
  }
}

// Where a value already in the document came from, for override messages.
std::string where_set(const DocumentData& data, const std::string& path, const toml::node& node) {
  auto record = data.overrides.find(path);
  if (record != data.overrides.end()) return "by --set " + text::excerpt(record->second.assignment);
  if (auto place = data.places.find(path); place != data.places.end()) {
    return "at " + place_prefix(place->second.file, place->second.at);
  }
  return fmt::format("at {}:{}", data.source_name, node.source().begin.line);
}

}  // namespace

Document::Document() : data_(std::make_unique<DocumentData>()) {}
Document::~Document() = default;
Document::Document(const Document& other) : data_(std::make_unique<DocumentData>(*other.data_)) {}
Document& Document::operator=(const Document& other) {
  if (this != &other) data_ = std::make_unique<DocumentData>(*other.data_);
  return *this;
}
Document::Document(Document&& other) noexcept = default;
Document& Document::operator=(Document&& other) noexcept = default;

Document Document::load_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ignored;
  const auto status = std::filesystem::status(path, ignored);
  if (std::filesystem::is_directory(status)) {
    fail_usage("{}: is a directory, not a config file; name a .toml file", path);
  }
  // Reading a device (/dev/zero) or a pipe could take forever: a config is a regular file.
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    fail_usage("{}: is not a regular file (a device, pipe or socket); name a .toml file", path);
  }
  if (std::filesystem::exists(status) && std::filesystem::file_size(path, ignored) > kMaxConfigBytes) {
    fail_usage("{}: is {} bytes, too large for a config (at most {} bytes); name the job's .toml file", path,
               std::filesystem::file_size(path, ignored), kMaxConfigBytes);
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) fail_usage("{}: cannot read the config file ({}); check the path", path, std::strerror(errno));
  std::ostringstream text;
  text << file.rdbuf();
  spdlog::debug("config: read {}", path);
  return parse(text.str(), path, overrides);
}

Document Document::parse(std::string_view toml_text, const std::string& source_name,
                         const std::vector<std::string>& overrides) {
  Document document;
  document.data_->source_name = source_name;
  if (looks_like_json(toml_text)) {
    load_deepspeed_json(*document.data_, toml_text, overrides);
    return document;
  }
  try {
    document.data_->root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& error) {
    throw UsageError(describe_parse_error(toml_text, error, source_name));
  }
  return document;
}

void Document::apply_override(std::string_view assignment) {
  const std::string shown = text::excerpt(assignment);  // in messages
  const auto split = split_assignment(assignment);
  if (!split) fail_usage("--set {}: expected KEY=VALUE, e.g. --set zero.stage=2", shown);
  const auto& [path, value_text] = *split;
  const std::string shown_path = text::excerpt(path);
  if (!is_valid_path(path)) {
    fail_usage(
        "--set {}: '{}' is not a dotted key path; write names of letters, digits, _ and - joined by dots, "
        "e.g. zero.offload_optimizer.device",
        shown, shown_path);
  }
  std::vector<std::string> segments = split_path(path);

  auto literal = parse_toml_literal(value_text);
  if (literal && literal->get(kLiteralKey)->is_table()) {
    fail_usage("--set {}: the value is a table; set its keys one at a time, e.g. --set {}.KEY=VALUE", shown,
               shown_path);
  }

  toml::table* table = &data_->root;
  std::string table_path;
  for (size_t i = 0; i + 1 < segments.size(); ++i) {
    table_path += (i ? "." : "") + segments[i];
    toml::node* node = table->get(segments[i]);
    if (!node) node = &table->insert(segments[i], toml::table{}).first->second;
    if (!node->is_table()) {
      fail_usage("--set {}: {} is already a value (set {}), not a table, so it cannot hold {}", shown,
                 text::excerpt(table_path), where_set(*data_, table_path, *node), shown_path);
    }
    table = node->as_table();
  }
  const std::string& leaf = segments.back();
  if (toml::node* existing = table->get(leaf); existing && existing->is_table()) {
    fail_usage("--set {}: {} is a table; set one of its keys instead, e.g. --set {}.KEY=VALUE", shown, shown_path,
               shown_path);
  }

  if (literal) {
    table->insert_or_assign(leaf, *literal->get(kLiteralKey));
  } else {
    table->insert_or_assign(leaf, value_text);  // not TOML: a bare string such as cpu
  }
  data_->overrides[path] = OverrideRecord{std::string(assignment), value_text, data_->overrides_applied++};
  spdlog::debug("config: --set {}", shown);
}

void Document::apply_overrides(const std::vector<std::string>& assignments) {
  for (const auto& assignment : assignments) apply_override(assignment);
}

void Document::add_companion(const std::string& toml_path) {
  Document companion = load_file(toml_path);
  if (companion.is_deepspeed_json()) {
    fail_usage("{}: a companion config holds zhost's own keys in TOML (model, data, steps, ...), not JSON", toml_path);
  }
  merge_table(*data_, data_->root, companion.data_->root, "", toml_path);
}

const std::string& Document::source_name() const { return data_->source_name; }

bool Document::is_deepspeed_json() const { return data_->deepspeed; }

namespace {
// DeepSpeed's activation-checkpointing refinements that zhost reads only with activation_checkpointing.enabled.
constexpr const char* kCheckpointingRefinements[] = {"activation_checkpointing.cpu_checkpointing",
                                                     "activation_checkpointing.contiguous_memory_optimization",
                                                     "activation_checkpointing.number_checkpoints"};

bool checkpointing_on(const DocumentData& data) {
  const toml::node* enabled = data.root.at_path("activation_checkpointing.enabled").node();
  return enabled && enabled->is_boolean() && enabled->as_boolean()->get();
}

// A refinement the JSON wrote and no --set replaced, with zhost's switch off: it changes nothing, as in DeepSpeed.
bool inert_refinement(const DocumentData& data, const ImportRecord& record) {
  if (record.kind != ImportRecord::Kind::Mapped || data.overrides.count(record.zhost_path) || checkpointing_on(data))
    return false;
  return std::find(std::begin(kCheckpointingRefinements), std::end(kCheckpointingRefinements), record.zhost_path) !=
         std::end(kCheckpointingRefinements);
}
}  // namespace

std::vector<std::string> Document::notes() const {
  std::vector<std::string> lines;
  for (const auto& record : data_->import_records) {
    const std::string place = place_prefix(data_->source_name, record.at);
    if (record.kind == ImportRecord::Kind::Auto) {
      const toml::node* node = data_->root.at_path(record.zhost_path).node();
      auto filled_place = data_->places.find(record.zhost_path);
      const bool hf_default = !record.hf_default.empty() &&
                              (!node || (filled_place != data_->places.end() && !filled_place->second.how.empty()));
      if (hf_default) {
        lines.push_back(fmt::format(
            "{} note: {} = \"auto\": {} = {}, HF Trainer's default ({}); give yours with "
            "--set {}=VALUE",
            place, record.ds_path, record.zhost_path, record.hf_default, record.hf_argument, record.zhost_path));
      } else if (node) {
        std::string source = where_set(*data_, record.zhost_path, *node);
        if (!source.empty() && source.back() == ':') source.pop_back();
        lines.push_back(fmt::format("{} note: {} = \"auto\": {} = {}, set {}", place, record.ds_path, record.zhost_path,
                                    text::excerpt(value_literal(*node), 60), source));
      }
      continue;
    }
    if (record.kind == ImportRecord::Kind::Default) {
      // Note [DeepSpeed's clipping default]: noted only when DeepSpeed's value was taken (no argument gave one).
      const toml::node* node = data_->root.at_path(record.zhost_path).node();
      auto filled = data_->places.find(record.zhost_path);
      if (!node || (filled != data_->places.end() && filled->second.how == kDeepSpeedDefault))
        lines.push_back(place + " note: " + record.text);
      continue;
    }
    if (inert_refinement(*data_, record)) {
      lines.push_back(fmt::format(
          "{} note: {}: DeepSpeed reads it only when the model calls its checkpointing API, and zhost only with "
          "activation_checkpointing.enabled = true, which is off here: it changes nothing (--set "
          "activation_checkpointing.enabled=true to use it)",
          place, record.ds_path));
      continue;
    }
    if (record.kind == ImportRecord::Kind::Refused || record.text.empty()) continue;
    const char* kind = record.kind == ImportRecord::Kind::Mapped ? " warning: " : " note: ";
    lines.push_back(place + kind + record.text);
  }
  return lines;
}

std::vector<std::string> Document::load_errors() const {
  std::vector<std::string> lines = data_->load_errors;
  if (data_->deepspeed) {
    // DeepSpeed refuses a config without a batch size (it asserts that train_batch_size or
    // train_micro_batch_size_per_gpu is set); zhost would otherwise train at its default micro batch of 1.
    bool batch = false;
    for (const char* key : {"train_batch_size", "train_micro_batch_size_per_gpu"}) {
      batch = batch || data_->root.at_path(key).node() != nullptr ||
              std::any_of(data_->import_records.begin(), data_->import_records.end(),
                          [&](const ImportRecord& record) { return record.ds_path == key; });
    }
    if (!batch) {
      lines.push_back(fmt::format(
          "{}: the file sets neither train_batch_size nor train_micro_batch_size_per_gpu, which DeepSpeed refuses; "
          "write one (e.g. \"train_micro_batch_size_per_gpu\": 8) or give it with --set "
          "train_micro_batch_size_per_gpu=N",
          data_->source_name));
    }
  }
  for (const auto& record : data_->import_records) {
    if (record.kind == ImportRecord::Kind::Auto && record.hf_default.empty() &&
        !data_->root.at_path(record.zhost_path).node()) {
      lines.push_back(place_prefix(data_->source_name, record.at) + " " + record.text);
    }
  }
  return lines;
}

std::vector<std::string> Document::hf_defaults_taken() const {
  std::vector<std::string> taken;
  for (const auto& record : data_->import_records) {
    if (record.kind == ImportRecord::Kind::Auto && !record.hf_default.empty() &&
        !data_->root.at_path(record.zhost_path).node()) {
      taken.push_back(record.zhost_path + " = " + record.hf_default);
    }
  }
  return taken;
}

void Document::take_hf_defaults() {
  for (const auto& record : data_->import_records) {
    const bool auto_default = record.kind == ImportRecord::Kind::Auto && !record.hf_default.empty();
    const bool ds_default = record.kind == ImportRecord::Kind::Default && !record.ds_default.empty();
    if (!(auto_default || ds_default) || data_->root.at_path(record.zhost_path).node()) continue;
    const SourcePlace place{data_->source_name, record.at, ds_default ? kDeepSpeedDefault : "auto: HF Trainer default"};
    const std::string& value = ds_default ? record.ds_default : record.hf_default;
    toml::table* table = &data_->root;
    std::string table_path;
    const std::vector<std::string> segments = split_path(record.zhost_path);
    for (size_t i = 0; i + 1 < segments.size(); ++i) {
      table_path = join_path(table_path, segments[i]);
      toml::node* node = table->get(segments[i]);
      if (!node) {
        node = &table->insert(segments[i], toml::table{}).first->second;
        data_->places.emplace(table_path, SourcePlace{data_->source_name, record.at, ""});
      }
      table = node->as_table();
      if (!table) break;  // a value where the path needs a table: validate() reports the file's value
    }
    auto literal = parse_toml_literal(value);
    if (!table || !literal) continue;
    table->insert_or_assign(segments.back(), *literal->get(kLiteralKey));
    data_->places[record.zhost_path] = place;
  }
}

void Document::settle_deepspeed_json() {
  take_hf_defaults();
  for (const auto& record : data_->import_records) {
    if (!inert_refinement(*data_, record)) continue;
    if (toml::table* table = data_->root.at_path("activation_checkpointing").as_table())
      table->erase(last_segment(record.zhost_path));
  }
}

bool Document::contains(const std::string& path) const {
  const toml::node* node = data_->root.at_path(path).node();
  return node && !node->is_table();
}

std::optional<ConfigValue> Document::peek(const std::string& path) const {
  const toml::node* node = data_->root.at_path(path).node();
  if (!node) return std::nullopt;
  if (auto* value = node->as_boolean()) return ConfigValue(value->get());
  if (auto* value = node->as_integer()) return ConfigValue(value->get());
  if (auto* value = node->as_floating_point()) return ConfigValue(value->get());
  if (auto* value = node->as_string()) return ConfigValue(value->get());
  auto* array = node->as_array();
  if (!array) return std::nullopt;
  if (array->is_homogeneous(toml::node_type::string) || array->empty()) {
    std::vector<std::string> items;
    for (const auto& item : *array) items.push_back(item.as_string()->get());
    return ConfigValue(std::move(items));
  }
  std::vector<double> numbers;
  for (const auto& item : *array) {
    if (auto* integer = item.as_integer()) {
      numbers.push_back(static_cast<double>(integer->get()));
    } else if (auto* floating = item.as_floating_point()) {
      numbers.push_back(floating->get());
    } else {
      return std::nullopt;
    }
  }
  return ConfigValue(std::move(numbers));
}

}  // namespace zhost::config
