// host/telemetry/telemetry.cpp: run directory, metrics.jsonl records, console lines, memory readings.
#include "host/telemetry/telemetry.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

#include "host/core/error.hpp"

#if ZHOST_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace zhost::engine {
namespace fs = std::filesystem;

MemoryUsage current_memory() {
  MemoryUsage usage;
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    double kb = 0;
    if (key == "VmRSS:" && status >> kb)
      usage.rss_mb = kb / 1024;
    else if (key == "VmHWM:" && status >> kb)
      usage.peak_rss_mb = kb / 1024;
    status.ignore(1 << 12, '\n');
  }
#if ZHOST_WITH_CUDA
  if (cuda_allocator_in_use()) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
    constexpr size_t kAll = 0;  // StatType::AGGREGATE
    usage.cuda_allocated_mb = stats.allocated_bytes[kAll].current / 1048576.0;
    usage.cuda_peak_mb = stats.allocated_bytes[kAll].peak / 1048576.0;
    usage.cuda_reserved_mb = stats.reserved_bytes[kAll].current / 1048576.0;
  }
#endif
  return usage;
}

bool cuda_allocator_in_use() {
#if ZHOST_WITH_CUDA
  return c10::cuda::device_count() > 0 && c10::cuda::CUDACachingAllocator::get()->initialized();
#else
  return false;
#endif
}

namespace {

std::string timestamp_name() {
  std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof(text), "%Y%m%d-%H%M%S", std::localtime(&now));
  return text;
}

}  // namespace

std::string run_directory_path(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / (name.empty() ? timestamp_name() : name)).string();
}

void create_run_directory(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  std::error_code is_dir_ec;
  if (fs::is_directory(path, is_dir_ec)) return;
  // The cause is the first folder that could not be made (permission denied, read-only file system, a file in
  // the way), not the missing run.log that a later open would report.
  if (!ec) ec = is_dir_ec ? is_dir_ec : std::make_error_code(std::errc::not_a_directory);
  fail_usage("cannot create the run directory {}: {}; set run.dir to a writable folder", path, ec.message());
}

RunDirectory::RunDirectory(const std::string& path, const std::string& resolved_config, bool writer, int rank)
    : path_(path), writer_(writer), rank_(rank) {
  create_run_directory(path_);
  memory_.open(fs::path(path_) / fmt::format("steps.rank{}.jsonl", rank_), std::ios::trunc);
  if (!memory_) fail("cannot write {}/steps.rank{}.jsonl", path_, rank_);
  if (!writer_) return;
  std::ofstream(fs::path(path_) / "config.toml") << resolved_config;
  metrics_.open(fs::path(path_) / "metrics.jsonl", std::ios::trunc);
  if (!metrics_) fail("cannot write {}/metrics.jsonl", path_);
}

void RunDirectory::append_rank_record(const StepRecord& r) {
  nlohmann::json j{{"step", r.step},
                   {"rank", rank_},
                   {"forward_ms", r.forward_ms},
                   {"backward_ms", r.backward_ms},
                   {"reduction_ms", r.reduction_ms},
                   {"step_ms", r.step_ms},
                   {"step_time_ms", r.step_time_ms},
                   {"comm_bytes_sent", r.comm_bytes_sent},
                   {"comm_bytes_received", r.comm_bytes_received},
                   {"comm_inter_node_bytes_sent", r.comm_inter_node_bytes_sent},
                   {"comm_inter_node_bytes_received", r.comm_inter_node_bytes_received}};
  for (const auto& [name, ms] : r.plugin_ms) j[name + "_ms"] = ms;
  nlohmann::json memory = nlohmann::json::object();
  for (const auto& [name, bytes] : r.memory_bytes) memory[name] = bytes;
  j["memory"] = memory;
  memory_ << j.dump() << "\n";
  memory_.flush();
  if (!memory_) fail("cannot append to {}/steps.rank{}.jsonl (disk full?)", path_, rank_);
}

void RunDirectory::write_file(const std::string& name, const std::string& text) const {
  if (!writer_) return;
  std::ofstream file(fs::path(path_) / name, std::ios::trunc);
  file << text;
  file.flush();
  if (!file) fail("cannot write {}/{} (disk full?)", path_, name);
}

