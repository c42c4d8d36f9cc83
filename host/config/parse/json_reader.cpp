// host/config/parse/json_reader.cpp: a scanner that finds each key's position and the trailing commas (blanked
// in a copy, so every byte keeps its offset and line:column stays right) and blanks # remarks, then
// nlohmann-json's parser with // and /* */ comments ignored.
#include "host/config/parse/json_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "host/core/error.hpp"
#include "host/core/text.hpp"

namespace zhost::config {
namespace {

// A config nests a few levels; deeper input is not a config (and would cost recursion in the parser).
constexpr size_t kMaxDepth = 64;

TextPosition position_of(std::string_view text, size_t offset) {
  TextPosition position{1, 1};
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++position.line;
      position.column = 1;
    } else {
      ++position.column;
    }
  }
  return position;
}

struct Frame {
  bool is_object = false;
  std::string pointer;  // JSON pointer of this object or array
  bool expect_key = true;
  std::string key;   // the key whose value comes next (objects)
  size_t index = 0;  // the next item's index (arrays)
  std::set<std::string> seen;
};

class Scanner {
 public:
  Scanner(std::string_view text, const std::string& source) : text_(text), source_(source), cleaned_(text) {}

  void run(JsonConfig& out) {
    size_t last_significant = std::string::npos;
    for (size_t i = 0; i < text_.size();) {
      const char c = text_[i];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++i;
        continue;
      }
      if (c == '/' && i + 1 < text_.size() && (text_[i + 1] == '/' || text_[i + 1] == '*')) {
        i = skip_comment(i);
        continue;
      }
      if (c == '#') {
        // A remark to the line's end: DeepSpeed reads its config with hjson, which takes them. Blanked in the
        // copy (the JSON parser takes only // and /* */), every byte keeping its offset.
        const size_t end = std::min(text_.find('\n', i), text_.size());
        for (size_t j = i; j < end; ++j) cleaned_[j] = ' ';
        i = end;
        continue;
      }
      if ((c == '}' || c == ']') && last_significant != std::string::npos && text_[last_significant] == ',') {
        cleaned_[last_significant] = ' ';  // a trailing comma, as people write them
      }
      if (c == '"') {
        const size_t end = skip_string(i);
        if (!frames_.empty() && frames_.back().is_object && frames_.back().expect_key) record_key(i, end, out);
        last_significant = end - 1;
        i = end;
        continue;
      }
      if (c == '{' || c == '[') {
        if (frames_.size() >= kMaxDepth) {
          const TextPosition at = position_of(text_, i);
          fail_usage("{}:{}:{}: the JSON nests deeper than {} levels, which no config does; check the file", source_,
                     at.line, at.column, kMaxDepth);
        }
        Frame frame;
        frame.is_object = c == '{';
        frame.pointer = child_pointer();
        frames_.push_back(std::move(frame));
      } else if ((c == '}' || c == ']') && !frames_.empty()) {
        frames_.pop_back();
      } else if (c == ',' && !frames_.empty()) {
        if (frames_.back().is_object)
          frames_.back().expect_key = true;
        else
          ++frames_.back().index;
      } else if (c == ':' && !frames_.empty()) {
        frames_.back().expect_key = false;
      }
      last_significant = i;
      ++i;
    }
  }

  const std::string& cleaned() const { return cleaned_; }

 private:
  size_t skip_comment(size_t i) const {
    if (text_[i + 1] == '/') {
      size_t end = text_.find('\n', i);
      return end == std::string_view::npos ? text_.size() : end;
    }
    size_t end = text_.find("*/", i + 2);
    return end == std::string_view::npos ? text_.size() : end + 2;  // unclosed: the parser reports it
  }

  // The offset just past the closing quote (or the end of the text for an unclosed string).
  size_t skip_string(size_t i) const {
    for (size_t j = i + 1; j < text_.size(); ++j) {
      if (text_[j] == '\\')
        ++j;
      else if (text_[j] == '"')
        return j + 1;
      else if (text_[j] == '\n')
        return j;  // JSON strings hold no raw newline: the parser reports it
    }
    return text_.size();
  }

  void record_key(size_t begin, size_t end, JsonConfig& out) {
    Frame& frame = frames_.back();
    std::string key;
    try {
      key = nlohmann::json::parse(text_.substr(begin, end - begin)).get<std::string>();
    } catch (const nlohmann::json::exception&) {
      return;  // a malformed key: the parser reports it with its place
    }
    frame.key = key;
    const TextPosition at = position_of(text_, begin);
    const std::string pointer = frame.pointer + "/" + escape_json_pointer_token(key);
    if (!frame.seen.insert(key).second) {
      out.duplicate_keys.push_back(fmt::format(
          "{}:{}:{}: key '{}' is written twice in the same object (DeepSpeed refuses this too); keep one of them",
          source_, at.line, at.column, text::excerpt(key)));
    }
    out.key_positions[pointer] = at;
  }

  std::string child_pointer() const {
    if (frames_.empty()) return "";
    const Frame& parent = frames_.back();
    return parent.pointer + "/" +
           (parent.is_object ? escape_json_pointer_token(parent.key) : std::to_string(parent.index));
  }

  std::string_view text_;
  const std::string& source_;
  std::string cleaned_;
  std::vector<Frame> frames_;
};

// nlohmann's message without its "[json.exception.parse_error.101] parse error at line 1, column 2: " prefix.
std::string parser_reason(const std::string& what) {
  size_t colon = what.find(": ");
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

}  // namespace

bool looks_like_json(std::string_view text) {
  // Remark lines before the '{' (# and //, as hjson takes them) are skipped: TOML has no top-level '{'.
  size_t first = text.find_first_not_of(" \t\r\n");
  while (first != std::string_view::npos && (text[first] == '#' || text.substr(first, 2) == "//")) {
    const size_t end = text.find('\n', first);
    first = end == std::string_view::npos ? end : text.find_first_not_of(" \t\r\n", end);
  }
  return first != std::string_view::npos && text[first] == '{';
}

std::string escape_json_pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

JsonConfig read_json_config(std::string_view text, const std::string& source_name) {
  JsonConfig out;
  Scanner scanner(text, source_name);
  scanner.run(out);
  try {
    out.root = nlohmann::json::parse(scanner.cleaned(), nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const nlohmann::json::parse_error& error) {
    const TextPosition at = position_of(text, error.byte > 0 ? error.byte - 1 : 0);
    fail_usage("{}:{}:{}: not valid JSON: {}; fix the file (comments and trailing commas are accepted)", source_name,
               at.line, at.column, text::excerpt(parser_reason(error.what()), 200));
  }
  if (!out.root.is_object()) {
    fail_usage("{}:1:1: a DeepSpeed config is a JSON object ({{ ... }}), this is a {}; fix the file", source_name,
               out.root.type_name());
  }
  return out;
}

}  // namespace zhost::config
