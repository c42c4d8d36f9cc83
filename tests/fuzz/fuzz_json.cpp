// tests/fuzz/fuzz_json.cpp: libFuzzer target for the DeepSpeed JSON reader: the input is a ds_config.json
// (comments, trailing commas), read and mapped as `zhost config check` does, then validated against the
// host's schema. Its `config import` TOML must parse as TOML, and, when the JSON validates, validate to
// the same resolved values.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "host/config/document/document.hpp"
#include "host/config/document/import_toml.hpp"
#include "host/config/schema/validate.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace {

// The resolved values without their origin comments.
std::string values_only(const std::string& printed) {
  std::string out;
  size_t begin = 0;
  while (begin < printed.size()) {
    size_t end = printed.find('\n', begin);
    if (end == std::string::npos) end = printed.size();
    std::string line = printed.substr(begin, end - begin);
    if (size_t comment = line.find("  #"); comment != std::string::npos) line.resize(comment);
    out += line + "\n";
    begin = end + 1;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const zhost::config::Schema& schema = zhost::fuzz::host_schema();
  std::string text(reinterpret_cast<const char*>(data), size);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos || text[text.find_first_not_of(" \t\r\n")] != '{') {
    text.insert(0, "{");  // always the JSON path
  }
  zhost::fuzz::refuse_only_with_zhost_errors([&] {
    auto document = zhost::config::Document::parse(text, "fuzz.json");
    const std::string imported = zhost::config::imported_toml(document, [](const std::string&) { return true; });
    zhost::config::Document reread;
    try {
      reread = zhost::config::Document::parse(imported, "imported.toml");
    } catch (const zhost::Error& error) {
      std::fprintf(stderr, "the imported TOML does not parse: %s\n%s\n", error.what(), imported.c_str());
      std::abort();
    }
    const std::string resolved = values_only(zhost::config::validate(document, schema).to_toml());
    try {
      const std::string again = values_only(zhost::config::validate(reread, schema).to_toml());
      if (again != resolved) {
        std::fprintf(stderr, "import changed the resolved config:\n%s\nvs\n%s\n", resolved.c_str(), again.c_str());
        std::abort();
      }
    } catch (const zhost::Error& error) {
      std::fprintf(stderr, "the imported TOML of a valid JSON does not validate: %s\n%s\n", error.what(),
                   imported.c_str());
      std::abort();
    }
  });
  return 0;
}
