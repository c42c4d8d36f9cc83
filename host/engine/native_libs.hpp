// host/engine/native_libs.hpp: which BLAS and which malloc this process actually runs with.
//
// LibTorch's CPU matrix products go to the BLAS it was built with: MKL inside libtorch_cpu.so for torch's wheel
// (Note [LibTorch from torch's wheel]); a LibTorch linked against the system's libblas.so.3 gets whatever the
// alternatives point at, which on Debian is the reference BLAS unless an optimised one is installed (~20x
// slower sgemm). The allocator matters as much for CPU training: glibc's malloc hands large temporaries back
// to the kernel and faults them in again every step. zhost names both at start so that a slow run explains
// itself; the answer comes from the libraries loaded in this process, not from the build.
#pragma once

#include <string>

namespace zhost::engine {

struct BlasInfo {
  std::string name;        // "OpenBLAS", "reference BLAS", "MKL", "BLIS" or "unknown"
  std::string detail;      // e.g. "0.3.21, OpenMP threads, core Haswell"
  std::string path;        // the libblas.so.3 (or equivalent) that is loaded, resolved
  bool reference = false;  // the slow netlib reference implementation
};

struct AllocatorInfo {
  std::string name;  // "tcmalloc", "jemalloc" or "glibc malloc"
  std::string path;  // the library that serves malloc
};

BlasInfo blas_in_use();
AllocatorInfo allocator_in_use();

// LibTorch logs through c10's logger, whose level TORCH_CPP_LOG_LEVEL sets (INFO, WARNING, ERROR, FATAL). A
// process has to ask c10 to read it, and a rank forked from the launcher (Note [Forked ranks]) gets its
// environment only after LibTorch was loaded: this applies the variable, when set.
void apply_log_environment();

// One line for logs and `zhost version`: "BLAS OpenBLAS (0.3.21, OpenMP threads, core Haswell); malloc tcmalloc".
std::string native_libs_summary();

}  // namespace zhost::engine