void RunDirectory::append_metrics(const StepRecord& r) {
  if (!writer_) return;
  nlohmann::json j{{"step", r.step},
                   {"applied_steps", r.applied_steps},
                   {"loss", r.loss},
                   {"lr", r.lr},
                   {"loss_scale", r.loss_scale},
                   {"grad_norm", r.grad_norm},
                   {"skipped", r.skipped},
                   {"samples_per_s", r.samples_per_s},
                   {"tokens_per_s", r.tokens_per_s},
                   {"tflops", r.tflops},
                   {"flops_per_token", r.flops_per_token},
                   {"mfu", r.mfu},
                   {"forward_ms", r.forward_ms},
                   {"backward_ms", r.backward_ms},
                   {"reduction_ms", r.reduction_ms},
                   {"step_ms", r.step_ms},
                   // DeepSpeed's wall_clock_breakdown timers, per micro-batch (microstep) and per step
                   {"fwd_microstep_ms", r.forward_ms},
                   {"bwd_microstep_ms", r.backward_ms + r.reduction_ms},
                   {"bwd_inner_microstep_ms", r.backward_ms},
                   {"bwd_allreduce_microstep_ms", r.reduction_ms},
                   {"step_microstep_ms", r.step_ms},
                   {"step_time_ms", r.step_time_ms},
                   {"printed", r.printed},
                   {"comm_bytes_sent", r.comm_bytes_sent},
                   {"comm_bytes_received", r.comm_bytes_received},
                   {"comm_inter_node_bytes_sent", r.comm_inter_node_bytes_sent},
                   {"comm_inter_node_bytes_received", r.comm_inter_node_bytes_received},
                   {"rss_mb", r.memory.rss_mb},
                   {"peak_rss_mb", r.memory.peak_rss_mb}};
  if (!r.optimizer_storage.empty()) j["optimizer_storage"] = r.optimizer_storage;
  if (!r.param_storage.empty()) j["param_storage"] = r.param_storage;
  for (const auto& [name, ms] : r.plugin_ms) j[name + "_ms"] = ms;  // e.g. "stage3/gather_wait_ms"
  nlohmann::json memory = nlohmann::json::object();
  for (const auto& [name, bytes] : r.memory_bytes) memory[name] = bytes;
  j["memory"] = memory;
  if (r.memory.cuda_allocated_mb) {
    j["cuda_allocated_mb"] = *r.memory.cuda_allocated_mb;
    j["cuda_peak_mb"] = *r.memory.cuda_peak_mb;
    j["cuda_reserved_mb"] = *r.memory.cuda_reserved_mb;
  }
  // JSON has no NaN/inf: an overflowing step's norm is written as null.
  if (!std::isfinite(r.grad_norm)) j["grad_norm"] = nullptr;
  if (!std::isfinite(r.loss)) j["loss"] = nullptr;
  metrics_ << j.dump() << "\n";
  metrics_.flush();
  if (!metrics_) fail("cannot append to {}/metrics.jsonl (disk full?)", path_);
}

ProgressBar::ProgressBar(int64_t total_steps) : total_(total_steps), enabled_(::isatty(2) != 0) {}

void ProgressBar::update(int64_t step, double loss) {
  if (!enabled_) return;
  constexpr int kWidth = 30;
  int filled = static_cast<int>(kWidth * step / std::max<int64_t>(total_, 1));
  std::string bar(static_cast<size_t>(filled), '=');
  bar.resize(kWidth, ' ');
  std::fprintf(stderr, "\r\033[K[%s] step %lld/%lld loss %.4f", bar.c_str(), static_cast<long long>(step),
               static_cast<long long>(total_), loss);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::clear() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

ProgressBar::~ProgressBar() { clear(); }

std::string format_step_line(const StepRecord& r, int64_t total_steps, bool breakdown) {
  std::string line =
      fmt::format("step {}/{} loss {:.4f} lr {:.3e} grad_norm {:.3f}", r.step, total_steps, r.loss, r.lr, r.grad_norm);
  if (r.loss_scale != 1) line += fmt::format(" loss_scale {:g}", r.loss_scale);
  if (r.skipped) line += " (skipped: overflow)";
  line += fmt::format(" | {:.1f} samples/s {:.0f} tokens/s {:.3f} TFLOP/s MFU {:.1f}% | rss {:.0f} MB peak {:.0f} MB",
                      r.samples_per_s, r.tokens_per_s, r.tflops, 100 * r.mfu, r.memory.rss_mb, r.memory.peak_rss_mb);
  if (r.memory.cuda_allocated_mb)
    line += fmt::format(" | cuda alloc {:.0f} MB peak {:.0f} MB reserved {:.0f} MB", *r.memory.cuda_allocated_mb,
                        *r.memory.cuda_peak_mb, *r.memory.cuda_reserved_mb);
  if (breakdown)
    line += fmt::format(" | fwd {:.1f} bwd {:.1f} reduce {:.1f} step {:.1f} ms", r.forward_ms, r.backward_ms,
                        r.reduction_ms, r.step_ms);
  if (breakdown)
    for (const auto& [name, ms] : r.plugin_ms) line += fmt::format(" {} {:.1f}", name, ms);
  return line;
}

std::string format_timers_line(const StepRecord& r) {
  return fmt::format(
      "time (ms) | fwd_microstep: {:.2f} | bwd_microstep: {:.2f} | bwd_inner_microstep: {:.2f} | "
      "bwd_allreduce_microstep: {:.2f} | step_microstep: {:.2f}",
      r.forward_ms, r.backward_ms + r.reduction_ms, r.backward_ms, r.reduction_ms, r.step_ms);
}

}  // namespace zhost::engine
