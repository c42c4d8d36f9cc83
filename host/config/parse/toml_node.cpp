// host/config/parse/toml_node.cpp: TOML values as text (for messages) and TOML literal text as values.
#include "host/config/parse/toml_node.hpp"

#include "host/config/parse/value.hpp"
#include "host/core/text.hpp"

namespace zhost::config {

std::string scalar_literal(const toml::node& node) {
  if (auto* text = node.as_string()) return to_toml_literal(text->get());
  if (auto* integer = node.as_integer()) return to_toml_literal(integer->get());
  if (auto* floating = node.as_floating_point()) return to_toml_literal(floating->get());
  if (auto* boolean = node.as_boolean()) return to_toml_literal(boolean->get());
  return {};
}

std::optional<toml::table> parse_toml_literal(std::string_view text) {
  std::string document = std::string(kLiteralKey) + " = ";
  document += text;
  try {
    toml::table table = toml::parse(document);
    if (table.size() != 1 || !table.contains(kLiteralKey)) return std::nullopt;
    return table;
  } catch (const toml::parse_error&) {
    return std::nullopt;
  }
}

std::string value_literal(const toml::node& node) {
  if (auto* array = node.as_array()) {
    std::string items;
    for (const auto& item : *array) items += (items.empty() ? "" : ", ") + value_literal(item);
    return "[" + items + "]";
  }
  if (node.is_table()) return "{...}";
  return scalar_literal(node);
}

std::string describe_node(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "string " + text::excerpt(scalar_literal(node));
    case toml::node_type::integer:
      return "integer " + scalar_literal(node);
    case toml::node_type::floating_point:
      return "float " + scalar_literal(node);
    case toml::node_type::boolean:
      return "boolean " + scalar_literal(node);
    case toml::node_type::array:
      return "a list";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time:
      return "a date/time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

}  // namespace zhost::config
