# Finds zhost's dependencies (all from Debian's packages; see scripts/setup-deps) and wraps them in
# imported/interface targets with stable names.
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(Boost 1.74 REQUIRED)            # header-only: Boost.DLL
find_path(ZHOST_DLPACK_INCLUDE dlpack/dlpack.h REQUIRED)
find_path(ZHOST_XXHASH_INCLUDE xxhash.h REQUIRED)
find_library(ZHOST_XXHASH_LIB xxhash REQUIRED)
find_path(ZHOST_URING_INCLUDE liburing.h)
find_library(ZHOST_URING_LIB uring)

add_library(zhost_dlpack INTERFACE)
target_include_directories(zhost_dlpack SYSTEM INTERFACE ${ZHOST_DLPACK_INCLUDE})
add_library(zhost_xxhash INTERFACE)
target_include_directories(zhost_xxhash SYSTEM INTERFACE ${ZHOST_XXHASH_INCLUDE})
target_link_libraries(zhost_xxhash INTERFACE ${ZHOST_XXHASH_LIB})

# libsentencepiece (optional): data.tokenizer (host/data/tokenizer.hpp), only ever linked into a shared object of
# its own (Note [SentencePiece in its own scope], host/data/sentencepiece_shim.cpp); without it the key is refused
# with what to install.
find_path(ZHOST_SENTENCEPIECE_INCLUDE sentencepiece_processor.h)
find_library(ZHOST_SENTENCEPIECE_LIB sentencepiece)
if(ZHOST_SENTENCEPIECE_INCLUDE AND ZHOST_SENTENCEPIECE_LIB)
  set(ZHOST_HAS_SENTENCEPIECE ON)
  add_library(zhost_sentencepiece INTERFACE)
  target_include_directories(zhost_sentencepiece SYSTEM INTERFACE ${ZHOST_SENTENCEPIECE_INCLUDE})
  target_link_libraries(zhost_sentencepiece INTERFACE ${ZHOST_SENTENCEPIECE_LIB})
else()
  set(ZHOST_HAS_SENTENCEPIECE OFF)
  message(STATUS "zhost: libsentencepiece not found: data.tokenizer will be refused (install libsentencepiece-dev)")
endif()

# Boost.DLL, header-only on std::filesystem (no Boost.Filesystem library needed).
add_library(zhost_boost_dll INTERFACE)
target_link_libraries(zhost_boost_dll INTERFACE Boost::headers ${CMAKE_DL_LIBS})
target_compile_definitions(zhost_boost_dll INTERFACE BOOST_DLL_USE_STD_FS)

if(ZHOST_WITH_TORCH)
  find_package(Torch REQUIRED)
  # LibTorch's config reports CUDA through TORCH_CUDA_LIBRARIES / the torch_cuda target.
  if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
    set(ZHOST_TORCH_HAS_CUDA ON)
  else()
    set(ZHOST_TORCH_HAS_CUDA OFF)
  endif()
  # Default: on exactly when LibTorch has CUDA; -DZHOST_WITH_CUDA=OFF still builds CPU-only against it.
  option(ZHOST_WITH_CUDA "Build CUDA code paths (needs a CUDA LibTorch)" ${ZHOST_TORCH_HAS_CUDA})
  if(ZHOST_WITH_CUDA AND NOT ZHOST_TORCH_HAS_CUDA)
    message(FATAL_ERROR "ZHOST_WITH_CUDA=ON needs a LibTorch built with CUDA; this one (${TORCH_INSTALL_PREFIX}) has none")
  endif()
  add_library(zhost_torch INTERFACE)
  target_link_libraries(zhost_torch INTERFACE ${TORCH_LIBRARIES})
  target_include_directories(zhost_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
  if(ZHOST_WITH_CUDA)
    target_compile_definitions(zhost_torch INTERFACE ZHOST_WITH_CUDA=1)
  endif()
  message(STATUS "zhost: LibTorch ${Torch_VERSION}, CUDA in LibTorch: ${ZHOST_TORCH_HAS_CUDA}, ZHOST_WITH_CUDA: ${ZHOST_WITH_CUDA}")
endif()
if(NOT ZHOST_WITH_TORCH)
  set(ZHOST_WITH_CUDA OFF)
endif()
if(ZHOST_WITH_CUDA)
  enable_language(CUDA)
endif()

# The malloc the zhost executable runs with (Note [CPU threads per rank] has its sibling: both decide CPU
# training speed). glibc's malloc returns large temporaries to the kernel and faults them in again every
# step; tcmalloc keeps them. ZHOST_MALLOC=tcmalloc links gperftools' tcmalloc_minimal into the executable
# (it then serves LibTorch and the plugins too), ZHOST_MALLOC=system keeps glibc's.
set(ZHOST_MALLOC "tcmalloc" CACHE STRING "malloc of the zhost executable: tcmalloc or system")
set_property(CACHE ZHOST_MALLOC PROPERTY STRINGS tcmalloc system)
add_library(zhost_malloc INTERFACE)
if(ZHOST_MALLOC STREQUAL "tcmalloc")
  find_library(ZHOST_TCMALLOC_LIB tcmalloc_minimal)
  if(NOT ZHOST_TCMALLOC_LIB)
    message(FATAL_ERROR "ZHOST_MALLOC=tcmalloc needs libtcmalloc_minimal (Debian: libgoogle-perftools-dev; "
                        "scripts/setup-deps installs it), or configure with -DZHOST_MALLOC=system")
  endif()
  # Kept even though nothing names its symbols: it replaces malloc by coming first in the lookup order.
  target_link_libraries(zhost_malloc INTERFACE "-Wl,--push-state,--no-as-needed" ${ZHOST_TCMALLOC_LIB}
                                               "-Wl,--pop-state")
elseif(NOT ZHOST_MALLOC STREQUAL "system")
  message(FATAL_ERROR "ZHOST_MALLOC must be tcmalloc or system, not '${ZHOST_MALLOC}'")
endif()
