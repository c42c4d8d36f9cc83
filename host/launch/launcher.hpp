// host/launch/launcher.hpp: `zhost run CONFIG --nproc N` starts N ranks of this node as child processes,
// prefixes their output lines with "[rank N] ", and supervises them: when one fails, the others are stopped
// (SIGTERM and SIGCONT, then SIGKILL after a grace period) and the launcher reports that rank in one line,
// with the rank's own last error line and any rank found stopped (/proc/PID/stat state T), the likely cause.
//
// Each rank gets this process's environment plus RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK
// (--node-rank, torchrun's name), MASTER_ADDR, MASTER_PORT and ZHOST_LAUNCHED=1 (detect_rank_env() reads
// them back), and TORCH_CPP_LOG_LEVEL=FATAL unless set (LibTorch's own log lines would come before zhost's
// error).
// By default a rank runs /proc/self/exe with this process's own arguments: the CLI must then act as a rank,
// not launch again, when ZHOST_LAUNCHED=1. Given rank_main, a rank is instead this process forked, running
// rank_main (Note [Forked ranks] in launcher.cpp). Ranks die with the launcher (PR_SET_PDEATHSIG);
// SIGINT/SIGTERM to the launcher are forwarded to them. Each rank runs in its own process group so that
// stopping it reaches its helpers too.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zhost::launch {

enum class OutputStream { kStdout, kStderr };

// Receives each output line of a rank (without its newline; a last line without one is still a line).
using OutputSink = std::function<void(int rank, OutputStream stream, std::string_view line)>;

struct LaunchOptions {
  int nproc = 1;                          // ranks on this node (--nproc)
  int nnodes = 1;                         // --nnodes
  int node_rank = 0;                      // --node-rank; global rank = node_rank * nproc + local rank
  std::string master_addr = "127.0.0.1";  // --master-addr
  int master_port = 0;                    // --master-port; 0: a free port on this host (single node only)
  std::string program = "/proc/self/exe";
  std::optional<std::vector<std::string>> args;          // argv[1..]; default: this process's own arguments
  std::vector<std::pair<std::string, std::string>> env;  // extra variables for every rank
  double grace_period_s = 5;                             // between SIGTERM and SIGKILL when stopping ranks
  double timeout_s = 0;                                  // stop the ranks after this long; 0: no limit
  // A rank stopped (process state T: SIGSTOP, a debugger) this long stops the job; 0: no limit. The ranks
  // notice a stopped peer themselves after comm.timeout_s; this limit is the launcher's own, a bit longer.
  double stopped_rank_limit_s = 0;
  OutputSink on_output;  // default: "[rank N] line" to this process's stdout/stderr
  // Optional. When set, each rank is a fork of this process that calls rank_main with the rank's environment
  // in place and exits with what it returns; program and args are used only where forking is not safe
  // (Note [Forked ranks]). Called in the child only; it must not return into the launcher's state.
  std::function<int()> rank_main;
};

struct RankExit {
  int rank = 0;  // global rank
  int pid = 0;
  int exit_code = 0;  // when it exited
  int signal = 0;     // when a signal killed it (exit_code is then -1)
};

struct LaunchResult {
  // 0; the first failed rank's exit code when it is 1, 2 or 3, else kRankFailed (3: killed by a signal, stopped,
  // another code, a time limit); 128 + signal when SIGINT/SIGTERM interrupted the launcher.
  int exit_code = 0;
  std::string error;            // one line (without "zhost: error: "), empty on success
  std::vector<RankExit> ranks;  // by local rank
};

// Throws UsageError for options no launch could honour (rank counts, addresses, ports), before anything starts.
void check_launch_options(const LaunchOptions& options);

// Starts the ranks and supervises them until all have ended. Throws UsageError for bad options and
// zhost::Error when a rank cannot be started.
LaunchResult run_local_ranks(const LaunchOptions& options);

// run_local_ranks() for the CLI: prints "zhost: error: <error>" to stderr on failure; returns the exit code.
int launch_local_ranks(const LaunchOptions& options);

// A TCP port that is free on this host right now.
int pick_free_port();

// Throws UsageError when `address` (a host name or IP address) does not resolve; `what` names where it came
// from in the message ("--master-addr", "MASTER_ADDR (from torchrun)").
void check_address_resolves(const std::string& address, const std::string& what);

// The most ranks --nproc may start on this node: kMaxRanksPerCore per online CPU core.
inline constexpr int kMaxRanksPerCore = 4;
int max_local_ranks();

// Names this process "zhost rank R" (truncated to the kernel's 15 characters) in ps, top and /proc/PID/comm,
// so that a rank can be told from the launcher and found by its rank: a forked rank's /proc/PID/environ
// still shows the launcher's environment (Note [Forked ranks]).
void name_this_rank_process(int rank);

// "SIGKILL", "SIGSEGV", ... ("signal 42" when unknown).
std::string signal_name(int signal);

}  // namespace zhost::launch
