// tests/fuzz/fuzz_support.hpp: what the fuzz targets share: quiet logging, and the rule that an input may
// be refused only with zhost's error idiom (a zhost::Error, one line). Any other exception escaping is a
// finding: it reaches the user as an unexplained "zhost: error: <what()>", so the target aborts on it.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "host/config/schema/host_schema.hpp"
#include "host/core/error.hpp"

namespace zhost::fuzz {

// The host's keys and rules, built once.
inline const zhost::config::Schema& host_schema() {
  static const zhost::config::Schema schema = [] {
    zhost::config::Schema s;
    zhost::config::add_host_keys(s);
    return s;
  }();
  return schema;
}

template <typename Body>
void refuse_only_with_zhost_errors(Body body) {
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)quiet;
  try {
    body();
  } catch (const zhost::Error& error) {
    if (std::string(error.what()).find('\n') != std::string::npos) {
      std::fprintf(stderr, "error message spans lines: %s\n", error.what());
      std::abort();
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "escaped exception that is not a zhost::Error: %s\n", error.what());
    std::abort();
  }
}

}  // namespace zhost::fuzz
