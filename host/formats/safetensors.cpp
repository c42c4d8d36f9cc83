// host/formats/safetensors.cpp: reading, validating and writing safetensors files and sharded sets (see
// Note [safetensors layout] in safetensors.hpp).
#include "host/formats/safetensors.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "host/core/error.hpp"

namespace zhost::formats {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::map<std::string, size_t>& dtype_sizes() {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  return sizes;
}

// A tensor name as messages show it: quoted, cut short, control characters escaped (one line).
std::string shown(const std::string& name) {
  std::string out = json(name.substr(0, 80)).dump(-1, ' ', true, json::error_handler_t::replace);
  return name.size() > 80 ? out + "..." : out;
}

// Reads entry `name`'s value in the header; every problem names the file and the tensor.
TensorEntry read_entry(const std::string& name, const json& value, const std::string& file) {
  const auto bad = [&](const std::string& what) {
    fail_usage("safetensors file '{}': tensor {} {}; the file is damaged or not a safetensors file", file, shown(name),
               what);
  };
  if (!value.is_object()) bad("is not a JSON object");
  TensorEntry entry;
  entry.name = name;
  for (const auto& [key, field] : value.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") bad("has an unknown field " + shown(key));
  }
  if (!value.contains("dtype") || !value["dtype"].is_string()) bad("has no \"dtype\" string");
  entry.dtype = value["dtype"].get<std::string>();
  entry.element_size = dtype_size(entry.dtype);
  if (entry.element_size == 0) bad("has the unknown dtype " + shown(entry.dtype));
  if (!value.contains("shape") || !value["shape"].is_array()) bad("has no \"shape\" array");
  // numel stays below 2^62 so that numel * element size (<= 8) cannot overflow 2^64.
  constexpr uint64_t kMaxElements = uint64_t{1} << 60;
  uint64_t numel = 1;
  for (const json& dim : value["shape"]) {
    if (!dim.is_number_unsigned()) bad("has a shape entry that is not a non-negative integer");
    const auto size = dim.get<uint64_t>();
    if (size > kMaxElements || (size != 0 && numel > kMaxElements / size)) bad("has a shape too large to address");
    numel *= size;
    entry.shape.push_back(static_cast<int64_t>(size));
  }
  entry.numel = static_cast<int64_t>(numel);
  const json* offsets = value.contains("data_offsets") ? &value["data_offsets"] : nullptr;
  if (offsets == nullptr || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned())
    bad("has no \"data_offsets\" pair of non-negative integers");
  entry.begin = (*offsets)[0].get<uint64_t>();
  entry.end = (*offsets)[1].get<uint64_t>();
  if (entry.end < entry.begin) bad("has data_offsets that end before they begin");
  if (entry.end - entry.begin != numel * entry.element_size)
    bad(fmt::format("holds {} bytes (data_offsets [{}, {}]), but its shape and dtype {} need {}",
                    entry.end - entry.begin, entry.begin, entry.end, entry.dtype, numel * entry.element_size));
  return entry;
}

// The index's shard names must stay inside the model's folder.
bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

std::string read_small_file(const fs::path& path, const char* what) {
  std::error_code error;
  if (!fs::is_regular_file(path, error))
    fail_usage("{} '{}' does not exist or is not a regular file", what, path.string());
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) fail_usage("cannot read {} '{}'", what, path.string());
  return text.str();
}

}  // namespace

size_t dtype_size(const std::string& dtype) {
  const auto found = dtype_sizes().find(dtype);
  return found == dtype_sizes().end() ? 0 : found->second;
}

const TensorEntry* SafetensorsHeader::find(const std::string& name) const {
  for (const TensorEntry& entry : tensors)
    if (entry.name == name) return &entry;
  return nullptr;
}

