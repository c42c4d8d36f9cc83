// host/config/schema/convert_node.cpp: reads TOML nodes as typed config values and explains every mismatch.
#include "host/config/schema/convert_node.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cmath>

#include "host/config/parse/key_path.hpp"
#include "host/config/parse/toml_node.hpp"
#include "host/core/text.hpp"

namespace zhost::config {
namespace {

// Doubles at or above this magnitude do not fit an int64_t.
constexpr double kInt64Limit = 9223372036854775808.0;
// Choice values this short get no did-you-mean by spelling, only by letter case.
constexpr size_t kShortestTypo = 3;

std::string lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

const char* expected_phrase(ValueType type) {
  switch (type) {
    case ValueType::Bool:
      return "true or false";
    case ValueType::Int:
      return "an integer";
    case ValueType::Float:
      return "a number";
    case ValueType::String:
      return "a string";
    case ValueType::FloatList:
      return "a list of numbers";
    case ValueType::StringList:
      return "a list of strings";
  }
  return "a value";
}

// A value the user could write for the key, for "write e.g. ..." hints.
std::string example_literal(const KeySpec& spec) {
  if (!spec.choices.empty() && spec.type == ValueType::String) return to_toml_literal(spec.choices.front());
  bool is_list = spec.type == ValueType::FloatList || spec.type == ValueType::StringList;
  if (spec.default_toml && !is_list) return *spec.default_toml;
  switch (spec.type) {
    case ValueType::Bool:
      return "true";
    case ValueType::Int:
      return "1";
    case ValueType::Float:
      return "0.5";
    case ValueType::String:
      return "\"text\"";
    case ValueType::FloatList:
      return "[0.9, 0.999]";
    case ValueType::StringList:
      return "[\"a\", \"b\"]";
  }
  return {};
}

std::string format_bound(double bound) { return fmt::format("{}", bound); }

std::string allowed_range(const KeySpec& spec) {
  std::string lower, upper;
  if (spec.min) lower = (spec.min_exclusive ? "greater than " : "of at least ") + format_bound(*spec.min);
  if (spec.max) upper = (spec.max_exclusive ? "below " : "at most ") + format_bound(*spec.max);
  if (spec.min && spec.max) {
    if (!spec.min_exclusive && !spec.max_exclusive) {
      return fmt::format("between {} and {}", format_bound(*spec.min), format_bound(*spec.max));
    }
    return fmt::format("{} and {}", spec.min_exclusive ? lower : format_bound(*spec.min) + " or more", upper);
  }
  if (spec.min) return lower;
  return spec.max_exclusive ? upper : "of " + upper;
}

// Reads one node (a whole key, or one item of a list key) and records the first problem.
class NodeReader {
 public:
  explicit NodeReader(const KeySpec& spec) : spec_(spec) {}

  const std::string& problem() const { return problem_; }

  std::optional<bool> read_bool(const toml::node& node, const std::string& label) {
    if (auto* value = node.as_boolean()) return value->get();
    return mismatch(node, label, ValueType::Bool);
  }

  std::optional<int64_t> read_int(const toml::node& node, const std::string& label) {
    std::optional<int64_t> result;
    if (auto* integer = node.as_integer()) {
      result = integer->get();
    } else if (auto* floating = node.as_floating_point()) {
      // DeepSpeed users write sizes as 5e8: accept floats with an integral value.
      double value = floating->get();
      if (!std::isfinite(value) || value != std::trunc(value)) {
        return fail(fmt::format("{} must be an integer, got {}; write a whole number such as {}", label,
                                to_toml_literal(value), whole_number_near(value)));
      }
      if (std::fabs(value) >= kInt64Limit) {
        return fail(fmt::format("{} = {} does not fit a 64-bit integer; write a smaller number", label,
                                to_toml_literal(value)));
      }
      result = static_cast<int64_t>(value);
    } else {
      return mismatch(node, label, ValueType::Int);
    }
    if (!in_range(static_cast<double>(*result), label, std::to_string(*result))) return std::nullopt;
    return result;
  }

  std::optional<double> read_float(const toml::node& node, const std::string& label) {
    std::optional<double> result;
    if (auto* floating = node.as_floating_point()) result = floating->get();
    if (auto* integer = node.as_integer()) result = static_cast<double>(integer->get());
    if (!result) return mismatch(node, label, ValueType::Float);
    // nan passes every comparison of a range check and inf every lower bound: refuse both here, for every key.
    if (!std::isfinite(*result)) {
      return fail(fmt::format("{} = {} is not a finite number; write a number such as {}", label,
                              to_toml_literal(*result),
                              spec_.type == ValueType::Float ? example_literal(spec_) : "0.5"));
    }
    if (!in_range(*result, label, to_toml_literal(*result))) return std::nullopt;
    return result;
  }

