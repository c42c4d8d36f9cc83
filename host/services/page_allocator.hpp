// host/services/page_allocator.hpp: a c10::Allocator for host memory that is mapped from the kernel on
// allocation and unmapped on free, whatever malloc the process runs with.
//
// Stage 3 materialises a block's parameters for its gathers and releases them after use, every
// micro-batch. Served by malloc, released parameters stay in the allocator's free lists (glibc keeps
// frees above its dynamic mmap threshold in the heap; tcmalloc and jemalloc cache them), so a rank's
// resident memory would not fall back after a block and the memory partitioning saves would not be
// given back. Parameter groups (param_store.cpp) take their host storage from here instead: exactly
// their bytes are resident while materialised and none after release, and malloc keeps its own
// behaviour (and speed) for every other allocation, activations included.
#pragma once

#include <c10/core/Allocator.h>

namespace zhost {

// The process-wide instance (stateless; every mapping carries its own length).
c10::Allocator* page_allocator();

}  // namespace zhost
