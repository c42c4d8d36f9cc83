// host/checkpoint/export.cpp: streaming a checkpoint's masters into (sharded) safetensors.
#include "host/checkpoint/export.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "host/checkpoint/synced_file.hpp"
#include "host/core/error.hpp"
#include "host/formats/safetensors.hpp"

namespace zhost::checkpoint {
namespace fs = std::filesystem;

namespace {

constexpr int64_t kPieceElements = 1 << 20;  // 4 MB of fp32 per read of an untransposed tensor

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Checks every tensor against the checkpoint's parameters before anything is written.
void check_tensors(const CheckpointReader& reader, const std::vector<ExportTensor>& tensors) {
  std::map<std::string, const ParamShape*> params;
  for (const ParamShape& p : reader.params()) params[p.name] = &p;
  for (const ExportTensor& t : tensors) {
    const auto found = params.find(t.source);
    if (found == params.end())
      fail_usage("checkpoint '{}' has no parameter '{}' (for '{}'): it was saved from another model", reader.dir(),
                 t.source, t.name);
    const std::vector<int64_t>& saved = found->second->shape;
    const bool fits =
        t.transposed ? (saved.size() == 2 && t.shape.size() == 2 && saved[0] == t.shape[1] && saved[1] == t.shape[0])
                     : numel_of(saved) == numel_of(t.shape);
    if (!fits)
      fail_usage("checkpoint '{}' has '{}' of shape {}, which does not give '{}' of shape {}{}", reader.dir(), t.source,
                 nlohmann::json(saved).dump(), t.name, nlohmann::json(t.shape).dump(),
                 t.transposed ? " transposed" : "");
  }
}

// Consecutive tensors in shards of at most max_bytes each (a larger tensor alone).
std::vector<std::vector<const ExportTensor*>> plan_shards(const std::vector<ExportTensor>& tensors,
                                                          uint64_t max_bytes) {
  std::vector<std::vector<const ExportTensor*>> shards(1);
  uint64_t filled = 0;
  for (const ExportTensor& t : tensors) {
    const uint64_t bytes = static_cast<uint64_t>(numel_of(t.shape)) * sizeof(float);
    if (!shards.back().empty() && filled + bytes > max_bytes) {
      shards.emplace_back();
      filled = 0;
    }
    shards.back().push_back(&t);
    filled += bytes;
  }
  return shards;
}

void write_tensor(CheckpointReader& reader, const ExportTensor& t, formats::SafetensorsWriter& writer,
                  std::vector<float>& buffer) {
  const int64_t numel = numel_of(t.shape);
  if (!t.transposed) {  // in pieces: nothing of the size of the tensor is held
    buffer.resize(static_cast<size_t>(std::min(numel, kPieceElements)));
    for (int64_t begin = 0; begin < numel; begin += kPieceElements) {
      const int64_t n = std::min(kPieceElements, numel - begin);
      reader.read(t.source, "master", begin, n, buffer.data());
      writer.append(buffer.data(), static_cast<size_t>(n) * sizeof(float));
    }
    return;
  }
  // Source [R, K] into the output [K, R]: the whole output, and kRowBlock source rows at a time, so that each
  // output row receives kRowBlock consecutive values per pass (a cache-friendly transpose).
  constexpr int64_t kRowBlock = 64;
  const int64_t rows = t.shape[1], cols = t.shape[0];
  std::vector<float> out(static_cast<size_t>(numel));
  buffer.resize(static_cast<size_t>(std::min(rows, kRowBlock) * cols));
  for (int64_t i0 = 0; i0 < rows; i0 += kRowBlock) {
    const int64_t block = std::min(kRowBlock, rows - i0);
    reader.read(t.source, "master", i0 * cols, block * cols, buffer.data());
    for (int64_t j = 0; j < cols; ++j) {
      float* row = out.data() + j * rows + i0;
      for (int64_t i = 0; i < block; ++i) row[i] = buffer[static_cast<size_t>(i * cols + j)];
    }
  }
  writer.append(out.data(), out.size() * sizeof(float));
}

}  // namespace

std::vector<ExportTensor> tensors_as_saved(const CheckpointReader& reader) {
  std::vector<ExportTensor> tensors;
  for (const ParamShape& p : reader.params()) tensors.push_back({p.name, p.name, p.shape, false});
  return tensors;
}

ExportSummary export_safetensors(CheckpointReader& reader, const std::vector<ExportTensor>& tensors,
                                 const std::string& out_dir, uint64_t max_shard_bytes) {
  check_tensors(reader, tensors);
  std::error_code error;
  fs::create_directories(out_dir, error);
  if (error) fail_usage("cannot create the export folder '{}': {}", out_dir, error.message());
  const auto shards = plan_shards(tensors, std::max<uint64_t>(max_shard_bytes, 1));
  ExportSummary summary;
  nlohmann::json weight_map = nlohmann::json::object();
  std::vector<float> buffer;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = shards.size() == 1
                                 ? "model.safetensors"
                                 : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
    std::vector<formats::TensorToWrite> entries;
    for (const ExportTensor* t : shards[s])
      entries.push_back({t->name, "F32", t->shape, nullptr, static_cast<size_t>(numel_of(t->shape)) * sizeof(float)});
    formats::SafetensorsWriter writer((fs::path(out_dir) / file).string(), entries, {{"format", "pt"}});
    for (const ExportTensor* t : shards[s]) {
      write_tensor(reader, *t, writer, buffer);
      weight_map[t->name] = file;
      summary.tensor_bytes += static_cast<uint64_t>(numel_of(t->shape)) * sizeof(float);
    }
    writer.finish();
    summary.files.push_back(file);
  }
  const fs::path index = fs::path(out_dir) / "model.safetensors.index.json";
  if (shards.size() > 1) {
    const nlohmann::json contents = {{"metadata", {{"total_size", summary.tensor_bytes}}}, {"weight_map", weight_map}};
    write_file_synced(index.string(), contents.dump(2) + "\n");
  } else {
    fs::remove(index, error);  // a stale index would name shards that are not there
  }
  return summary;
}

}  // namespace zhost::checkpoint
