// host/formats/safetensors.hpp: the safetensors format (Hugging Face's tensor file), read memory-mapped
// and validated, and written; sharded checkpoints through model.safetensors.index.json. No LibTorch.
//
// Note [safetensors layout]: a file is
//   u64 little-endian N | N bytes of JSON header | data region
// The header maps each tensor name to {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} (byte
// offsets into the data region, end exclusive) and may hold "__metadata__": {string: string}. A file is
// accepted only when: 8 <= N <= kMaxHeaderBytes and 8 + N <= file size; the header is a JSON object whose
// entries have exactly those keys with those types; the dtype is one of safetensors' names; the shape's
// dims are >= 0 and numel * element size == end - begin without overflow; and the tensors, sorted by
// begin, cover the data region exactly: the first begins at 0, each begins where the previous ends (no
// overlap, no hole), the last ends at the end of the file. Every refusal is one UsageError line naming the
// file and what is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "host/formats/mapped_file.hpp"

namespace zhost::formats {

// The largest header accepted (the reference implementation's limit too).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct TensorEntry {
  std::string name;
  std::string dtype;        // safetensors' name: F32, F16, BF16, F64, I64, ...
  size_t element_size = 0;  // bytes per element of dtype
  std::vector<int64_t> shape;
  int64_t numel = 1;
  uint64_t begin = 0, end = 0;  // byte range in the data region
};

// Bytes per element of a safetensors dtype name; 0 when the name is not one.
size_t dtype_size(const std::string& dtype);

// A parsed, validated header (Note [safetensors layout]).
struct SafetensorsHeader {
  std::vector<TensorEntry> tensors;  // in data order (ascending begin)
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + N: where the data region begins in the file

  const TensorEntry* find(const std::string& name) const;
  // Parses the first `size` bytes of a file of `size` bytes. `file` names it in messages.
  static SafetensorsHeader parse(const unsigned char* bytes, size_t size, const std::string& file);
};

// One memory-mapped, validated .safetensors file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return map_.path(); }
  const SafetensorsHeader& header() const { return header_; }
  // The first byte of a tensor's data (in the map: touching it reads the file).
  const unsigned char* data(const TensorEntry& entry) const { return map_.data() + header_.data_start + entry.begin; }
  // Drops a byte range of a tensor's data from the resident set once it has been copied out.
  void release(const TensorEntry& entry, uint64_t offset, uint64_t bytes) const {
    map_.release(header_.data_start + entry.begin + offset, bytes);
  }

 private:
  MappedFile map_;
  SafetensorsHeader header_;
};

// A model's weights in a folder: model.safetensors, or the shards model.safetensors.index.json names
// ({"weight_map": {tensor name: shard file name}}). Every shard must hold exactly the tensors the index
// gives it; a tensor in two shards or a shard outside the folder is refused.
class SafetensorsSet {
 public:
  struct Found {
    const SafetensorsFile* file;
    const TensorEntry* entry;
  };
  static SafetensorsSet open(const std::string& dir);

  // nullptr entry when the name is absent.
  Found find(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  std::string describe() const;            // "DIR/model.safetensors" or "DIR/model.safetensors.index.json"

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Found> by_name_;
  std::string described_;
};

// Parses a model.safetensors.index.json text into {tensor name: shard file name}. `file` names it in
// messages. Shard names must be plain file names (no '/', not "." or "..").
std::map<std::string, std::string> parse_index(const std::string& text, const std::string& file);

// One tensor to write: `bytes` bytes at `data`, which must equal numel(shape) * dtype_size(dtype).
struct TensorToWrite {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data;
  size_t bytes;
};
// Writes a .safetensors file (header padded with spaces to a multiple of 8 bytes, tensors in the given
// order), through a temporary file renamed into place. Fails (zhost::Error) on a bad entry or I/O error.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The same file streamed: the header from the tensors' names, dtypes and shapes (their `data` unused), then
// each tensor's bytes in order through append(), so that a writer holds one tensor at a time. Written to
// PATH.partial, renamed into place by finish(); a writer destroyed before finish() removes the partial file.
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, const std::vector<TensorToWrite>& tensors,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Appends bytes of the current tensor; a tensor may come in several pieces.
  void append(const void* data, size_t bytes);
  // Checks that every tensor got exactly its bytes, flushes, and renames the file into place.
  void finish();
  // Bytes the file will have: 8 + header + data.
  uint64_t file_bytes() const { return header_bytes_ + data_bytes_; }

 private:
  std::string path_, partial_;
  std::FILE* out_ = nullptr;
  uint64_t header_bytes_ = 0, data_bytes_ = 0, written_ = 0;
};

}  // namespace zhost::formats
