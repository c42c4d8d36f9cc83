// tests/fuzz/fuzz_config.cpp: libFuzzer target for the config TOML reader: the input is a config file,
// parsed and validated against the host's schema as `zhost config check` does; a valid one is printed
// resolved and read back, which must give a valid config again.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "host/config/document/document.hpp"
#include "host/config/schema/validate.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const zhost::config::Schema& schema = zhost::fuzz::host_schema();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  zhost::fuzz::refuse_only_with_zhost_errors([&] {
    auto document = zhost::config::Document::parse(text, "fuzz.toml");
    const std::string printed = zhost::config::validate(document, schema).to_toml();
    // The printout of a valid config is a valid config (zhost config check's output can be fed back).
    try {
      zhost::config::validate(zhost::config::Document::parse(printed, "printed.toml"), schema);
    } catch (const zhost::Error& error) {
      std::fprintf(stderr, "the resolved printout does not validate: %s\n%s\n", error.what(), printed.c_str());
      std::abort();
    }
  });
  return 0;
}
