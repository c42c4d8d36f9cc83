// tests/cli/cli_support.hpp: running the real zhost executable from a test's scratch folder and reading
// its exit code, stdout and stderr. Shared by the CLI test binaries.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/support/scratch_dir.hpp"

namespace zhost::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs zhost with `args` (shell words, already quoted where needed) in `dir`; `prefix` comes before the
// executable (e.g. "timeout 10 ").
inline CliResult run_zhost(const std::filesystem::path& dir, const std::string& args, const std::string& prefix = "") {
  std::string command = "cd " + dir.string() + " && " + prefix + ZHOST_EXE + " " + args + " >out.txt 2>err.txt";
  int status = std::system(command.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text_file(dir / "out.txt");
  r.err = read_text_file(dir / "err.txt");
  return r;
}

}  // namespace zhost::testing
