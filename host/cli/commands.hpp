// host/cli/commands.hpp: the subcommands of the zhost executable, each returning the process exit code.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "host/job/job_setup.hpp"

namespace zhost::cli {

// Runs a command and returns its exit code; a zhost::Error (or any exception) it throws becomes one
// "zhost: error: ..." line per problem on stderr and the error's exit code (kRuntime for other exceptions).
int report_errors(const std::function<int()>& command);

struct PluginsOptions {
  bool json = false;
  std::vector<std::string> plugin_dirs;
};
int plugins_command(const PluginsOptions& options);

// nproc > 0: also checks the batch arithmetic for world size nproc * nnodes, as `zhost run --nproc` does.
int config_check_command(const JobSetupOptions& options, int nproc = 0, int nnodes = 1);
// zero.zero_hpz_partition_size against the launch's ranks per node (--nproc): `config check --nproc` and `run
// --nproc` refuse a size other than it before any rank starts. UsageError.
void check_node_layout(const config::ResolvedConfig& config, int nproc, int nnodes);
// Prints a DeepSpeed JSON config as TOML; exit code 2 (with the problems on stderr) when keys were refused.
int config_import_command(const JobSetupOptions& options);

struct RunOptions {
  JobSetupOptions job;
  int nproc = 0;  // 0: not launching local ranks (single process, or started by an external launcher)
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;                       // 0: pick a free port
  std::vector<std::string> argv;             // the full command line, for re-executing ranks
  bool log_level_from_command_line = false;  // else the config's log.level applies
};
int run_command(const RunOptions& options);

struct ExportOptions {
  std::string checkpoint;  // a step-NNNNNNNN folder, or a folder holding `latest`
  std::string out_dir;
  std::string names = "hf";                     // hf | zhost
  uint64_t max_shard_bytes = 5'000'000'000ull;  // Hugging Face's default "5GB"
};
int export_command(const ExportOptions& options);

struct TraceMergeOptions {
  std::string run_dir;
  std::string output;  // empty: RUN_DIR/trace.json
};
int trace_merge_command(const TraceMergeOptions& options);

struct ReportOptions {
  std::vector<std::string> run_dirs;
  std::string output;  // empty: report.html in the first run directory
};
// Writes a self-contained HTML report with plots (host/cli/report.py, run by /usr/bin/python3).
int report_command(const ReportOptions& options);

struct ControlOptions {
  std::string run_dir;
  std::string optimizer;   // swap: the storage to move the optimizer's states into, or
  std::string param;       // the storage to move stage 3's parameter shards into
  double timeout_s = 600;  // per wait: for the acknowledgement, then for the result
};
// `zhost control RUN_DIR swap --optimizer NAME | --param NAME`: a hot swap in a running job (Note [Control channel]);
// exit code 0 when the swap succeeded, 1 when the job tried and stayed on its storage, 2 when there was no job to ask
// or the command was malformed or refused at once.
int control_swap_command(const ControlOptions& options);

}  // namespace zhost::cli
