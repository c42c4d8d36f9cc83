// host/cli/control_command.cpp: `zhost control RUN_DIR swap`: one command to a running job (Note [Control channel]).
#include <cstdio>

#include "host/cli/commands.hpp"
#include "host/job/control_channel.hpp"

namespace zhost::cli {

int control_swap_command(const ControlOptions& options) {
  const bool param = !options.param.empty();
  const nlohmann::json command = {{"command", "swap"},
                                  {param ? "param" : "optimizer", param ? options.param : options.optimizer}};
  const nlohmann::json result = control::send_command(options.run_dir, command, options.timeout_s);
  if (result.value("ok", false)) {
    std::printf("swapped: the %s moved from '%s' to '%s' after step %lld (%.1f MB in %.2f s)\n",
                param ? "parameter shards" : "optimizer's states", result.value("from", std::string()).c_str(),
                result.value("to", std::string()).c_str(),
                static_cast<long long>(result.value("after_step", int64_t{0})),
                static_cast<double>(result.value("bytes", uint64_t{0})) / 1e6, result.value("seconds", 0.0));
    return 0;
  }
  std::fprintf(stderr, "zhost: error: the swap failed, and the job goes on as before: %s\n",
               result.value("error", std::string("no reason given")).c_str());
  return 1;
}

}  // namespace zhost::cli
