// host/engine/telemetry.hpp: what a run reports. Every steps_per_print steps rank 0 prints one line
// (step, loss, lr, loss scale, gradient norm, samples/s, tokens/s, model TFLOP/s, memory, and with
// wall_clock_breakdown the forward/backward/reduction/step milliseconds) and appends the same record to
// RUN_DIR/metrics.jsonl. The run directory also receives the resolved config.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace zhost::engine {

struct MemoryUsage {
  double rss_mb = 0;        // resident set size of this process
  double peak_rss_mb = 0;   // its high-water mark
  std::optional<double> cuda_allocated_mb, cuda_peak_mb, cuda_reserved_mb;
};
MemoryUsage current_memory();

struct StepRecord {
  int64_t step = 0;            // optimizer steps attempted
  int64_t applied_steps = 0;   // steps not skipped for overflow
  double loss = 0;             // mean over ranks and micro-batches since the previous record
  double lr = 0;
  double loss_scale = 1;
  double grad_norm = 0;
  bool skipped = false;
  double samples_per_s = 0;
  double tokens_per_s = 0;
  double tflops = 0;           // model FLOPs (6N + attention) per second, all ranks together
  double forward_ms = 0, backward_ms = 0, reduction_ms = 0, step_ms = 0;  // averages since the previous record
  // Plugins' trace spans ("plugin/name", ms per step since the previous record), e.g. stage3/gather_wait.
  std::vector<std::pair<std::string, double>> plugin_ms;
  uint64_t comm_bytes_sent = 0, comm_bytes_received = 0;  // this rank, last step
  MemoryUsage memory;
};

class RunDirectory {
 public:
  // Creates DIR/NAME (NAME empty: a timestamp), writes config.toml; only rank 0 writes.
  RunDirectory(const std::string& dir, const std::string& name, const std::string& resolved_config, bool writer);
  const std::string& path() const { return path_; }
  void append_metrics(const StepRecord& record);
  // Writes DIR/NAME (rank 0 only), replacing it.
  void write_file(const std::string& name, const std::string& text) const;

 private:
  std::string path_;
  bool writer_;
  std::ofstream metrics_;
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

}  // namespace zhost::engine
