// host/config/parse/value.cpp: names and TOML spelling of config values.
#include "host/config/parse/value.hpp"

#include <fmt/format.h>

#include <cmath>

namespace zhost::config {
namespace {

std::string float_literal(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  std::string text = fmt::format("{}", value);  // shortest text that reads back as the same double
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}

std::string string_literal(const std::string& value) {
  std::string out = "\"";
  for (char c : value) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          out += fmt::format("\\u{:04X}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

template <typename T, typename Format>
std::string list_literal(const std::vector<T>& items, Format format_item) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += format_item(items[i]);
  }
  return out + "]";
}

}  // namespace

const char* type_name(ValueType type) {
  switch (type) {
    case ValueType::Bool:
      return "bool";
    case ValueType::Int:
      return "int";
    case ValueType::Float:
      return "float";
    case ValueType::String:
      return "string";
    case ValueType::FloatList:
      return "float list";
    case ValueType::StringList:
      return "string list";
  }
  return "unknown";
}

ValueType type_of(const ConfigValue& value) { return static_cast<ValueType>(value.index()); }

std::string to_toml_literal(const ConfigValue& value) {
  switch (type_of(value)) {
    case ValueType::Bool:
      return std::get<bool>(value) ? "true" : "false";
    case ValueType::Int:
      return std::to_string(std::get<int64_t>(value));
    case ValueType::Float:
      return float_literal(std::get<double>(value));
    case ValueType::String:
      return string_literal(std::get<std::string>(value));
    case ValueType::FloatList:
      return list_literal(std::get<std::vector<double>>(value), float_literal);
    case ValueType::StringList:
      return list_literal(std::get<std::vector<std::string>>(value), string_literal);
  }
  return {};
}

}  // namespace zhost::config
