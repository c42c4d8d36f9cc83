// host/config/schema/convert_node.hpp: internal to host/config (it takes toml++ nodes): reading a TOML node as a
// key's typed value, range- and choice-checked, with a one-line explanation of every mismatch.
#pragma once

#include <toml++/toml.h>

#include <optional>
#include <string>

#include "host/config/parse/value.hpp"
#include "host/config/schema/schema.hpp"

namespace zhost::config {

// A node read as a key's value: either `value`, or a one-line `problem` that starts with the key's path
// and says what to write instead ("zero.stage must be an integer, got float 1.5; ...").
struct Conversion {
  std::optional<ConfigValue> value;
  std::string problem;
};
Conversion convert_node(const toml::node& node, const KeySpec& spec);

}  // namespace zhost::config
