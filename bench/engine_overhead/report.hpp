// bench/engine_overhead/report.hpp: turns a run.sh results folder into the tables of RESULTS.md (how the
// figures are estimated: report.cpp).
//
// The folder holds, per configuration LABEL and round K:
//   LABEL/roundK/reference.json       written by `bench_engine_overhead reference`
//   LABEL/roundK/zhost/metrics.jsonl  written by `zhost run` (run.dir = LABEL/roundK, run.name = zhost)
// and hooks.json, Google Benchmark's JSON output of `bench_engine_overhead hooks`.
#pragma once

#include <string>

namespace zhost::bench {

// Prints the tables (Markdown) to stdout. Throws zhost::Error when the folder holds no complete round.
void print_report(const std::string& results_dir);

}  // namespace zhost::bench
