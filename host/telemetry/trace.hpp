// host/telemetry/trace.hpp: the per-rank Chrome trace (Note [Trace file]).
//
// Note [Trace file]
// With run.trace = true every rank streams RUN_DIR/trace.rankN.json, a Chrome trace-event file laid out as
// PyTorch's profiler (Kineto) writes it: {"schemaVersion", "distributedInfo": {"backend", "rank",
// "world_size"}, "traceEvents": [...]}, so Perfetto, chrome://tracing and Holistic Trace Analysis read it
// unchanged. Events are complete events ("X", ts and dur in microseconds of CLOCK_MONOTONIC: ranks of one
// node share it, ranks of several nodes are not aligned) and counters ("C"); pid is the rank, tid a small
// number per host thread, with collectives on tracks of their own (tid 100 + lane: one lane per collective
// in flight, so overlapping asynchronous collectives never overlap on one track). Each event is formatted
// and written through a 1 MiB stdio buffer as it closes: memory stays bounded however long the run. The
// closing "]}" is written when the writer is destroyed; a rank that dies leaves a truncated array, which
// Perfetto still opens (`zhost trace merge` repairs it). Categories (the "cat" field):
//   step        one optimizer step (args: step)
//   forward     forward of one block (args: block), under "micro_batch"
//   backward    backward of one block: from its output's gradient hook to the previous block's
//   hook        the partition plugin's hooks (pre_forward, post_backward, grad_ready, backward_end, ...)
//   optimizer   the partition plugin's step
//   collective  a collective a plugin issued, start to completion (args: bytes, algbw/busbw GB/s, sent,
//               received: traffic.hpp's per-rank bytes)
//   copy        a host<->device copy of the host's copy services (args: bytes, direction)
//   plugin      a span a plugin opened with trace_begin/trace_end (name "plugin/span", e.g. stage3/tier_step,
//               the stage's span around its tier's step; the tiers open none of their own)
//   memory      counters: bytes by category (Note [Memory categories] in memory_timeline.hpp)
//   checkpoint  a checkpoint's save as training waits for it (args: step)
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>

namespace zhost::engine {

class TraceWriter {
 public:
  // Opens `path` and writes the header; throws zhost::Error when it cannot.
  TraceWriter(const std::string& path, int rank, int world_size, const std::string& backend);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  static uint64_t now_ns();  // CLOCK_MONOTONIC
  // A complete event on the calling thread's track (tid < 0) or on track `tid`. `args_json`: a JSON
  // object's text ("{...}") or empty.
  void complete(std::string_view category, std::string_view name, uint64_t begin_ns, uint64_t end_ns,
                std::string_view args_json = {}, int tid = -1);
  // A counter event: `values_json` is a JSON object of numbers.
  void counter(std::string_view name, uint64_t ts_ns, std::string_view values_json);
  // Names track `tid` (a metadata event), e.g. "collectives 0".
  void name_track(int tid, std::string_view name);

  // The calling thread's track number: 0 for the first thread that asks, then 1, 2, ...
  int thread_track();
  // A lane of collective tracks (tid 100 + lane) free until release_lane().
  int acquire_lane();
  void release_lane(int lane);

 private:
  void write_event(const std::string& text);

  std::mutex mutex_;
  std::FILE* file_ = nullptr;
  std::string path_;
  int rank_;
  bool first_ = true;
  uint64_t lanes_busy_ = 0;  // bit i: lane i in use
  uint64_t lanes_named_ = 0;
};

// RAII: a complete event from construction to destruction; does nothing (and formats nothing) when
// `trace` is null. `name` and `arg_key` must outlive the scope (string literals). With arg_key set the event
// carries {arg_key: arg_value}.
class TraceScope {
 public:
  TraceScope(TraceWriter* trace, std::string_view category, std::string_view name, std::string_view arg_key = {},
             int64_t arg_value = 0)
      : trace_(trace),
        category_(category),
        name_(name),
        arg_key_(arg_key),
        arg_value_(arg_value),
        begin_(trace ? TraceWriter::now_ns() : 0) {}
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  TraceWriter* trace_;
  std::string_view category_, name_, arg_key_;
  int64_t arg_value_;
  uint64_t begin_;
};

}  // namespace zhost::engine