SafetensorsHeader SafetensorsHeader::parse(const unsigned char* bytes, size_t size, const std::string& file) {
  const auto bad = [&](const std::string& what) {
    fail_usage("safetensors file '{}' {}; the file is damaged or not a safetensors file", file, what);
  };
  if (size < 8) bad(fmt::format("is {} bytes, shorter than the 8-byte header length", size));
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | bytes[i];  // little-endian
  if (header_bytes > kMaxHeaderBytes)
    bad(fmt::format("declares a {}-byte header, above the {}-byte limit", header_bytes, kMaxHeaderBytes));
  if (header_bytes < 2) bad(fmt::format("declares a {}-byte header, too short for a JSON object", header_bytes));
  if (8 + header_bytes > size)
    bad(fmt::format("declares a {}-byte header, but the file ends after {} bytes", header_bytes, size - 8));
  const char* text = reinterpret_cast<const char*>(bytes + 8);
  const json header = json::parse(text, text + header_bytes, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) bad("has a header that is not valid JSON");
  if (!header.is_object()) bad("has a header that is not a JSON object");

  SafetensorsHeader parsed;
  parsed.data_start = 8 + header_bytes;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) bad("has a \"__metadata__\" that is not a JSON object");
      for (const auto& [key, item] : value.items()) {
        if (!item.is_string()) bad("has a \"__metadata__\" value that is not a string (key " + shown(key) + ")");
        parsed.metadata[key] = item.get<std::string>();
      }
      continue;
    }
    parsed.tensors.push_back(read_entry(name, value, file));
  }
  std::sort(parsed.tensors.begin(), parsed.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Note [safetensors layout]: the tensors tile the data region exactly.
  const uint64_t data_bytes = size - parsed.data_start;
  uint64_t expected = 0;
  for (const TensorEntry& entry : parsed.tensors) {
    if (entry.begin < expected)
      bad(fmt::format("has tensor {} at data_offsets [{}, {}], overlapping the tensor before it (which ends at {})",
                      shown(entry.name), entry.begin, entry.end, expected));
    if (entry.begin > expected)
      bad(fmt::format("has a hole of {} bytes in its data region before tensor {} (bytes [{}, {}])",
                      entry.begin - expected, shown(entry.name), expected, entry.begin));
    expected = entry.end;
  }
  if (expected != data_bytes)
    bad(fmt::format("has a {}-byte data region, but its tensors {} {} bytes", data_bytes,
                    expected > data_bytes ? "need" : "cover only", expected));
  return parsed;
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : map_(path, "safetensors file", "model path"), header_(SafetensorsHeader::parse(map_.data(), map_.size(), path)) {}

std::map<std::string, std::string> parse_index(const std::string& text, const std::string& file) {
  const auto bad = [&](const std::string& what) {
    fail_usage("index file '{}' {}; it should be {{\"weight_map\": {{\"tensor name\": \"shard.safetensors\", ...}}}}",
               file, what);
  };
  const json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded()) bad("is not valid JSON");
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    bad("has no \"weight_map\" object");
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) bad("maps tensor " + shown(name) + " to something that is not a file name");
    const std::string shard_name = shard.get<std::string>();
    if (!plain_file_name(shard_name))
      bad("maps tensor " + shown(name) + " to " + shown(shard_name) + ", which is not a file in the same folder");
    weight_map[name] = shard_name;
  }
  if (weight_map.empty()) bad("has an empty \"weight_map\"");
  return weight_map;
}

SafetensorsSet SafetensorsSet::open(const std::string& dir) {
  SafetensorsSet set;
  const fs::path folder(dir);
  const fs::path index_path = folder / "model.safetensors.index.json";
  const fs::path single = folder / "model.safetensors";
  std::error_code error;
  if (!fs::exists(index_path, error)) {
    if (!fs::exists(single, error))
      fail_usage(
          "model folder '{}' has neither model.safetensors nor model.safetensors.index.json; point "
          "model.path at a Hugging Face model folder",
          dir);
    set.files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
    for (const TensorEntry& entry : set.files_.back()->header().tensors)
      set.by_name_[entry.name] = Found{set.files_.back().get(), &entry};
    set.described_ = single.string();
    return set;
  }
  set.described_ = index_path.string();
  const std::map<std::string, std::string> weight_map =
      parse_index(read_small_file(index_path, "index file"), index_path.string());
  std::map<std::string, std::vector<std::string>> by_shard;
  for (const auto& [name, shard] : weight_map) by_shard[shard].push_back(name);
  for (const auto& [shard, names] : by_shard) {
    set.files_.push_back(std::make_unique<SafetensorsFile>((folder / shard).string()));
    const SafetensorsFile& file = *set.files_.back();
    for (const TensorEntry& entry : file.header().tensors) {
      const auto listed = weight_map.find(entry.name);
      if (listed == weight_map.end() || listed->second != shard)
        fail_usage("shard '{}' holds tensor {}, which {} gives to {}; the index and its shards disagree", file.path(),
                   shown(entry.name), index_path.string(),
                   listed == weight_map.end() ? std::string("no shard") : shown(listed->second));
      set.by_name_[entry.name] = Found{&file, &entry};
    }
    for (const std::string& name : names)
      if (file.header().find(name) == nullptr)
        fail_usage("{} places tensor {} in '{}', which does not hold it; the index and its shards disagree",
                   index_path.string(), shown(name), file.path());
  }
  return set;
}

