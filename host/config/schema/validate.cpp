// host/config/schema/validate.cpp: walks the TOML tree against the schema and builds the ResolvedConfig.
#include "host/config/schema/validate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>
#include <tuple>

#include "host/config/document/document_data.hpp"
#include "host/config/parse/key_path.hpp"
#include "host/config/parse/toml_node.hpp"
#include "host/config/schema/convert_node.hpp"
#include "host/core/text.hpp"

namespace zhost::config {
namespace {

std::string summarize(const std::vector<std::string>& errors) {
  ZHOST_ASSERT(!errors.empty());
  size_t more = errors.size() - 1;
  if (more == 0) return errors.front();
  return fmt::format("{} (and {} more error{})", errors.front(), more, more == 1 ? "" : "s");
}

// True when `typed` reads as a misspelling of `known` rather than another setting: the names have the same
// words but one, and that word is close to its counterpart (stage3_model_persistence_threshold is not a
// misspelling of stage3_param_persistence_threshold: "model" and "param" are different words).
std::vector<std::string> words(const std::string& name) {
  std::vector<std::string> out(1);
  for (char c : name) {
    if (c == '_')
      out.emplace_back();
    else
      out.back() += c;
  }
  return out;
}

bool same_words_but_a_typo(const std::string& typed, const std::string& known) {
  const std::vector<std::string> a = words(typed), b = words(known);
  if (a.size() != b.size()) return text::edit_distance(typed, known) <= 2;
  size_t differing = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    ++differing;
    if (text::edit_distance(a[i], b[i]) * 2 > std::max(a[i].size(), b[i].size())) return false;
  }
  return differing <= 1;
}

// The known name an unknown one is a misspelling of, trying in turn: the DeepSpeed -> zhost table renames,
// keys of the same table, and the same key under a misspelled table (or at the top level). Never a key of
// another known table: a setting of one table is not a setting of another (offload_optimizer.buffer_count
// is not offload_param.buffer_count).
std::string suggest(std::string path, const std::vector<std::string>& known,
                    const std::vector<std::pair<std::string, std::string>>& rename_hints) {
  auto is_known = [&known](const std::string& candidate) {
    return std::find(known.begin(), known.end(), candidate) != known.end();
  };
  for (const auto& [old_prefix, new_prefix] : rename_hints) {
    if (!is_within(path, old_prefix)) continue;
    path = new_prefix + path.substr(old_prefix.size());
    if (is_known(path)) return path;
  }
  std::string table = parent_path(path);
  std::string leaf = last_segment(path);
  std::vector<std::string> siblings;
  bool table_known = table.empty();
  for (const auto& candidate : known) {
    if (parent_path(candidate) == table) siblings.push_back(candidate);
    table_known = table_known || is_within(candidate, table);
  }
  if (std::string match = text::closest_match(path, siblings);
      !match.empty() && same_words_but_a_typo(leaf, last_segment(match))) {
    return match;
  }
  // A key under a misspelled table, or at the top level instead of its table: the one key of that name.
  if (!table_known || table.empty()) {
    std::vector<std::string> same_leaf;
    for (const auto& candidate : known) {
      if (last_segment(candidate) == leaf) same_leaf.push_back(candidate);
    }
    if (same_leaf.size() == 1) return same_leaf.front();
    if (std::string match = text::closest_match(path, same_leaf); !match.empty()) return match;
  }
  return {};
}

}  // namespace

ConfigErrors::ConfigErrors(std::vector<std::string> errors)
    : UsageError(summarize(errors)), errors_(std::move(errors)) {}

namespace detail {

class ResolvedConfigBuilder {
 public:
  ResolvedConfigBuilder(const Document& document, const Schema& schema, const InactiveKeys& inactive)
      : data_(document.data()), load_errors_(document.load_errors()), schema_(schema), inactive_(inactive) {
    for (const KeySpec* spec : schema_.keys()) known_keys_.push_back(spec->path);
    known_tables_ = schema_.tables();
    for (const auto& [path, reason] : inactive_) {
      if (!schema_.contains(path)) known_keys_.push_back(path);
      for (std::string table = parent_path(path); !table.empty(); table = parent_path(table)) {
        known_tables_.push_back(table);
      }
    }
    result_.source_name_ = data_.source_name;
    result_.inactive_ = inactive_;
    result_.tiers_ = schema_.tier_facts();
  }

