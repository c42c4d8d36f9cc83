// host/config/parse/toml_node.hpp: internal to host/config (toml++ stays behind it and the other internal
// headers): TOML values as text and back, for messages and for --set. Reading a node as a key's typed value is
// the schema's (host/config/schema/convert_node.hpp); the parsed document's data is the document's
// (host/config/document/document_data.hpp).
#pragma once

#include <toml++/toml.h>

#include <optional>
#include <string>
#include <string_view>

namespace zhost::config {

// TOML literal text ("5e8", "[0.9, 0.95]", "\"cpu\"") parsed into a table holding it under the key "v";
// nullopt when the text is not exactly one TOML value.
std::optional<toml::table> parse_toml_literal(std::string_view text);
inline constexpr const char* kLiteralKey = "v";

// TOML text of a string, number or boolean node; empty for anything else.
std::string scalar_literal(const toml::node& node);

// The value as TOML writes it ("3", "\"cpu\"", "[0.9, 0.999]"), for messages.
std::string value_literal(const toml::node& node);

// "integer 3", "string \"cpu\"", "a table", ... for messages.
std::string describe_node(const toml::node& node);

}  // namespace zhost::config
