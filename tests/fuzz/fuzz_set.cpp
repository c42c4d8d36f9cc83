// tests/fuzz/fuzz_set.cpp: libFuzzer target for --set parsing: each input line is one --set assignment,
// applied in order to a small config and validated against the host's schema as `zhost run` does.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "host/config/document/document.hpp"
#include "host/config/schema/validate.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const zhost::config::Schema& schema = zhost::fuzz::host_schema();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  zhost::fuzz::refuse_only_with_zhost_errors([&] {
    auto document = zhost::config::Document::parse("steps = 3\n[model]\nwidth = 64\n[zero]\nstage = 1\n", "base.toml");
    for (size_t begin = 0; begin <= input.size();) {
      size_t end = input.find('\n', begin);
      if (end == std::string_view::npos) end = input.size();
      document.apply_override(input.substr(begin, end - begin));
      begin = end + 1;
    }
    zhost::config::validate(document, schema).to_toml();
  });
  return 0;
}