  ResolvedConfig build() {
    // Refusals found while reading the file (a DeepSpeed JSON's keys, a companion's clashes) join the rest.
    for (const auto& line : load_errors_) errors_.push_back(PendingError{load_error_order(line), line});
    walk(data_.root, "");
    fill_unset_keys();
    run_rules();
    if (!errors_.empty()) {
      std::stable_sort(errors_.begin(), errors_.end(),
                       [](const PendingError& a, const PendingError& b) { return a.order < b.order; });
      std::vector<std::string> lines;
      for (auto& error : errors_) lines.push_back(std::move(error.text));
      throw ConfigErrors(std::move(lines));
    }
    return std::move(result_);
  }

 private:
  // Errors are listed in file order, then --set order, then those without a place.
  using ErrorOrder = std::tuple<int, int64_t, int64_t>;
  struct PendingError {
    ErrorOrder order;
    std::string text;
  };

  void walk(const toml::table& table, const std::string& table_path) {
    for (auto&& [key, node] : table) {
      std::string path = join_path(table_path, key.str());
      ValueOrigin origin = origin_of(path, node);
      if (auto inactive = inactive_.find(path); inactive != inactive_.end()) {
        if (data_.deepspeed) {
          // DeepSpeed ignores a setting the chosen stage or tier does not read: so does its JSON here.
          result_.notes_.push_back(
              fmt::format("{} note: {} is not read by this config: {} (DeepSpeed ignores it "
                          "too)",
                          origin.location(data_.source_name), path, inactive->second));
          continue;
        }
        report(origin, fmt::format("{} is set, but {}; remove it", path, inactive->second));
      } else if (const KeySpec* spec = schema_.find(path)) {
        read_value(path, node, *spec, origin);
      } else if (is_known_table(path)) {
        if (auto* subtable = node.as_table()) {
          walk(*subtable, path);
        } else {
          report(origin, fmt::format("{} is a table of settings, not a value; write [{}] and set its keys below it",
                                     path, path));
        }
      } else {
        report(origin, unknown_name_message(path, node.is_table()));
      }
    }
  }

  // "unknown key 'zero.stgae'; did you mean 'zero.stage'? (or remove it)", or the same for a table.
  std::string unknown_name_message(const std::string& path, bool is_table) const {
    auto shown = [is_table](const std::string& name) {
      return is_table ? "[" + text::excerpt(name) + "]" : "'" + text::excerpt(name) + "'";
    };
    const char* what = is_table ? "table" : "key";
    std::string match = suggest(path, is_table ? known_tables_ : known_keys_, schema_.rename_hints());
    if (match.empty()) {
      return fmt::format("unknown {} {}; remove it (`zhost config check` prints every known key)", what, shown(path));
    }
    return fmt::format("unknown {} {}; did you mean {}? (or remove it)", what, shown(path), shown(match));
  }

  bool is_known_table(const std::string& path) const {
    return std::find(known_tables_.begin(), known_tables_.end(), path) != known_tables_.end();
  }

  void read_value(const std::string& path, const toml::node& node, const KeySpec& spec, const ValueOrigin& origin) {
    seen_.insert(path);
    Conversion conversion;
    auto record = data_.overrides.find(path);
    if (record != data_.overrides.end() && spec.type == ValueType::String && !node.is_string()) {
      // --set run.name=2024: a string key takes the override's text as written.
      conversion = convert_node(toml::value<std::string>(record->second.value_text), spec);
    } else {
      conversion = convert_node(node, spec);
    }
    if (!conversion.value) {
      failed_.insert(path);
      report(origin, conversion.problem);
      return;
    }
    add_entry(path, std::move(conversion.value), origin);
  }

  void fill_unset_keys() {
    for (const KeySpec* spec : schema_.keys()) {
      const std::string& path = spec->path;
      if (seen_.count(path) || inactive_.count(path)) continue;
      const auto& default_value = schema_.default_value(path);
      if (default_value || spec->optional) {
        add_entry(path, default_value, ValueOrigin{});
        continue;
      }
      failed_.insert(path);
      std::string table = parent_path(path);
      report(ValueOrigin{}, fmt::format("missing required key {}{}; add it {} or pass --set {}=VALUE", path,
                                        spec->doc.empty() ? "" : " (" + spec->doc + ")",
                                        table.empty() ? "at the top of the file" : "under [" + table + "]", path));
    }
  }

