// host/engine/native_libs.cpp: the BLAS and malloc loaded in this process (see the header).
#include "host/engine/native_libs.hpp"

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <sstream>

namespace zhost::engine {
namespace {

template <typename Function>
Function symbol(const char* name) {
  return reinterpret_cast<Function>(::dlsym(RTLD_DEFAULT, name));
}

// The file a loaded symbol lives in, resolved through symbolic links (Debian's alternatives).
std::string library_of(void* address) {
  Dl_info info{};
  if (!address || !::dladdr(address, &info) || !info.dli_fname) return "";
  std::error_code ec;
  const auto resolved = std::filesystem::canonical(info.dli_fname, ec);
  return ec ? info.dli_fname : resolved.string();
}

}  // namespace

BlasInfo blas_in_use() {
  BlasInfo blas;
  // The sgemm_ that LibTorch's calls bind to: the first in the global lookup order. Other BLAS builds may
  // be loaded beside it (Debian's LAPACK alternative can pull in OpenBLAS while libblas.so.3 is the
  // reference one), so the library that serves sgemm_ decides, not which symbols exist.
  blas.path = library_of(::dlsym(RTLD_DEFAULT, "sgemm_"));
  const std::string file = std::filesystem::path(blas.path).filename().string();
  if (blas.path.find("openblas") != std::string::npos) {
    blas.name = "OpenBLAS";
    if (auto get_config = symbol<char* (*)()>("openblas_get_config")) {
      // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64": the version is the second word.
      std::istringstream words(get_config());
      std::string first, version;
      words >> first >> version;
      blas.detail = version;
    }
    if (auto get_parallel = symbol<int (*)()>("openblas_get_parallel")) {
      const int parallel = get_parallel();
      blas.detail += parallel == 0 ? ", sequential" : parallel == 1 ? ", pthreads" : ", OpenMP threads";
    }
    if (auto get_core = symbol<char* (*)()>("openblas_get_corename"))
      blas.detail += std::string(", core ") + get_core();
  } else if (blas.path.find("mkl") != std::string::npos) {
    blas.name = "MKL";
  } else if (blas.path.find("blis") != std::string::npos) {
    blas.name = "BLIS";
  } else if (blas.path.find("/blas/libblas.so") != std::string::npos) {
    blas.name = "reference BLAS";  // Debian's netlib build, /usr/lib/<triplet>/blas/libblas.so.3
    blas.reference = true;
  } else {
    blas.name = blas.path.empty() ? "none found" : "unknown (" + file + ")";
  }
  return blas;
}

AllocatorInfo allocator_in_use() {
  AllocatorInfo allocator;
  allocator.path = library_of(::dlsym(RTLD_DEFAULT, "malloc"));
  if (::dlsym(RTLD_DEFAULT, "tc_malloc")) {
    allocator.name = "tcmalloc";
  } else if (::dlsym(RTLD_DEFAULT, "mallctl")) {
    allocator.name = "jemalloc";
  } else {
    allocator.name = "glibc malloc";
  }
  return allocator;
}

std::string native_libs_summary() {
  const BlasInfo blas = blas_in_use();
  std::string line = "BLAS " + blas.name;
  if (!blas.detail.empty()) line += " (" + blas.detail + ")";
  return line + "; malloc " + allocator_in_use().name;
}

}  // namespace zhost::engine

namespace zhost::engine {

void apply_log_environment() {
  const char* level = std::getenv("GLOG_minloglevel");
  if (level == nullptr) return;
  char* end = nullptr;
  const long value = std::strtol(level, &end, 10);
  if (end == level || *end != '\0') return;  // glog would ignore it too
  // glog's flag, as LibTorch's c10 links it (libglog exports it with C++ linkage).
  if (auto* min_log_level = static_cast<int32_t*>(::dlsym(RTLD_DEFAULT, "_ZN3fLI17FLAGS_minloglevelE"))) {
    *min_log_level = static_cast<int32_t>(value);
  }
}

}  // namespace zhost::engine
