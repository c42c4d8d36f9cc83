// tests/config/config_test_support.hpp: shared helpers for the config tests: a schema with the host's
// keys plus a few plugin-owned [zero] keys, and shortcuts to validate text and collect the errors.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "host/config/schema/host_schema.hpp"
#include "host/config/schema/validate.hpp"

namespace zhost::config::test_support {

inline constexpr const char* kSource = "train.toml";

inline KeySpec plugin_key(std::string path, ValueType type, std::optional<std::string> default_toml,
                          std::string owner) {
  KeySpec spec;
  spec.path = std::move(path);
  spec.type = type;
  spec.default_toml = std::move(default_toml);
  spec.doc = "test key";
  spec.owner = std::move(owner);
  return spec;
}

// The host's keys plus what stage1/stage2 would declare.
inline Schema host_and_stage_schema() {
  Schema schema;
  add_host_keys(schema);
  for (const char* owner : {"stage1", "stage2"}) {
    schema.add(plugin_key("zero.reduce_bucket_size", ValueType::Int, "5e8", owner));
  }
  schema.add(plugin_key("zero.overlap_comm", ValueType::Bool, "false", "stage2"));
  return schema;
}

inline ResolvedConfig resolve(const std::string& toml, const std::vector<std::string>& overrides = {},
                              const InactiveKeys& inactive = {}) {
  Document document = Document::parse(toml, kSource);
  document.apply_overrides(overrides);
  return validate(document, host_and_stage_schema(), inactive);
}

// Every error line that validating `toml` (with overrides) produces; fails the test when it validates.
inline std::vector<std::string> errors_of(const std::string& toml, const std::vector<std::string>& overrides = {},
                                          const InactiveKeys& inactive = {}) {
  try {
    resolve(toml, overrides, inactive);
  } catch (const ConfigErrors& errors) {
    return errors.errors();
  }
  ADD_FAILURE() << "expected the config to be rejected:\n" << toml;
  return {};
}

// The single error of a config with exactly one problem.
inline std::string error_of(const std::string& toml, const std::vector<std::string>& overrides = {},
                            const InactiveKeys& inactive = {}) {
  std::vector<std::string> errors = errors_of(toml, overrides, inactive);
  EXPECT_EQ(errors.size(), 1u) << ::testing::PrintToString(errors);
  return errors.empty() ? std::string() : errors.front();
}

// The message of the UsageError that `action` throws.
template <typename Action>
std::string usage_error_of(Action action) {
  try {
    action();
  } catch (const UsageError& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected a UsageError";
  return {};
}

}  // namespace zhost::config::test_support

namespace zhost::config::test_support {
inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
}  // namespace zhost::config::test_support