  std::optional<std::string> read_string(const toml::node& node, const std::string& label) {
    auto* value = node.as_string();
    if (!value) return mismatch(node, label, ValueType::String);
    if (!is_allowed_choice(value->get(), label)) return std::nullopt;
    return value->get();
  }

  template <typename Item, typename ReadItem>
  std::optional<std::vector<Item>> read_list(const toml::node& node, ValueType list_type, ReadItem read_item) {
    auto* array = node.as_array();
    if (!array) return mismatch(node, spec_.path, list_type);
    std::vector<Item> items;
    for (size_t i = 0; i < array->size(); ++i) {
      auto item = (this->*read_item)(*array->get(i), fmt::format("{}[{}]", spec_.path, i));
      if (!item) return std::nullopt;
      items.push_back(std::move(*item));
    }
    return items;
  }

 private:
  std::nullopt_t fail(std::string problem) {
    if (problem_.empty()) problem_ = std::move(problem);
    return std::nullopt;
  }

  static std::string whole_number_near(double value) {
    if (!std::isfinite(value)) return "1";
    double below = std::floor(value);
    return fmt::format("{} or {}", format_bound(below), format_bound(below + 1));
  }

  bool in_range(double value, const std::string& label, const std::string& value_text) {
    bool too_low = spec_.min && (spec_.min_exclusive ? value <= *spec_.min : value < *spec_.min);
    bool too_high = spec_.max && (spec_.max_exclusive ? value >= *spec_.max : value > *spec_.max);
    if (!too_low && !too_high) return true;
    fail(fmt::format("{} = {} is out of range; use a value {}", label, value_text, allowed_range(spec_)));
    return false;
  }

  bool is_allowed_choice(const std::string& value, const std::string& label) {
    if (spec_.choices.empty()) return true;
    std::string match;
    for (const auto& choice : spec_.choices) {
      if (choice == value) return true;
      if (lowercase(choice) == lowercase(value)) match = choice;  // DeepSpeed accepts "adamw" for AdamW
    }
    // Short values are left alone: "gpu" is one edit from "cpu" but means something else entirely.
    if (match.empty() && value.size() > kShortestTypo) match = text::closest_match(value, spec_.choices);
    fail(fmt::format("{} = {} is not a valid choice; choose one of: {}{}", label, text::excerpt(to_toml_literal(value)),
                     text::join(spec_.choices), match.empty() ? "" : " (did you mean '" + match + "'?)"));
    return false;
  }

  std::nullopt_t mismatch(const toml::node& node, const std::string& label, ValueType expected) {
    std::string problem = fmt::format("{} must be {}, got {}", label, expected_phrase(expected), describe_node(node));
    if (label == spec_.path) problem += "; " + fix_hint(node);
    return fail(std::move(problem));
  }

  // What to write instead: unquote a quoted number or boolean, quote a bare one meant as a string, else
  // an example of the right type.
  std::string fix_hint(const toml::node& node) const {
    std::string leaf = last_segment(spec_.path);
    if (spec_.type == ValueType::String && node.is_number()) {
      return fmt::format("put it in quotes: {} = \"{}\"", leaf, scalar_literal(node));
    }
    if (auto* text = node.as_string(); text && spec_.type != ValueType::String) {
      if (auto literal = parse_toml_literal(text->get())) {
        if (convert_node(*literal->get(kLiteralKey), spec_).value) {
          return fmt::format("remove the quotes: {} = {}", leaf, text::excerpt(text->get()));
        }
      }
    }
    return fmt::format("write e.g. {} = {}", leaf, example_literal(spec_));
  }

  const KeySpec& spec_;
  std::string problem_;
};

}  // namespace

Conversion convert_node(const toml::node& node, const KeySpec& spec) {
  NodeReader reader(spec);
  std::optional<ConfigValue> value;
  auto keep = [&value](auto read) {
    if (read) value = std::move(*read);
  };
  switch (spec.type) {
    case ValueType::Bool:
      keep(reader.read_bool(node, spec.path));
      break;
    case ValueType::Int:
      keep(reader.read_int(node, spec.path));
      break;
    case ValueType::Float:
      keep(reader.read_float(node, spec.path));
      break;
    case ValueType::String:
      keep(reader.read_string(node, spec.path));
      break;
    case ValueType::FloatList:
      keep(reader.read_list<double>(node, spec.type, &NodeReader::read_float));
      break;
    case ValueType::StringList:
      keep(reader.read_list<std::string>(node, spec.type, &NodeReader::read_string));
      break;
  }
  Conversion result;
  result.problem = value ? std::string() : reader.problem();
  result.value = std::move(value);
  return result;
}

}  // namespace zhost::config
