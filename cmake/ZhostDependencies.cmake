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

# libsentencepiece (optional): a SentencePiece data.tokenizer (host/data/sentencepiece_tokenizer.hpp), only ever
# linked into a shared object of its own (Note [SentencePiece in its own scope], host/data/sentencepiece_shim.cpp);
# without it such a tokenizer is refused with what to install (a tokenizer.json needs no library).
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

# Note [LibTorch from torch's wheel]
# zhost builds against exactly one LibTorch: the one in torch's PyPI wheel (version pinned in
# scripts/python-requirements.txt, installed by scripts/setup-deps into $ZHOST_VENV). It is the LibTorch the GPU
# machines and zhost's users run (CUDA 13.0 with its cuBLAS, cuDNN and NCCL as PyPI packages next to it), and the
# torch the tests' Python references import, so C++ and reference share one set of kernels. Debian 12's LibTorch
# 1.13 (CPU only, 2022) is no longer used. The wheel brings headers and libraries with two neighbours chosen here
# on purpose:
# - fmt: the wheel ships fmt 12's headers in its include folder, next to Debian's fmt 9 that spdlog is built with.
#   Which one a file saw used to depend on include order; zhost_torch now names a copy of the wheel's include
#   folder without fmt/, so every file sees Debian's fmt (the wheel's own libraries are compiled already).
# - Gloo: ProcessGroupGloo.hpp includes Gloo's headers, which the wheel does not ship (its Gloo is linked into
#   libtorch_cpu). Debian's libgloo-dev provides them; zhost only holds Gloo devices by shared_ptr and builds
#   its backends through libtorch's own functions, so no Gloo layout is compiled into zhost, and zhost never
#   links Debian's libgloo (two Gloos in one process).
set(ZHOST_PYTHON "$ENV{ZHOST_VENV}/bin/python" CACHE FILEPATH
    "The python of zhost's virtual environment (scripts/setup-deps): its torch is the LibTorch zhost builds against")
if(ZHOST_PYTHON STREQUAL "/bin/python")
  set(ZHOST_PYTHON "$ENV{HOME}/.cache/zhost/venv/bin/python" CACHE FILEPATH "" FORCE)
endif()
if(ZHOST_WITH_TORCH)
  if(NOT Torch_DIR)
    execute_process(COMMAND ${ZHOST_PYTHON} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                    OUTPUT_VARIABLE zhost_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE zhost_torch_found
                    ERROR_QUIET)
    if(NOT zhost_torch_found EQUAL 0)
      message(FATAL_ERROR "zhost: ${ZHOST_PYTHON} cannot import torch: run scripts/setup-deps (it installs torch's "
                          "wheel into $ZHOST_VENV), or pass -DZHOST_PYTHON=/path/to/python with torch installed")
    endif()
    set(Torch_DIR "${zhost_torch_prefix}/Torch" CACHE PATH "LibTorch's CMake package (torch's wheel)")
  endif()
  # torch's CMake package compiles CUDA for every architecture it knows unless told otherwise; zhost's kernels are
  # few, and the GPUs it runs on are Ampere and Hopper.
  if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND NOT TORCH_CUDA_ARCH_LIST)
    set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
  endif()
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  find_package(Torch 2.11 REQUIRED)
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
  # The wheel's include folder without its fmt (Note [LibTorch from torch's wheel]): a folder of links to every
  # other entry, remade at each configure, named wherever LibTorch's targets name the wheel's folder.
  get_filename_component(zhost_torch_include "${TORCH_INSTALL_PREFIX}/include" REALPATH)
  set(zhost_torch_include_view ${CMAKE_BINARY_DIR}/torch_include)
  file(REMOVE_RECURSE ${zhost_torch_include_view})
  file(MAKE_DIRECTORY ${zhost_torch_include_view})
  file(GLOB zhost_torch_include_entries RELATIVE ${zhost_torch_include} ${zhost_torch_include}/*)
  list(REMOVE_ITEM zhost_torch_include_entries fmt)
  foreach(entry ${zhost_torch_include_entries})
    file(CREATE_LINK ${zhost_torch_include}/${entry} ${zhost_torch_include_view}/${entry} SYMBOLIC)
  endforeach()
  set(ZHOST_TORCH_INCLUDE_DIRS)
  foreach(dir ${TORCH_INCLUDE_DIRS})
    get_filename_component(dir "${dir}" REALPATH)
    string(REPLACE "${zhost_torch_include}" "${zhost_torch_include_view}" dir "${dir}")
    list(APPEND ZHOST_TORCH_INCLUDE_DIRS ${dir})
  endforeach()
  foreach(target torch torch_cpu torch_cuda c10 c10_cuda torch_cpu_library torch_cuda_library)
    if(TARGET ${target})
      get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
      if(dirs)
        string(REPLACE "${TORCH_INSTALL_PREFIX}/include" "${zhost_torch_include_view}" dirs "${dirs}")
        string(REPLACE "${zhost_torch_include}" "${zhost_torch_include_view}" dirs "${dirs}")
        set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${dirs}")
      endif()
    endif()
  endforeach()
  add_library(zhost_torch INTERFACE)
  # Note [One std::filesystem]: libtorch_cpu.so carries and exports its own copy of std::filesystem (GCC 13's,
  # linked in statically for old distributions), and it comes before libstdc++ in a zhost binary's lookup order,
  # so remove_all and the like resolved half to that copy and half to Debian's GCC 12 libstdc++, whose private
  # directory-walking structures differ: checkpoint rotation crashed (SIGSEGV) and a failed save's folder was not
  # removed (tests/checkpoint DiskFull, tests/zero DelayedUpdate drained every step). Naming libstdc++ before
  # LibTorch puts it first among a binary's libraries, and every std::filesystem call then resolves to it.
  target_link_libraries(zhost_torch INTERFACE "-Wl,--push-state,--no-as-needed" stdc++ "-Wl,--pop-state"
                                              ${TORCH_LIBRARIES})
  target_include_directories(zhost_torch SYSTEM INTERFACE ${ZHOST_TORCH_INCLUDE_DIRS})
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
