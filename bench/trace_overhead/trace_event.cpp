// bench/trace_overhead/trace_event.cpp: what one trace event costs the thread that records it: a
// TraceScope with an argument written to a real file (the hooks' events), a collective's event with its
// figures, and a TraceScope with tracing off (what every hook pays when run.trace = false).
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "host/telemetry/trace.hpp"

namespace {

std::string scratch_file() { return fmt::format("/tmp/zhost-bench-trace-{}.json", ::getpid()); }

void BM_ScopeTraced(benchmark::State& state) {
  const std::string path = scratch_file();
  {
    zhost::engine::TraceWriter trace(path, 0, 2, "gloo");
    int64_t block = 0;
    for (auto _ : state) {
      const zhost::engine::TraceScope span(&trace, "hook", "pre_forward", "block", ++block);
    }
  }
  std::remove(path.c_str());
}
BENCHMARK(BM_ScopeTraced);

void BM_CollectiveEvent(benchmark::State& state) {
  const std::string path = scratch_file();
  {
    zhost::engine::TraceWriter trace(path, 0, 2, "gloo");
    for (auto _ : state) {
      const int lane = trace.acquire_lane();
      const uint64_t begin = zhost::engine::TraceWriter::now_ns();
      trace.complete("collective", "all_gather", begin, zhost::engine::TraceWriter::now_ns(),
                     fmt::format(R"({{"bytes": {}, "sent": {}, "received": {}, "ranks": {}, "algbw_GBps": {:.4f}, )"
                                 R"("busbw_GBps": {:.4f}}})",
                                 1751040, 875520, 875520, 2, 6.9, 3.4),
                     lane);
      trace.release_lane(lane);
    }
  }
  std::remove(path.c_str());
}
BENCHMARK(BM_CollectiveEvent);

void BM_ScopeOff(benchmark::State& state) {
  int64_t block = 0;
  for (auto _ : state) {
    const zhost::engine::TraceScope span(nullptr, "hook", "pre_forward", "block", ++block);
    benchmark::DoNotOptimize(&span);
  }
}
BENCHMARK(BM_ScopeOff);

}  // namespace

BENCHMARK_MAIN();
