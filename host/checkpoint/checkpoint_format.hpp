// host/checkpoint/checkpoint_format.hpp: the files of one checkpoint, written rank by rank and read back with
// every byte checked. No LibTorch: values are fp32 arrays. The directory protocol around them (staging,
// publishing, `latest`) is checkpoint_dir.hpp.
//
// Note [Checkpoint layout] (docs/checkpoints.md describes it for readers outside zhost): a checkpoint is one
// directory holding
//   checkpoint.json       written by rank 0 last: {"format": "zhost-checkpoint", "version": 1, "world_size": N,
//                         "params": [{"name", "shape"}], "states": [names], "host": {...}, "job": {...}}
//   rank-RRRRR.json       one per saving rank: {"rank", "data_file", "data_bytes", "chunk_bytes", "chunks":
//                         [xxh64 as 16 hex digits], "fragments": [{"param", "state", "offset", "numel",
//                         "byte_offset"}], "host": {...}}
//   rank-RRRRR.bin        that rank's fragments: fp32 little-endian values, back to back
// A fragment is elements [offset, offset + numel) of the flattened parameter `param`'s state `state` ("master",
// "exp_avg", ...). Across the ranks the fragments of each (parameter, state) tile it exactly: no hole, no
// overlap. The data file is checksummed in chunks of chunk_bytes (the last one shorter). Readers refuse a file
// that is missing, truncated, fails its checksum or contradicts the rest, with one line naming the file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zhost::checkpoint {

constexpr int kFormatVersion = 1;
constexpr const char* kFormatName = "zhost-checkpoint";
constexpr uint64_t kChunkBytes = 4ull << 20;

std::string rank_file_stem(int rank);  // "rank-00003"

struct ParamShape {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

// One rank's data file and fragment index, streamed: values go to disk as they come.
class ShardWriter {
 public:
  // Creates DIR/rank-RRRRR.bin (DIR must exist). `params`: the model's parameters, indexed by id.
  ShardWriter(const std::string& dir, int rank, const std::vector<ParamShape>& params);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends elements [offset, offset + numel) of parameter `param`'s state `state`.
  void write(uint32_t param, const std::string& state, int64_t offset, const float* values, int64_t numel);
  // Flushes and fsyncs the data file, then writes and fsyncs DIR/rank-RRRRR.json with `host` (this rank's host
  // state). Fails (zhost::Error naming the file) on any I/O error, e.g. a full disk.
  void finish(const nlohmann::json& host);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes DIR/checkpoint.json (and fsyncs it) from rank 0, after every rank finished its shard.
void write_checkpoint_json(const std::string& dir, const nlohmann::json& contents);

// A checkpoint opened for reading: every index validated at open; data checked chunk by chunk as read.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& dir);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& dir() const;
  const nlohmann::json& meta() const;  // checkpoint.json
  const std::vector<ParamShape>& params() const;
  const std::vector<std::string>& states() const;  // state names every parameter has
  int world_size() const;
  const nlohmann::json& rank_host(int rank) const;  // "host" of rank-RRRRR.json
  // Fills out[0, numel) with elements [offset, offset + numel) of parameter `param`'s state `state`, from
  // whichever ranks' files hold them. Throws zhost::Error naming the file on a checksum or read failure, and
  // when the checkpoint has no such parameter or state.
  void read(const std::string& param, const std::string& state, int64_t offset, int64_t numel, float* out);
  // Reads all of rank `rank`'s data file and checks every chunk's checksum (throws as read() does), so that ranks
  // can check the files between them before any of them starts loading.
  void verify_rank_file(int rank);
  // Total bytes of values in the checkpoint's data files.
  uint64_t data_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zhost::checkpoint