  void run_rules() {
    for (const ConfigRule& rule : schema_.rules()) {
      bool runnable = true;
      for (const auto& key : rule.keys) {
        if (!schema_.contains(key)) {
          fail("a config rule of {} reads undeclared key '{}' (a bug in {})", describe_owner(rule.owner), key,
               rule.owner);
        }
        runnable = runnable && !failed_.count(key) && !inactive_.count(key);
      }
      if (!runnable) continue;
      std::optional<std::string> problem = rule.check(result_);
      if (!problem) continue;
      ValueOrigin origin;
      for (const auto& key : rule.keys) {
        if (result_.has(key)) {
          origin = result_.entries_.at(key).origin;
          break;
        }
      }
      if (rule.warning) {
        result_.warnings_.push_back(origin.location(data_.source_name) + " warning: " + *problem);
        continue;
      }
      report(origin, *problem);
    }
  }

  void add_entry(const std::string& path, std::optional<ConfigValue> value, const ValueOrigin& origin) {
    ResolvedConfig::Entry& entry = result_.entries_[path];
    entry.type = schema_.find(path)->type;
    entry.value = std::move(value);
    entry.origin = origin;
    entry.owners = schema_.owners(path);
    entry.readers = schema_.readers(path);
  }

  ValueOrigin origin_of(const std::string& path, const toml::node& node) const {
    ValueOrigin origin;
    if (const OverrideRecord* record = override_within(path, node)) {
      origin.kind = ValueOrigin::Kind::Override;
      origin.assignment = record->assignment;
    } else if (auto place = data_.places.find(path); place != data_.places.end()) {
      origin.kind = ValueOrigin::Kind::File;
      origin.file = place->second.file;
      origin.line = place->second.at.line;
      origin.column = place->second.at.column;
      origin.show_column = true;
      origin.how = place->second.how;
    } else {
      origin.kind = ValueOrigin::Kind::File;
      origin.file = data_.source_name;
      origin.line = node.source().begin.line;
      origin.column = node.source().begin.column;
    }
    return origin;
  }

  // The --set that wrote `path`, or for a table that only overrides created (it has no place in the
  // file), the first --set beneath it; nullptr when the node is from the file.
  const OverrideRecord* override_within(const std::string& path, const toml::node& node) const {
    if (auto record = data_.overrides.find(path); record != data_.overrides.end()) return &record->second;
    if (!node.is_table() || node.source().begin.line != 0) return nullptr;
    const OverrideRecord* first = nullptr;
    for (const auto& [written, record] : data_.overrides) {
      if (is_within(written, path) && (!first || record.sequence < first->sequence)) first = &record;
    }
    return first;
  }

  void report(const ValueOrigin& origin, const std::string& message) {
    ErrorOrder order{2, 0, 0};
    if (origin.kind == ValueOrigin::Kind::File) order = {0, origin.line, origin.column};
    if (origin.kind == ValueOrigin::Kind::Override) {
      order = {1, static_cast<int64_t>(override_sequence(origin.assignment)), 0};
    }
    errors_.push_back(PendingError{order, origin.location(data_.source_name) + " " + message});
  }

  // "FILE:LINE:COL: ..." sorts with the file's other errors.
  ErrorOrder load_error_order(const std::string& line) const {
    int64_t row = 0, column = 0;
    const std::string prefix = data_.source_name + ":";
    if (line.rfind(prefix, 0) == 0 && std::sscanf(line.c_str() + prefix.size(), "%ld:%ld", &row, &column) >= 1) {
      return {0, row, column};
    }
    return {0, INT64_MAX, 0};
  }

  size_t override_sequence(const std::string& assignment) const {
    for (const auto& [path, record] : data_.overrides) {
      if (record.assignment == assignment) return record.sequence;
    }
    return 0;
  }

  const DocumentData& data_;
  std::vector<std::string> load_errors_;  // Document::load_errors(): the file's refusals, settled "auto"s
  const Schema& schema_;
  const InactiveKeys& inactive_;
  std::vector<std::string> known_keys_;    // declared or inactive keys, for suggestions
  std::vector<std::string> known_tables_;  // tables that hold such keys
  std::set<std::string> seen_;             // keys the document sets
  std::set<std::string> failed_;           // keys with an error (their rules do not run)
  std::vector<PendingError> errors_;
  ResolvedConfig result_;
};

}  // namespace detail

ResolvedConfig validate(const Document& document, const Schema& schema, const InactiveKeys& inactive) {
  if (document.is_deepspeed_json()) {
    // HF "auto"s nothing fills take HF Trainer's defaults (Note [HF's "auto"]), and so on, in a copy: the
    // caller's document stays as written.
    Document settled = document;
    settled.settle_deepspeed_json();
    return detail::ResolvedConfigBuilder(settled, schema, inactive).build();
  }
  return detail::ResolvedConfigBuilder(document, schema, inactive).build();
}

}  // namespace zhost::config
