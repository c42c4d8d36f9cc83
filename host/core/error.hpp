// host/core/error.hpp: zhost's one error idiom inside the host.
//
// Host code throws zhost::Error with a one-line message that says what is wrong and what to do. The CLI
// catches it at the top, prints "zhost: error: <message>" and exits with exit_code(). At the plugin ABI
// boundary, errors travel as zhost_status objects instead (host/services converts between the two).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace zhost {

// Exit codes of the zhost executable.
enum class ExitCode : int {
  kRuntime = 1,    // a job or a command failed while running
  kUsage = 2,      // bad command line, config or plugin set: nothing ran
  kRankFailed = 3  // a rank died or a collective timed out
};

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, ExitCode code = ExitCode::kRuntime)
      : std::runtime_error(message), code_(code) {}
  ExitCode code() const { return code_; }
  int exit_code() const { return static_cast<int>(code_); }

 private:
  ExitCode code_;
};

// A problem with the user's input (command line, config file, plugin set): exit code 2.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message) : Error(message, ExitCode::kUsage) {}
};

// An allocation failed (host memory, pinned memory, a device), here or in a plugin (ZHOST_ERR_OUT_OF_MEMORY):
// the engine turns it into one line that says what the job's model states need.
class OutOfMemoryError : public Error {
 public:
  explicit OutOfMemoryError(const std::string& message) : Error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void fail_usage(fmt::format_string<Args...> format, Args&&... args) {
  throw UsageError(fmt::format(format, std::forward<Args>(args)...));
}

// Invariant check for host code: a failure is a zhost bug, reported with its location.
#define ZHOST_ASSERT(cond)                                                  \
  do {                                                                      \
    if (!(cond)) ::zhost::detail::assert_failed(#cond, __FILE__, __LINE__); \
  } while (0)

namespace detail {
[[noreturn]] void assert_failed(const char* expr, const char* file, int line);
}

}  // namespace zhost
