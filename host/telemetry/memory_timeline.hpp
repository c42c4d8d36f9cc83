// host/telemetry/memory_timeline.hpp: memory by category for one rank at one moment (Note [Memory categories]),
// and DeepSpeed's see_memory_usage lines (config key memory_breakdown).
//
// Note [Memory categories]
// Every step each rank records, in bytes (metrics.jsonl "memory" of every rank's record; trace counters
// "memory"):
//   params, grads, master, optimizer  the model states as the partition plugin reports them
//                      (zhost_partition_api.memory) plus what the host holds for it (the model's parameters
//                      and autograd's .grad when the plugin does not take them): the categories of ZeRO's
//                      formula (model_states.hpp), so measured/formula is their sum over zero_formula()
//   buffers            the plugin's communication buckets and staging (not in the formula)
//   gather_window      stage 3: the most parameter storage materialised at once (ParamStore) since the step
//                      began (a step's record: over that step; before the first step: what is materialised)
//   pinned             page-locked host buffers plugins hold from the host services (ZHOST_MEMORY_PINNED)
//   tier_host          bytes an offload tier holds in host memory (the plugin's "offloaded")
//   tier_nvme          bytes the storing offload tiers keep in storage of their own (storage_bytes of the
//                      tiers without optimizer_setup: the NVMe tier's files, in whole 4 KiB blocks). These
//                      bytes are also inside tier_host, which counts what the tiers hold for the partition
//                      plugin wherever it is (the plugin's "offloaded")
//   activations        bytes the forward of a micro-batch allocated and still held when it ended (malloc's
//                      live bytes after the forward minus before: tcmalloc's current_allocated_bytes, or
//                      glibc's mallinfo2), the largest over the step's micro-batches; on CUDA the caching
//                      allocator's allocated bytes instead. It includes the forward's outputs and any buffer
//                      a hook allocated and kept, and activation checkpointing's contiguous buffer on the
//                      device (contiguous_memory_optimization), allocated once before the first forward.
//   checkpoints_host   the inputs of checkpointed blocks kept in host memory (cpu_checkpointing: pinned on
//                      CUDA, mapped pages on CPU jobs, so not in activations), Note [Checkpointed block
//                      inputs] in activation_checkpoints.hpp. They leave the device: activations drop by
//                      the bytes of every checkpointed block's input
//   rss, peak_rss      the process's resident set and its high-water mark (/proc/self/status)
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "host/telemetry/model_states.hpp"

namespace zhost::engine {

using MemoryCategories = std::vector<std::pair<std::string, double>>;  // name -> bytes, in the Note's order

// Bytes allocated and not freed by this process's malloc (or on CUDA the caching allocator), for the
// activations measurement; 0 when neither can tell.
double live_allocated_bytes(bool cuda);

MemoryCategories memory_categories(const ModelStateBytes& states, double pinned, double activations,
                                   double checkpoints_host, double tier_storage);

// DeepSpeed's see_memory_usage: "<phase> | MA ... GB Max_MA ... GB CA ... GB | CPU Virtual Memory: used =
// ... GB, percent = ...%" plus zhost's categories.
std::string see_memory_usage(const std::string& phase, const MemoryCategories& categories);

}  // namespace zhost::engine
