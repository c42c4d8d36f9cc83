// host/cli/config_command.cpp: `zhost config check CONFIG`: validates a config as `zhost run` would and
// prints it resolved (defaults included, each key's origin), then which plugin serves each need, and each
// tier's roles (optimizer-compute, optimizer-storage, params). With --nproc it checks the batch arithmetic
// for that world size. With the training engine built, it also opens the data source and checks fp16
// kernels as `zhost run` would. `zhost config import CONFIG.json` prints a DeepSpeed JSON config as TOML.
#include <algorithm>
#include <iostream>

#include "host/cli/commands.hpp"
#include "host/config/document/import_toml.hpp"
#include "host/config/schema/batch.hpp"
#include "host/config/schema/validate.hpp"
#include "host/core/error.hpp"
#include "host/core/text.hpp"
#include "host/job/plugin_checks.hpp"

#if ZHOST_HAS_ENGINE
#include "host/engine/preflight.hpp"
#include "host/engine/settings.hpp"
#endif

namespace zhost::cli {
namespace {

// The batch sizes as `zhost run --nproc` resolves them at start-up.
void check_batch_sizes(const config::ResolvedConfig& config, int world_size, int nproc, int nnodes) {
  try {
    config::resolve_batch_sizes(config.get_optional_int("train_batch_size"),
                                config.get_optional_int("train_micro_batch_size_per_gpu"),
                                config.get_optional_int("gradient_accumulation_steps"), world_size);
  } catch (const UsageError& error) {
    const std::string where = config.has("train_batch_size") ? config.location("train_batch_size")
                                                             : config.location("train_micro_batch_size_per_gpu");
    fail_usage("{} with --nproc {} --nnodes {} (world size {}): {}", where, nproc, nnodes, world_size, error.what());
  }
}

}  // namespace

// hpZ's secondary partition lives within a node (docs/zeropp.md): with the launch's ranks per node known, a
// partition size other than it is found here rather than at the first gather.
void check_node_layout(const config::ResolvedConfig& config, int nproc, int nnodes) {
  if (!config.active("zero.zero_hpz_partition_size")) return;
  const int64_t hpz = config.get_int("zero.zero_hpz_partition_size");
  if (hpz <= 1 || hpz == nproc) return;
  fail_usage(
      "{} with --nproc {} --nnodes {}: zero.zero_hpz_partition_size = {}, but zhost's hpZ keeps the secondary "
      "partition within a node and this launch runs {} ranks per node; set it to {}",
      config.location("zero.zero_hpz_partition_size"), nproc, nnodes, hpz, nproc, nproc);
}

int config_check_command(const JobSetupOptions& options, int nproc, int nnodes) {
  JobSetup job = prepare_job(options);
  if (nproc > 0) {
    check_batch_sizes(*job.config, nproc * nnodes, nproc, nnodes);
    check_node_layout(*job.config, nproc, nnodes);
  }
#if ZHOST_HAS_ENGINE
  engine::check_data(*job.config);
  engine::check_precision(*job.config);
  // The plugins' own checks (Note [Plugin config checks]), told the world size and the model when --nproc
  // gives the world size; without it neither is known (as for the memory check).
  if (nproc > 0) {
    const int world_size = nproc * nnodes;
    engine::check_plugins(job, engine::read_settings(*job.config, world_size, 0, 0, nproc), world_size, nproc);
  } else {
    check_plugin_configs(job, ConfigCheckFacts{});
  }
#else
  check_plugin_configs(job, ConfigCheckFacts{});
#endif
  std::cout << "# zhost config check: " << (options.config_file.empty() ? "(no file)" : options.config_file.string())
            << " is valid" << (nproc > 0 ? " for " + std::to_string(nproc * nnodes) + " ranks" : "") << "\n";
  for (const auto& info : job.infos) std::cout << "# " << info << "\n";
  for (const auto& note : job.notes) std::cout << "# " << note << "\n";
  std::cout << "\n" << job.config->to_toml() << "\n";
  std::cout << "# plugins serving this config\n";
  for (const auto* plugin : job.resolution.plugins) {
    const std::vector<std::string> roles = job.resolution.roles_of(plugin);
    std::cout << "#   " << plugin->info.name << " " << plugin->info.version << " (" << plugin->path.string() << ")"
              << (roles.empty() ? "" : " as " + text::join(roles, " and ")) << " for "
              << text::join(job.resolution.chosen_for.at(plugin), "; ") << "\n";
  }
  return 0;
}

int config_import_command(const JobSetupOptions& options) {
  const config::Document document = load_job_document(options);
  if (!document.is_deepspeed_json()) {
    fail_usage("{}: is a TOML config already; `zhost config import` reads a DeepSpeed JSON config",
               options.config_file.string());
  }
  try {
    JobSetup job = prepare_job(options);
    const std::vector<std::string> active = job.config->keys();
    std::cout << config::imported_toml(document, [&active](const std::string& path) {
      return std::find(active.begin(), active.end(), path) != active.end();
    });
    return 0;
  } catch (const config::ConfigErrors& errors) {
    // The TOML still, with the refusals as comments, so that they can be fixed in either file.
    std::cout << config::imported_toml(
        document, [](const std::string&) { return true; }, errors.errors());
    throw;
  }
}

}  // namespace zhost::cli
