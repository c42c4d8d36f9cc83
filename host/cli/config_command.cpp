// host/cli/config_command.cpp: `zhost config check CONFIG`: validates a config as `zhost run` would and
// prints it resolved (defaults included, each key's origin), then which plugin serves each need, and each
// tier's roles (optimizer-compute, optimizer-storage, params). With the
// training engine built, it also opens the data source and checks fp16 kernels as `zhost run` would.
#include <iostream>

#include "host/cli/commands.hpp"
#include "host/core/text.hpp"

#if ZHOST_HAS_ENGINE
#include "host/engine/preflight.hpp"
#endif

namespace zhost::cli {

int config_check_command(const JobSetupOptions& options) {
  JobSetup job = prepare_job(options);
#if ZHOST_HAS_ENGINE
  engine::check_data(*job.config);
  engine::check_precision(*job.config);
#endif
  std::cout << "# zhost config check: " << (options.config_file.empty() ? "(no file)" : options.config_file.string())
            << " is valid\n\n";
  std::cout << job.config->to_toml() << "\n";
  std::cout << "# plugins serving this config\n";
  for (const auto* plugin : job.resolution.plugins) {
    const std::vector<std::string> roles = job.resolution.roles_of(plugin);
    std::cout << "#   " << plugin->info.name << " " << plugin->info.version << " (" << plugin->path.string() << ")"
              << (roles.empty() ? "" : " as " + text::join(roles, " and ")) << " for "
              << text::join(job.resolution.chosen_for.at(plugin), "; ") << "\n";
  }
  return 0;
}

}  // namespace zhost::cli
