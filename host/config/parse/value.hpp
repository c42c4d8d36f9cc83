// host/config/parse/value.hpp: the typed values a config key can hold, without any TOML library in sight.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace zhost::config {

// The type of a config key. The order matches ConfigValue's alternatives.
enum class ValueType { Bool, Int, Float, String, FloatList, StringList };

// One resolved value; alternative i holds ValueType i.
using ConfigValue = std::variant<bool, int64_t, double, std::string, std::vector<double>, std::vector<std::string>>;

// "bool", "int", "float", "string", "float list", "string list".
const char* type_name(ValueType type);

// The type a value holds.
ValueType type_of(const ConfigValue& value);

// The value as TOML literal text that parses back to the same value: true, 3, 0.5, 1e-08, "a\"b",
// [0.9, 0.999]. Floats always carry a '.' or an exponent so that they stay floats.
std::string to_toml_literal(const ConfigValue& value);

}  // namespace zhost::config
