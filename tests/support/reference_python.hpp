// tests/support/reference_python.hpp: the python that the tests' PyTorch references run with: $ZHOST_PYTHON when
// set, else the python of the virtual environment this build was configured with (CMake's ZHOST_PYTHON;
// scripts/setup-deps installs the pinned torch and numpy there, Note [LibTorch from torch's wheel]). It is part of
// the setup: a python that cannot import torch and numpy fails the test that needs it, it does not skip it.
#pragma once

#include <cstdlib>
#include <string>

namespace zhost::testing {

inline std::string reference_python() {
  const char* from_env = std::getenv("ZHOST_PYTHON");
  if (from_env != nullptr && *from_env != '\0') return from_env;
  return ZHOST_TEST_PYTHON;
}

// "" when reference_python() imports torch and numpy; else what to do about it.
inline std::string reference_python_problem() {
  static const std::string problem = [] {
    const std::string python = reference_python();
    const std::string command = "'" + python + "' -c 'import torch, numpy' >/dev/null 2>&1";
    if (std::system(command.c_str()) == 0) return std::string();
    return python + " cannot import torch and numpy: run scripts/setup-deps, or set ZHOST_PYTHON to a python that can";
  }();
  return problem;
}

}  // namespace zhost::testing

// In a test body: stops the test with a failure when the reference python is not usable.
#define ZHOST_REQUIRE_REFERENCE_PYTHON() ASSERT_EQ(::zhost::testing::reference_python_problem(), "")
