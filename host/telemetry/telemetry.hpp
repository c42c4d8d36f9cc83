// host/telemetry/telemetry.hpp: what a run reports. Every step rank 0 appends a record to RUN_DIR/metrics.jsonl
// (schema: docs/profiling.md "metrics.jsonl") and every rank its memory by category to
// RUN_DIR/steps.rankN.jsonl (Note [Memory categories]); every steps_per_print steps rank 0 prints one line
// (step, loss, lr, loss scale, gradient norm, samples/s, tokens/s, model TFLOP/s, memory, and with
// wall_clock_breakdown the forward/backward/reduction/step milliseconds, also under DeepSpeed's timer
// names). The run directory also receives the resolved config and, from rank 0, the log (run.log).
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "host/telemetry/memory_timeline.hpp"

namespace zhost::engine {

struct MemoryUsage {
  double rss_mb = 0;       // resident set size of this process
  double peak_rss_mb = 0;  // its high-water mark
  std::optional<double> cuda_allocated_mb, cuda_peak_mb, cuda_reserved_mb;
};
MemoryUsage current_memory();
// Whether this process has used CUDA's caching allocator, whose statistics exist only then: a CPU run on a
// machine with a GPU has not, and asking it for them fails ("Invalid device argument").
bool cuda_allocator_in_use();

struct StepRecord {
  int64_t step = 0;           // optimizer steps attempted
  int64_t applied_steps = 0;  // steps not skipped for overflow
  double loss = 0;            // mean over ranks and micro-batches since the previous record
  double lr = 0;
  double loss_scale = 1;
  double grad_norm = 0;
  bool skipped = false;
  double samples_per_s = 0;
  double tokens_per_s = 0;
  double tflops = 0;           // model FLOPs (6N + attention) per second, all ranks together
  double flops_per_token = 0;  // the training FLOPs per token behind tflops (random-LTD lowers a step's)
  double mfu = 0;              // tflops / the job's peak (Note [Model FLOPs utilization], peak_flops.hpp)
  double forward_ms = 0, backward_ms = 0, reduction_ms = 0, step_ms = 0;  // averages since the previous record
  // Plugins' trace spans ("plugin/name", ms per step since the previous record), e.g. stage3/gather_wait.
  std::vector<std::pair<std::string, double>> plugin_ms;
  // This rank, last step, every group of the job; the inter-node part (included) as host/comm/traffic.hpp's
  // Note [Inter-node traffic] defines it.
  uint64_t comm_bytes_sent = 0, comm_bytes_received = 0;
  uint64_t comm_inter_node_bytes_sent = 0, comm_inter_node_bytes_received = 0;
  MemoryUsage memory;
  MemoryCategories memory_bytes;  // this rank, at the end of the step (Note [Memory categories])
  double step_time_ms = 0;        // wall time of the step(s) the record covers, per step
  bool printed = false;           // a steps_per_print record (its line was logged)
  // Where the optimizer's states and stage 3's offloaded parameter shards were during the step (Note [Storage
  // swap]); "": no such tier.
  std::string optimizer_storage, param_storage;
};

// DIR/NAME, or DIR/<timestamp> when NAME is empty (every rank must use rank 0's: engine.cpp shares it).
std::string run_directory_path(const std::string& dir, const std::string& name);
// Creates the run directory and its parents; UsageError naming the path and the real cause (permission
// denied, read-only file system, ...) when it cannot. Rank 0 calls it before opening run.log there.
void create_run_directory(const std::string& path);

class RunDirectory {
 public:
  // Creates `path` (every rank: a rank writes its own files there), and as `writer` (rank 0) writes
  // config.toml and opens metrics.jsonl; every rank opens steps.rank<rank>.jsonl.
  RunDirectory(const std::string& path, const std::string& resolved_config, bool writer, int rank);
  const std::string& path() const { return path_; }
  void append_metrics(const StepRecord& record);      // rank 0 only: other ranks write nothing
  void append_rank_record(const StepRecord& record);  // every rank
  // Writes DIR/NAME (rank 0 only), replacing it.
  void write_file(const std::string& name, const std::string& text) const;

 private:
  std::string path_;
  bool writer_;
  int rank_;
  std::ofstream metrics_, memory_;
};

// A one-line progress bar redrawn on stderr after every step, shown only when stderr is a terminal
// (ranks under `zhost run --nproc` write to pipes and print their step lines only).
class ProgressBar {
 public:
  explicit ProgressBar(int64_t total_steps);
  void update(int64_t step, double loss);
  void clear();  // before a log line, so the line is not drawn over the bar
  ~ProgressBar();

 private:
  int64_t total_;
  bool enabled_;
  bool drawn_ = false;
};

// One console line for `record`.
std::string format_step_line(const StepRecord& record, int64_t total_steps, bool breakdown);
// DeepSpeed's wall_clock_breakdown line: "time (ms) | fwd_microstep: ... | bwd_microstep: ... | ...".
std::string format_timers_line(const StepRecord& record);

}  // namespace zhost::engine
