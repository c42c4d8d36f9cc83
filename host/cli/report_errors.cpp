// host/cli/report_errors.cpp: the one place where an exception leaving a command becomes zhost's
// "zhost: error: ..." line(s) on stderr and the process exit code (docs/exit-codes.md).
#include <iostream>

#include "host/cli/commands.hpp"
#include "host/config/schema/validate.hpp"
#include "host/core/error.hpp"

namespace zhost::cli {

int report_errors(const std::function<int()>& command) {
  try {
    return command();
  } catch (const config::ConfigErrors& e) {
    for (const auto& line : e.errors()) std::cerr << "zhost: error: " << line << "\n";
    return e.exit_code();
  } catch (const Error& e) {
    std::cerr << "zhost: error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "zhost: error: " << e.what() << "\n";
    return static_cast<int>(ExitCode::kRuntime);
  }
}

}  // namespace zhost::cli
