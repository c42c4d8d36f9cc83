// host/config/schema/validate.hpp: checks a Document against a Schema and resolves it into a ResolvedConfig,
// reporting every problem at once, one line each, with the file line or --set it came from.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "host/config/document/document.hpp"
#include "host/config/schema/resolved.hpp"
#include "host/config/schema/schema.hpp"
#include "host/core/error.hpp"

namespace zhost::config {

// Declared keys that this config must not set, each with the reason, e.g. "zero.reduce_bucket_size" ->
// "it belongs to plugin 'stage2', and zero.stage = 1 does not use it". The plugin host fills it.
using InactiveKeys = std::map<std::string, std::string>;

// All problems found in a config. what() is the first line plus "(and N more errors)"; errors() has every
// line, in file order, then overrides in command-line order, then the rest.
class ConfigErrors : public UsageError {
 public:
  explicit ConfigErrors(std::vector<std::string> errors);
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::vector<std::string> errors_;
};

// Checks every key the document sets (unknown, inactive, wrong type, out of range, not a valid choice),
// fills in defaults, reports missing required keys, then runs the schema's rules. Throws ConfigErrors.
ResolvedConfig validate(const Document& document, const Schema& schema, const InactiveKeys& inactive = {});

}  // namespace zhost::config
