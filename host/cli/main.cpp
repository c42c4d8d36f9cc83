// host/cli/main.cpp: the zhost command line (CLI11): parses arguments and dispatches to a subcommand
// (report_errors() turns every zhost::Error into one "zhost: error: ..." line and its exit code).
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "host/cli/commands.hpp"
#include "host/config/schema/validate.hpp"
#include "host/core/error.hpp"
#include "host/core/fast_exit.hpp"
#include "host/core/log.hpp"
#include "zhost/core.h"

#if ZHOST_HAS_ENGINE
#include "host/engine/engine.hpp"
#endif

namespace {

// A config must be a regular file: reading a FIFO or a device would block or never end.
const CLI::Validator kRegularFile(
    [](std::string& path) -> std::string {
      struct stat info {};
      if (::stat(path.c_str(), &info) != 0) return "no such file: '" + path + "'";
      if (!S_ISREG(info.st_mode)) {
        return "'" + path + "' is not a regular file (" +
               (S_ISDIR(info.st_mode) ? "a folder" : "a FIFO, socket or device") +
               "); give a TOML file or a DeepSpeed JSON file";
      }
      return "";
    },
    "FILE");

void add_plugin_path_option(CLI::App* command, std::vector<std::string>& dirs) {
  command->add_option("--plugin-path", dirs, "extra folder to search for plugins first (repeatable)")
      ->check(CLI::ExistingDirectory);
}

void add_job_options(CLI::App* command, zhost::JobSetupOptions& job) {
  command->add_option("config", job.config_file, "the job's config: TOML, or DeepSpeed's JSON (docs/config.md)")
      ->required()
      ->check(kRegularFile);
  command
      ->add_option("--companion", job.companion_file,
                   "with a DeepSpeed JSON config: a TOML file with zhost's own keys (model, data, steps, ...)")
      ->check(kRegularFile);
  command->add_option("--set", job.overrides, "override a config key, e.g. --set zero.stage=2 (repeatable)")
      ->type_name("KEY=VALUE");
  add_plugin_path_option(command, job.plugin_dirs);
}

int print_version() {
  std::cout << "zhost "
            << "0.1.0"
            << "\n"
            << "plugin ABI " << ZHOST_ABI_MAJOR << "." << ZHOST_ABI_MINOR << "\n";
#if ZHOST_HAS_ENGINE
  std::cout << zhost::engine::build_description() << "\n" << zhost::engine::runtime_description() << "\n";
#else
  std::cout << "training engine: not built (ZHOST_WITH_TORCH=OFF)\n";
#endif
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"zhost: memory-efficient distributed training (ZeRO stages 0-3, CPU and NVMe offload) with plugins"};
  app.require_subcommand(1);
  app.fallthrough();  // --log-level may also follow the subcommand
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn or error")->capture_default_str();

  zhost::cli::RunOptions run;
  CLI::App* run_cmd = app.add_subcommand("run", "train with a config, on this process or on --nproc local ranks");
  add_job_options(run_cmd, run.job);
  CLI::Option* nproc =
      run_cmd->add_option("--nproc", run.nproc, "start this many local ranks (one process each) and supervise them")
          ->check(CLI::Validator(
              [](std::string& value) -> std::string {
                int count = 0;
                const bool number = CLI::detail::lexical_cast(value, count);
                return number && count >= 1 ? "" : "must be a number of ranks, at least 1; got '" + value + "'";
              },
              "N"));
  // The multi-node options configure the launcher: without --nproc nothing would read them.
  run_cmd->add_option("--nnodes", run.nnodes, "number of nodes (with --nproc)")->capture_default_str()->needs(nproc);
  run_cmd->add_option("--node-rank", run.node_rank, "this node's index (with --nproc)")
      ->capture_default_str()
      ->needs(nproc);
  run_cmd->add_option("--master-addr", run.master_addr, "address of rank 0's rendezvous (with --nproc)")
      ->capture_default_str()
      ->needs(nproc);
  run_cmd
      ->add_option("--master-port", run.master_port, "port of rank 0's rendezvous (with --nproc; 0: pick a free one)")
      ->needs(nproc);
  std::string resume;
  run_cmd
      ->add_option("--resume", resume,
                   "resume from a checkpoint: latest (under checkpoint.dir), a step-NNNNNNNN folder, a folder "
                   "holding `latest`, or that `latest` file (sets checkpoint.resume)")
      ->type_name("PATH|latest");

  zhost::cli::PluginsOptions plugins;
  CLI::App* plugins_cmd = app.add_subcommand("plugins", "list the plugins found on the search path");
  plugins_cmd->add_flag("--json", plugins.json, "machine-readable output");
  add_plugin_path_option(plugins_cmd, plugins.plugin_dirs);

