// host/engine/native_libs.cpp: the BLAS and malloc loaded in this process (see the header).
#include "host/engine/native_libs.hpp"

#include <c10/util/Logging.h>
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
  } else if (blas.path.find("mkl") != std::string::npos || file.rfind("libtorch_cpu", 0) == 0) {
    // torch's wheel links MKL into libtorch_cpu.so (Note [LibTorch from torch's wheel]).
    blas.name = "MKL";
    if (auto version = symbol<void (*)(char*, int)>("MKL_Get_Version_String")) {
      char text[198] = {};
      version(text, sizeof text - 1);
      // "Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build ...": the word after "Version".
      std::istringstream words(text);
      for (std::string word; words >> word;) {
        if (word == "Version" && words >> word) blas.detail = word.substr(0, word.find('-'));
      }
    }
    if (file.rfind("libtorch_cpu", 0) == 0) blas.detail += blas.detail.empty() ? "in LibTorch" : ", in LibTorch";
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
  if (std::getenv("TORCH_CPP_LOG_LEVEL") != nullptr) c10::initLogging();  // reads the variable
}

}  // namespace zhost::engine