SafetensorsSet::Found SafetensorsSet::find(const std::string& name) const {
  const auto found = by_name_.find(name);
  return found == by_name_.end() ? Found{nullptr, nullptr} : found->second;
}

std::vector<std::string> SafetensorsSet::names() const {
  std::vector<std::string> names;
  for (const auto& [name, found] : by_name_) names.push_back(name);
  return names;
}

std::string SafetensorsSet::describe() const { return described_; }

SafetensorsWriter::SafetensorsWriter(const std::string& path, const std::vector<TensorToWrite>& tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), partial_(path + ".partial") {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorToWrite& tensor : tensors) {
    uint64_t numel = 1;
    for (const int64_t dim : tensor.shape) numel *= static_cast<uint64_t>(dim);
    if (dtype_size(tensor.dtype) == 0 || numel * dtype_size(tensor.dtype) != tensor.bytes ||
        header.contains(tensor.name))
      fail("write_safetensors '{}': tensor {} has dtype {}, {} elements and {} bytes, or a repeated name", path,
           shown(tensor.name), tensor.dtype, numel, tensor.bytes);
    header[tensor.name] = {
        {"dtype", tensor.dtype}, {"shape", tensor.shape}, {"data_offsets", {offset, offset + tensor.bytes}}};
    offset += tensor.bytes;
  }
  data_bytes_ = offset;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  header_bytes_ = 8 + text.size();
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>((text.size() >> (8 * i)) & 0xff);
  out_ = std::fopen(partial_.c_str(), "wb");
  if (out_ == nullptr) fail("cannot create '{}': {}", partial_, std::strerror(errno));
  if (std::fwrite(length, 1, 8, out_) != 8 || std::fwrite(text.data(), 1, text.size(), out_) != text.size())
    fail("cannot write '{}' (disk full, or no permission?)", partial_);
}

SafetensorsWriter::~SafetensorsWriter() {
  if (out_ == nullptr) return;
  std::fclose(out_);
  std::remove(partial_.c_str());
}

void SafetensorsWriter::append(const void* data, size_t bytes) {
  if (written_ + bytes > data_bytes_) fail("write_safetensors '{}': more data than the header describes", path_);
  if (bytes > 0 && std::fwrite(data, 1, bytes, out_) != bytes)
    fail("cannot write '{}' (disk full, or no permission?)", partial_);
  written_ += bytes;
}

void SafetensorsWriter::finish() {
  if (written_ != data_bytes_)
    fail("write_safetensors '{}': {} bytes of tensor data written, the header describes {}", path_, written_,
         data_bytes_);
  const bool flushed = std::fflush(out_) == 0;
  const bool closed = std::fclose(out_) == 0;
  out_ = nullptr;
  if (!flushed || !closed) {
    std::remove(partial_.c_str());
    fail("cannot write '{}' (disk full, or no permission?)", partial_);
  }
  std::error_code error;
  fs::rename(partial_, path_, error);
  if (error) fail("cannot rename '{}' to '{}': {}", partial_, path_, error.message());
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter writer(path, tensors, metadata);
  for (const TensorToWrite& tensor : tensors) writer.append(tensor.data, tensor.bytes);
  writer.finish();
}

}  // namespace zhost::formats
