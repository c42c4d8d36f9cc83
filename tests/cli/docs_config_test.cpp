// tests/cli/docs_config_test.cpp: docs/config.md's key tables against the binary, so that they cannot
// drift apart: every default the tables state equals the default the host's schema declares (host keys)
// or `zhost plugins --json` reports (zhost's own plugins' keys), and every host key has a row.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "host/config/document/document.hpp"
#include "host/config/schema/host_schema.hpp"
#include "tests/cli/cli_support.hpp"
#include "tests/support/scratch_dir.hpp"

namespace {

using zhost::config::ConfigValue;

struct DocRow {
  int line = 0;
  std::string key;
  std::string default_text;  // the cell without its backquotes: "0.01", "\"gpt\"", "unset"
};

std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::string cell;
  for (size_t i = 1; i < row.size(); ++i) {  // after the leading '|'
    if (row[i] == '|') {
      size_t begin = cell.find_first_not_of(' '), end = cell.find_last_not_of(' ');
      out.push_back(begin == std::string::npos ? "" : cell.substr(begin, end - begin + 1));
      cell.clear();
    } else {
      cell += row[i];
    }
  }
  return out;
}

std::string unquote(const std::string& cell) {
  if (cell.size() >= 2 && cell.front() == '`' && cell.back() == '`') return cell.substr(1, cell.size() - 2);
  return cell;
}

// Every row of every table whose header has a `key` and a `default` column.
std::vector<DocRow> documented_defaults() {
  std::ifstream file(std::string(ZHOST_SOURCE_DIR) + "/docs/config.md");
  std::vector<DocRow> rows;
  std::string line;
  int number = 0, key_column = -1, default_column = -1;
  while (std::getline(file, line)) {
    ++number;
    if (line.empty() || line[0] != '|') {
      key_column = default_column = -1;
      continue;
    }
    std::vector<std::string> row = cells(line);
    if (key_column < 0) {  // a header
      for (size_t i = 0; i < row.size(); ++i) {
        if (row[i] == "key") key_column = static_cast<int>(i);
        if (row[i] == "default") default_column = static_cast<int>(i);
      }
      if (key_column < 0 || default_column < 0) key_column = default_column = -2;  // not a key table
      continue;
    }
    if (key_column == -2 || row.size() <= static_cast<size_t>(std::max(key_column, default_column))) continue;
    if (row[0].rfind("---", 0) == 0 || row[0].rfind("--", 0) == 0) continue;  // the separator
    rows.push_back({number, unquote(row[key_column]), unquote(row[default_column])});
  }
  return rows;
}

// A TOML literal as a value, with numbers as doubles so that 5e7 equals 50000000.
std::optional<ConfigValue> normalized(const std::string& literal) {
  auto value = zhost::config::Document::parse("v = " + literal, "literal").peek("v");
  if (value && std::holds_alternative<int64_t>(*value))
    return ConfigValue(static_cast<double>(std::get<int64_t>(*value)));
  return value;
}

std::string shown(const std::optional<ConfigValue>& value) {
  return value ? zhost::config::to_toml_literal(*value) : "unset";
}

TEST(DocsConfig, EveryHostKeyHasARowWithTheSchemasDefault) {
  zhost::config::Schema schema;
  zhost::config::add_host_keys(schema);
  std::map<std::string, DocRow> documented;
  for (const auto& row : documented_defaults()) documented[row.key] = row;
  ASSERT_GT(documented.size(), 50u) << "docs/config.md's tables were not found";
  for (const auto* spec : schema.keys()) {
    auto row = documented.find(spec->path);
    if (row == documented.end()) {
      ADD_FAILURE() << "docs/config.md has no row for host key " << spec->path;
      continue;
    }
    const auto& declared = schema.default_value(spec->path);
    const auto& text = row->second.default_text;
    std::optional<ConfigValue> stated = text == "unset" ? std::nullopt : normalized(text);
    if (text != "unset") {
      ASSERT_TRUE(stated) << "docs/config.md:" << row->second.line << ": " << text;
    }
    const auto expected = declared ? normalized(zhost::config::to_toml_literal(*declared)) : std::nullopt;
    EXPECT_EQ(shown(stated), shown(expected))
        << "docs/config.md:" << row->second.line << ": " << spec->path << " is documented with default " << text
        << ", the schema declares " << shown(declared);
  }
}

TEST(DocsConfig, PluginKeyDefaultsAreThePluginsOwn) {
  zhost::testing::ScratchDir scratch;
  unsetenv("ZHOST_PLUGIN_PATH");
  auto result = zhost::testing::run_zhost(scratch.path(), "plugins --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::map<std::string, std::string> declared;  // key -> default literal
  const nlohmann::json listing = nlohmann::json::parse(result.out);
  for (const auto& plugin : listing["plugins"])
    for (const auto& key : plugin["config_keys"])
      if (!key["default"].is_null()) declared[key["key"].get<std::string>()] = key["default"].get<std::string>();
  zhost::config::Schema host;
  zhost::config::add_host_keys(host);
  int compared = 0;
  for (const auto& row : documented_defaults()) {
    if (host.contains(row.key)) continue;
    auto plugin_default = declared.find(row.key);
    if (plugin_default == declared.end()) {
      ADD_FAILURE() << "docs/config.md:" << row.line << ": " << row.key << " is declared neither by the host nor by "
                    << "a plugin found on the search path";
      continue;
    }
    EXPECT_EQ(shown(normalized(row.default_text)), shown(normalized(plugin_default->second)))
        << "docs/config.md:" << row.line << ": " << row.key << " is documented with default " << row.default_text
        << ", the plugin declares " << plugin_default->second;
    ++compared;
  }
  EXPECT_GT(compared, 10);
}

}  // namespace
