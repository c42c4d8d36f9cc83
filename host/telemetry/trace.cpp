// host/telemetry/trace.cpp: streaming writer of the per-rank Chrome trace (Note [Trace file]).
#include "host/telemetry/trace.hpp"

#include <fmt/format.h>
#include <time.h>

#include <atomic>
#include <nlohmann/json.hpp>

#include "host/core/error.hpp"

namespace zhost::engine {
namespace {

constexpr int kLaneTrackBase = 100;
constexpr int kMaxLanes = 64;

// Microseconds with nanosecond digits, as Chrome's "ts" and "dur" take them.
std::string micros(uint64_t ns) { return fmt::format("{}.{:03}", ns / 1000, ns % 1000); }

std::string json_string(std::string_view text) { return nlohmann::json(std::string(text)).dump(); }

}  // namespace

uint64_t TraceWriter::now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

TraceWriter::TraceWriter(const std::string& path, int rank, int world_size, const std::string& backend)
    : path_(path), rank_(rank) {
  file_ = std::fopen(path.c_str(), "w");
  if (!file_) fail("cannot write the trace {}; set run.dir to a writable folder or run.trace = false", path);
  std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
  nlohmann::json info{{"backend", backend}, {"rank", rank}, {"world_size", world_size}};
  fmt::print(file_,
             "{{\"schemaVersion\": 1, \"distributedInfo\": {}, \"displayTimeUnit\": \"ms\", \"traceEvents\": [\n",
             info.dump());
  write_event(fmt::format(
      R"({{"ph": "M", "name": "process_name", "pid": {0}, "tid": 0, "args": {{"name": "rank {0}"}}}})", rank));
  write_event(fmt::format(
      R"({{"ph": "M", "name": "process_sort_index", "pid": {0}, "tid": 0, "args": {{"sort_index": {0}}}}})", rank));
}

TraceWriter::~TraceWriter() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::fputs("\n]}\n", file_);
  std::fclose(file_);
}

void TraceWriter::write_event(const std::string& text) {
  if (!first_) std::fputs(",\n", file_);
  first_ = false;
  std::fputs(text.c_str(), file_);
}

int TraceWriter::thread_track() {
  // One number per (writer, thread); a thread that serves two writers in turn (tests) asks again.
  thread_local const TraceWriter* owner = nullptr;
  thread_local int track = -1;
  if (owner == this) return track;
  static std::atomic<int> next{0};
  owner = this;
  track = next++;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    write_event(fmt::format(R"({{"ph": "M", "name": "thread_name", "pid": {}, "tid": {}, "args": {{"name": {}}}}})",
                            rank_, track, json_string(track == 0 ? "main" : fmt::format("thread {}", track))));
  }
  return track;
}

void TraceWriter::name_track(int tid, std::string_view name) {
  std::lock_guard<std::mutex> lock(mutex_);
  write_event(fmt::format(R"({{"ph": "M", "name": "thread_name", "pid": {}, "tid": {}, "args": {{"name": {}}}}})",
                          rank_, tid, json_string(name)));
}

int TraceWriter::acquire_lane() {
  int lane = 0;
  bool fresh = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    while (lane < kMaxLanes - 1 && (lanes_busy_ >> lane & 1)) ++lane;  // the last lane is shared when all are busy
    lanes_busy_ |= 1ull << lane;
    fresh = !(lanes_named_ >> lane & 1);
    lanes_named_ |= 1ull << lane;
  }
  if (fresh) name_track(kLaneTrackBase + lane, fmt::format("collectives {}", lane));
  return kLaneTrackBase + lane;
}

void TraceWriter::release_lane(int lane) {
  std::lock_guard<std::mutex> lock(mutex_);
  lanes_busy_ &= ~(1ull << (lane - kLaneTrackBase));
}

void TraceWriter::complete(std::string_view category, std::string_view name, uint64_t begin_ns, uint64_t end_ns,
                           std::string_view args_json, int tid) {
  if (tid < 0) tid = thread_track();
  std::string event =
      fmt::format(R"({{"ph": "X", "cat": "{}", "name": {}, "pid": {}, "tid": {}, "ts": {}, "dur": {})", category,
                  json_string(name), rank_, tid, micros(begin_ns), micros(end_ns > begin_ns ? end_ns - begin_ns : 0));
  if (!args_json.empty()) event += fmt::format(", \"args\": {}", args_json);
  event += "}";
  std::lock_guard<std::mutex> lock(mutex_);
  write_event(event);
}

void TraceWriter::counter(std::string_view name, uint64_t ts_ns, std::string_view values_json) {
  std::string event =
      fmt::format(R"({{"ph": "C", "cat": "memory", "name": {}, "pid": {}, "tid": 0, "ts": {}, "args": {}}})",
                  json_string(name), rank_, micros(ts_ns), values_json);
  std::lock_guard<std::mutex> lock(mutex_);
  write_event(event);
}

TraceScope::~TraceScope() {
  if (!trace_) return;
  const uint64_t end = TraceWriter::now_ns();
  if (arg_key_.empty()) {
    trace_->complete(category_, name_, begin_, end);
  } else {
    trace_->complete(category_, name_, begin_, end, fmt::format("{{\"{}\": {}}}", arg_key_, arg_value_));
  }
}

}  // namespace zhost::engine
