// host/engine/native_libs.hpp: which BLAS and which malloc this process actually runs with.
//
// LibTorch's CPU matrix products go to whatever libblas.so.3 the system's alternatives point at: on Debian
// that is the reference BLAS unless an optimised one (OpenBLAS) is installed, and the difference is ~20x
// in sgemm. The allocator matters as much for CPU training: glibc's malloc hands large temporaries back to
// the kernel and faults them in again every step. zhost names both at start so that a slow run explains
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

// LibTorch logs through glog, which reads GLOG_minloglevel once, when it is loaded. A rank forked from the
// launcher (Note [Forked ranks]) gets its environment later: this applies the variable, when set, again.
void apply_log_environment();

// One line for logs and `zhost version`: "BLAS OpenBLAS (0.3.21, OpenMP threads, core Haswell); malloc tcmalloc".
std::string native_libs_summary();

}  // namespace zhost::engine
