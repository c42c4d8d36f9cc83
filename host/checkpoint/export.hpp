// host/checkpoint/export.hpp: a checkpoint's fp32 master weights as safetensors files, streamed: the reader
// fills one tensor at a time (a transposed one whole, the others in pieces of a few MB), so peak memory is
// bounded by the largest transposed tensor plus small buffers, not by the model. Sharded as Hugging Face
// shards its checkpoints: model.safetensors, or model-0000K-of-0000N.safetensors with
// model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map": {name: file}}).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/checkpoint/checkpoint_format.hpp"

namespace zhost::checkpoint {

struct ExportTensor {
  std::string name;            // the name in the safetensors file
  std::string source;          // the checkpoint's parameter
  std::vector<int64_t> shape;  // as written
  bool transposed = false;     // the 2-D source written transposed
};

struct ExportSummary {
  std::vector<std::string> files;  // the safetensors files written, in order
  uint64_t tensor_bytes = 0;
};

// Writes `tensors` (each a parameter's "master" state) into OUT_DIR (created), in shards of at most
// `max_shard_bytes` of tensor data (a larger tensor gets a shard of its own). Fails (UsageError) when a source
// is missing or its shape does not fit, before writing anything.
ExportSummary export_safetensors(CheckpointReader& reader, const std::vector<ExportTensor>& tensors,
                                 const std::string& out_dir, uint64_t max_shard_bytes);

// The checkpoint's parameters under their own names, in checkpoint order.
std::vector<ExportTensor> tensors_as_saved(const CheckpointReader& reader);

}  // namespace zhost::checkpoint
