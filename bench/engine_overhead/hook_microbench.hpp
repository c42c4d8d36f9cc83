// bench/engine_overhead/hook_microbench.hpp: Google Benchmark cases for the per-call costs zhost adds to a
// step: a partition hook called through the ABI's function pointer (the built-in stage 0 instance that
// `zhost run` uses), and the DLPack views made around every gradient hand-over.
#pragma once

#include "host/job/job_setup.hpp"

namespace zhost::bench {

// Creates the job's partition instance, registers the cases and runs them; `argc`/`argv` carry Google
// Benchmark's own flags (--benchmark_format=json, --benchmark_out=FILE, ...). Returns the exit code.
int run_hook_benchmarks(JobSetup& job, int argc, char** argv);

}  // namespace zhost::bench
