// tests/training/training_test_support.hpp: running `zhost run` from tests and reading what a run left
// in its run directory (metrics.jsonl, weights.bin + weights.json).
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/scratch_dir.hpp"

namespace zhost::testing {

struct RunOutput {
  int exit_code = -1;
  std::string out, err;
  std::filesystem::path run_dir;
  std::vector<double> losses;                        // per printed step
  std::map<std::string, std::vector<float>> weights;  // name -> final fp32 values (when saved)
  std::vector<std::map<std::string, double>> metrics;  // metrics.jsonl records (numeric fields)
};

// A small GPT job on text (the Debian license texts), fp32, every step printed, final weights saved.
// Vary it with --set in run_zhost's `args`.
std::string small_job_config();


// Runs `zhost run CONFIG ARGS` in `dir` with run.dir = dir/runs and run.name = name. `shell_prefix` runs in
// the same shell first, e.g. "ulimit -d 800000 && " to limit every rank's memory.
RunOutput run_zhost(const std::filesystem::path& dir, const std::string& config_text, const std::string& name,
                    const std::string& args, const std::string& shell_prefix = "");

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
