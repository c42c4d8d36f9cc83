// tests/training/training_test_support.hpp: running `zhost run` from tests (to the end, or in the
// background to be disturbed) and reading what a run left in its run directory (metrics.jsonl, weights.bin
// + weights.json).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/scratch_dir.hpp"

namespace zhost::testing {

struct RunOutput {
  int exit_code = -1;
  std::string out, err;
  std::filesystem::path run_dir;
  std::vector<double> losses;                          // per printed step
  std::map<std::string, std::vector<float>> weights;   // name -> final fp32 values (when saved)
  std::vector<std::map<std::string, double>> metrics;  // metrics.jsonl records (numeric fields)
};

// A small GPT job on text (the Debian license texts), fp32, every step printed, final weights saved.
// Vary it with --set in run_zhost's `args`.
std::string small_job_config();

// `zhost run --nproc N` of small_job_config() with `sets` (KEY=VALUE) running in the background; the run
// never ends by itself (steps = 100000). Its stdout and stderr go to files of `dir`. The destructor kills
// what is still running.
class BackgroundJob {
 public:
  BackgroundJob(const ScratchDir& dir, int nproc, const std::vector<std::string>& sets);
  ~BackgroundJob();
  BackgroundJob(const BackgroundJob&) = delete;
  BackgroundJob& operator=(const BackgroundJob&) = delete;

  // Waits until the launcher started its `nproc` ranks (known by their process names, "zhost rank R").
  bool wait_for_ranks(double seconds);
  // Waits until training runs: the first metrics record, and the ranks known.
  bool wait_for_training();

  pid_t pid_of(int rank) const { return ranks_.at(rank); }
  pid_t launcher() const { return launcher_; }
  const std::map<int, pid_t>& ranks() const { return ranks_; }
  // True when no rank process is left.
  bool all_ranks_gone() const;

  // The launcher's exit status, or nullopt when it did not end within `seconds`.
  std::optional<int> wait_for_exit(double seconds);

  std::string err() const;
  // The launcher's own error line (ranks' lines carry a "[rank N] " prefix); "" when there is none.
  std::string summary() const;

 private:
  std::filesystem::path dir_;
  int nproc_;
  pid_t launcher_ = -1;
  std::map<int, pid_t> ranks_;
  std::optional<int> exit_status_;
};

// Runs `zhost run CONFIG ARGS` in `dir` with run.dir = dir/runs and run.name = name. `shell_prefix` runs in
// the same shell first, e.g. "ulimit -d 800000 && " to limit every rank's memory.
RunOutput run_zhost(const std::filesystem::path& dir, const std::string& config_text, const std::string& name,
                    const std::string& args, const std::string& shell_prefix = "");
// The same for a config file that exists (a DeepSpeed JSON of examples/, say).
RunOutput run_zhost_file(const std::filesystem::path& dir, const std::filesystem::path& config, const std::string& name,
                         const std::string& args, const std::string& shell_prefix = "");

// A TCP port nobody listens on right now.
int unused_port();
// Starts `argv` with stdout and stderr into files and `env` (NAME=VALUE) added; returns its pid.
pid_t spawn_logged(std::vector<std::string> argv, const std::filesystem::path& out, const std::filesystem::path& err,
                   const std::vector<std::string>& env = {});
// The exit code of `pid`, or -1 when it did not end within `seconds` (it is killed then).
int wait_for_exit_code(pid_t pid, double seconds);

// The job `sets` varies on two launchers of this machine as nodes 0 and 1 (--nnodes 2, --master-addr
// 127.0.0.1, a free port), `ranks_per_node` ranks each, both writing into one run directory (rank 0 chooses
// it, so every rank's steps.rankN.jsonl lands there). Node 1 gets 60 s after node 0 ends.
struct TwoNodeRun {
  RunOutput node0;  // rank 0's launcher: metrics.jsonl, model_states.json
  int node1_exit_code = -1;
  std::string node1_err;
  std::vector<std::vector<nlohmann::json>> rank_steps;  // steps.rankN.jsonl, by rank
};
TwoNodeRun run_on_two_nodes(const ScratchDir& dir, const std::string& name, const std::string& sets,
                            int ranks_per_node = 2);

// "" when every weight of `a` is within rtol * (its tensor's largest |value| in b) + atol of b's; else a
// description of the worst parameter. Both runs must hold the same parameters.
std::string weights_mismatch(const RunOutput& a, const RunOutput& b, double rtol, double atol);

// Expects every per-step loss of `a` within relative * |loss of b| of b's (same number of steps).
void expect_losses_near(const RunOutput& a, const RunOutput& b, double relative);

// CUDA tests skip, saying why, on machines without a GPU (no /dev/nvidiactl) and when this zhost was built
// without CUDA (`r`, a run with run.device = "cuda", failed saying so); any other failure is theirs to report.
bool cuda_device_present();
bool built_without_cuda(const RunOutput& r);

// Expects gradient clipping (small_job_config: at 0.5) to have acted in at least one step of `r`: an
// equality test of a partitioned run must clip, or it would not show that the partitioned norm is right.
void expect_clipping_acted(const RunOutput& r);

// RUN_DIR/model_states.json of a run (written by rank 0): measured model-state bytes vs ZeRO's formula.
nlohmann::json read_model_states(const RunOutput& r);

// "" when for every parameter ||a - b|| <= relative * ||b|| (2-norms over the tensor); else the worst one.
std::string weights_norm_mismatch(const RunOutput& a, const RunOutput& b, double relative);

}  // namespace zhost::testing