  zhost::JobSetupOptions check;
  CLI::App* config_cmd = app.add_subcommand("config", "work with config files");
  config_cmd->require_subcommand(1);
  CLI::App* check_cmd = config_cmd->add_subcommand("check", "validate a config and print it resolved");
  add_job_options(check_cmd, check);
  int check_nproc = 0, check_nnodes = 1;
  CLI::Option* check_nproc_option =
      check_cmd
          ->add_option("--nproc", check_nproc, "check the batch arithmetic for this many ranks per node, as run would")
          ->check(CLI::PositiveNumber);
  check_cmd->add_option("--nnodes", check_nnodes, "number of nodes (with --nproc)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->needs(check_nproc_option);
  zhost::JobSetupOptions import_options;
  CLI::App* import_cmd = config_cmd->add_subcommand(
      "import", "print a DeepSpeed JSON config as zhost TOML, with comments on what was mapped, noted or refused");
  add_job_options(import_cmd, import_options);

  CLI::App* version_cmd = app.add_subcommand("version", "print versions of zhost, its ABI and LibTorch");

  zhost::cli::TraceMergeOptions merge;
  CLI::App* trace_cmd = app.add_subcommand("trace", "work with the traces of a run (run.trace = true)");
  trace_cmd->require_subcommand(1);
  CLI::App* merge_cmd = trace_cmd->add_subcommand("merge", "merge RUN_DIR/trace.rankN.json into RUN_DIR/trace.json");
  merge_cmd->add_option("run_dir", merge.run_dir, "the run directory")->required()->check(CLI::ExistingDirectory);
  merge_cmd->add_option("-o,--output", merge.output, "the merged file (default RUN_DIR/trace.json)");

  zhost::cli::ReportOptions report;
  CLI::App* report_cmd =
      app.add_subcommand("report", "write an HTML report with plots of one or more runs (side by side)");
  report_cmd->add_option("run_dirs", report.run_dirs, "run directories")->required()->check(CLI::ExistingDirectory);
  report_cmd->add_option("-o,--output", report.output, "the HTML file (default FIRST_RUN_DIR/report.html)");

  zhost::cli::ExportOptions export_options;
  CLI::App* export_cmd = app.add_subcommand(
      "export", "write a checkpoint's fp32 weights as safetensors (Hugging Face names and config.json, or zhost's)");
  export_cmd
      ->add_option("checkpoint", export_options.checkpoint,
                   "a checkpoint folder (step-NNNNNNNN), or one holding `latest`")
      ->required();
  export_cmd->add_option("out", export_options.out_dir, "the folder to write")->required();
  export_cmd->add_option("--names", export_options.names, "hf: Hugging Face's names and layouts; zhost: as saved")
      ->check(CLI::IsMember({"hf", "zhost"}))
      ->capture_default_str();
  export_cmd
      ->add_option("--max-shard-size", export_options.max_shard_bytes,
                   "tensor bytes per safetensors file, e.g. 5GB or 500MB (one file when all fit)")
      ->transform(CLI::AsSizeValue(true))
      ->capture_default_str();

  zhost::cli::ControlOptions control;
  CLI::App* control_cmd = app.add_subcommand("control", "send a command to a running job through its run directory");
  control_cmd->require_subcommand(1);
  CLI::App* swap_cmd = control_cmd->add_subcommand(
      "swap", "move the optimizer's states into another storage at the next step boundary (hot swap)");
  swap_cmd->add_option("run_dir", control.run_dir, "the job's run directory")->required();
  auto storage_name = [](const std::string& name) {
    return name.empty() || name.find_first_of(" \t\n\"") != std::string::npos
               ? std::string("a storage name: cpu, nvme or a tier's name")
               : std::string();
  };
  CLI::Option_group* storage = swap_cmd->add_option_group("storage", "what moves, and where to (one of them)");
  storage->add_option("--optimizer", control.optimizer, "where the optimizer's states go: cpu, nvme, a tier's name")
      ->check(storage_name);
  storage->add_option("--param", control.param, "where stage 3's parameter shards go: cpu, nvme, a tier's name")
      ->check(storage_name);
  storage->require_option(1);
  swap_cmd->add_option("--timeout", control.timeout_s, "seconds to wait for the acknowledgement, then the result")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and succeed; every other parse problem is a usage error (exit 2).
    return app.exit(e) == 0 ? 0 : static_cast<int>(zhost::ExitCode::kUsage);
  }

  const int exit_code = zhost::cli::report_errors([&]() -> int {
    zhost::log::init(log_level);
#if ZHOST_HAS_ENGINE
    zhost::engine::register_builtin_plugins();
#endif
    if (*run_cmd) {
      if (!resume.empty()) run.job.overrides.push_back("checkpoint.resume=" + resume);
      run.argv.assign(argv, argv + argc);
      run.log_level_from_command_line = app.get_option("--log-level")->count() > 0;
      return zhost::cli::run_command(run);
    }
    if (*plugins_cmd) return zhost::cli::plugins_command(plugins);
    if (*check_cmd) return zhost::cli::config_check_command(check, check_nproc, check_nnodes);
    if (*import_cmd) return zhost::cli::config_import_command(import_options);
    if (*version_cmd) return print_version();
    if (*merge_cmd) return zhost::cli::trace_merge_command(merge);
    if (*export_cmd) return zhost::cli::export_command(export_options);
    if (*report_cmd) return zhost::cli::report_command(report);
    if (*swap_cmd) return zhost::cli::control_swap_command(control);
    return 0;
  });
  if (*run_cmd) zhost::fast_exit(exit_code);  // Note [Fast exit]
  return exit_code;
}
