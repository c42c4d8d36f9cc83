// host/cli/run_command.cpp: `zhost run CONFIG`: checks the job, then trains on this process, or starts
// and supervises --nproc local ranks that each run the same command.
#include "host/cli/commands.hpp"
#include "host/core/error.hpp"

namespace zhost::cli {

int run_command(const RunOptions& options) {
  JobSetup job = prepare_job(options.job);
  fail_usage("this zhost has no training engine yet: `zhost config check` validated the config; training lands with "
             "the engine");
}

}  // namespace zhost::cli
