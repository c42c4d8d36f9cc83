// host/cli/report_command.cpp: `zhost report RUN_DIR [RUN_DIR...]`: runs the report script (report.py,
// carried in the executable) with Debian's /usr/bin/python3, which has matplotlib (scripts/setup-deps).
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "host/cli/commands.hpp"
#include "host/core/error.hpp"
#include "report_script.hpp"

namespace zhost::cli {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

std::string shell_quoted(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

int report_command(const ReportOptions& options) {
  namespace fs = std::filesystem;
  if (!fs::exists(kPython)) fail_usage("zhost report needs {} with matplotlib; run scripts/setup-deps", kPython);
  const std::string output =
      options.output.empty() ? (fs::path(options.run_dirs.front()) / "report.html").string() : options.output;
  std::string command = std::string(kPython) + " -";
  for (const std::string& dir : options.run_dirs) command += " " + shell_quoted(dir);
  command += " " + shell_quoted(output);
  std::FILE* python = ::popen(command.c_str(), "w");
  if (!python) fail("cannot start {}", kPython);
  std::fputs(kReportScript, python);
  const int status = ::pclose(python);
  if (status == -1 || !WIFEXITED(status)) fail("the report script ({}) did not finish", kPython);
  const int code = WEXITSTATUS(status);
  if (code == 2) return static_cast<int>(ExitCode::kUsage);  // it printed why
  if (code != 0) fail("the report script failed (exit code {}); its error is above", code);
  return 0;
}

}  // namespace zhost::cli
