// tests/fuzz/fuzz_safetensors.cpp: libFuzzer target for the safetensors reader (Note [safetensors layout]):
// the input is a whole .safetensors file, parsed and validated as SafetensorsFile does; an accepted one
// must have tensors that tile its data region inside the input. The same input is also read as a
// model.safetensors.index.json.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "host/formats/safetensors.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zhost::fuzz::refuse_only_with_zhost_errors([&] {
    const auto header = zhost::formats::SafetensorsHeader::parse(data, size, "fuzz.safetensors");
    uint64_t end = header.data_start;
    for (const auto& tensor : header.tensors) {
      if (header.data_start + tensor.begin != end || tensor.end < tensor.begin) {
        std::fprintf(stderr, "accepted tensors that do not tile the data region\n");
        std::abort();
      }
      end = header.data_start + tensor.end;
    }
    if (end != size) {
      std::fprintf(stderr, "accepted a data region of the wrong size\n");
      std::abort();
    }
  });
  zhost::fuzz::refuse_only_with_zhost_errors(
      [&] { zhost::formats::parse_index(std::string(reinterpret_cast<const char*>(data), size), "fuzz.index.json"); });
  return 0;
}
