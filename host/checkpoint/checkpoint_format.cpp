// host/checkpoint/checkpoint_format.cpp: writing and validating the files of Note [Checkpoint layout].
#include "host/checkpoint/checkpoint_format.hpp"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include "host/checkpoint/synced_file.hpp"
#include "host/core/error.hpp"

namespace zhost::checkpoint {
namespace fs = std::filesystem;
using json = nlohmann::json;

std::string rank_file_stem(int rank) { return fmt::format("rank-{:05d}", rank); }

int64_t ParamShape::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

std::string hex64(uint64_t value) { return fmt::format("{:016x}", value); }

// ---- writing -------------------------------------------------------------------------------------------

constexpr size_t kWriteBuffer = 1u << 20;

}  // namespace

struct ShardWriter::Impl {
  std::string dir, data_name, data_path;
  int rank = 0;
  const std::vector<ParamShape>& params;
  int fd = -1;
  std::vector<char> buffer;
  uint64_t bytes = 0;         // values written so far (buffered or on disk)
  uint64_t chunk_filled = 0;  // bytes of the current chunk hashed so far
  XXH64_state_t* chunk_hash = XXH64_createState();
  json chunks = json::array();
  json fragments = json::array();

  Impl(const std::string& d, int r, const std::vector<ParamShape>& p) : dir(d), rank(r), params(p) {
    data_name = rank_file_stem(rank) + ".bin";
    data_path = (fs::path(dir) / data_name).string();
    fd = ::open(data_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail("cannot create the checkpoint file '{}': {}", data_path, describe_errno(errno));
    buffer.reserve(kWriteBuffer);
    XXH64_reset(chunk_hash, 0);
  }
  ~Impl() {
    if (fd >= 0) ::close(fd);
    XXH64_freeState(chunk_hash);
  }

  void flush() {
    size_t done = 0;
    while (done < buffer.size()) {
      const ssize_t n = ::write(fd, buffer.data() + done, buffer.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("cannot write the checkpoint file '{}': {}", data_path, describe_errno(n < 0 ? errno : ENOSPC));
      done += static_cast<size_t>(n);
    }
    buffer.clear();
  }

  void append(const char* data, uint64_t size) {
    while (size > 0) {
      const uint64_t take = std::min<uint64_t>({size, kChunkBytes - chunk_filled, kWriteBuffer - buffer.size()});
      XXH64_update(chunk_hash, data, take);
      buffer.insert(buffer.end(), data, data + take);
      chunk_filled += take;
      bytes += take;
      data += take;
      size -= take;
      if (chunk_filled == kChunkBytes) close_chunk();
      if (buffer.size() == kWriteBuffer) flush();
    }
  }

  void close_chunk() {
    chunks.push_back(hex64(XXH64_digest(chunk_hash)));
    XXH64_reset(chunk_hash, 0);
    chunk_filled = 0;
  }
};

ShardWriter::ShardWriter(const std::string& dir, int rank, const std::vector<ParamShape>& params)
    : impl_(std::make_unique<Impl>(dir, rank, params)) {}

ShardWriter::~ShardWriter() = default;

void ShardWriter::write(uint32_t param, const std::string& state, int64_t offset, const float* values, int64_t numel) {
  Impl& w = *impl_;
  ZHOST_ASSERT(param < w.params.size() && offset >= 0 && numel > 0 && offset + numel <= w.params[param].numel());
  w.fragments.push_back({{"param", w.params[param].name},
                         {"state", state},
                         {"offset", offset},
                         {"numel", numel},
                         {"byte_offset", w.bytes}});
  w.append(reinterpret_cast<const char*>(values), static_cast<uint64_t>(numel) * sizeof(float));
}

void ShardWriter::finish(const json& host) {
  Impl& w = *impl_;
  w.flush();
  if (w.chunk_filled > 0) w.close_chunk();
  fsync_fd(w.fd, w.data_path);
  const int result = ::close(w.fd);
  w.fd = -1;
  if (result != 0) fail("cannot close the checkpoint file '{}': {}", w.data_path, describe_errno(errno));
  const json index = {
      {"rank", w.rank},     {"data_file", w.data_name}, {"data_bytes", w.bytes}, {"chunk_bytes", kChunkBytes},
      {"chunks", w.chunks}, {"fragments", w.fragments}, {"host", host}};
  write_file_synced((fs::path(w.dir) / (rank_file_stem(w.rank) + ".json")).string(), index.dump(1) + "\n");
}

void write_checkpoint_json(const std::string& dir, const json& contents) {
  write_file_synced((fs::path(dir) / "checkpoint.json").string(), contents.dump(1) + "\n");
}

// ---- reading ---------------------------------------------------------------------------------------------

namespace {

// Validation helpers: each failure is one UsageError line naming the file.
[[noreturn]] void refuse(const std::string& file, const std::string& what) {
  fail_usage("checkpoint file '{}' {}: the checkpoint is damaged or incomplete; resume from another one", file, what);
}

const json& member(const json& object, const char* key, json::value_t type, const std::string& file) {
  if (!object.is_object() || !object.contains(key)) refuse(file, fmt::format("has no \"{}\"", key));
  const json& value = object.at(key);
  const bool number_ok = type == json::value_t::number_unsigned && value.is_number_unsigned();
  const bool integer_ok = type == json::value_t::number_integer && value.is_number_integer();
  if (!(value.type() == type || number_ok || integer_ok)) refuse(file, fmt::format("has a malformed \"{}\"", key));
  return value;
}

int64_t integer(const json& object, const char* key, const std::string& file, int64_t min, int64_t max) {
  const json& value = member(object, key, json::value_t::number_integer, file);
  if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(max))
    refuse(file, fmt::format("has \"{}\" out of range", key));
  const int64_t n = value.get<int64_t>();
  if (n < min || n > max) refuse(file, fmt::format("has \"{}\" = {} out of range [{}, {}]", key, n, min, max));
  return n;
}

json parse_json_file(const std::string& path, const std::string& what) {
  const std::string text = read_small_file(path, what);
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) refuse(path, "is not a JSON object (truncated or corrupted)");
  return parsed;
}

bool plain_file_name(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name != "." && name != "..";
}

constexpr int64_t kMaxElements = int64_t{1} << 48;

struct Piece {
  int64_t offset, numel;
  int rank;
  uint64_t byte_offset;
};

struct RankFile {
  std::string index_path, data_path;
  uint64_t data_bytes = 0, chunk_bytes = kChunkBytes;
  std::vector<uint64_t> chunks;
  json host;
  int fd = -1;
  int64_t cached_chunk = -1;  // the chunk in `cache`, verified
  std::vector<char> cache;
};

}  // namespace

struct CheckpointReader::Impl {
  std::string dir, meta_path;
  json meta;
  std::vector<ParamShape> params;
  std::map<std::string, size_t> param_index;
  std::vector<std::string> states;
  std::vector<RankFile> ranks;
  std::map<std::pair<size_t, std::string>, std::vector<Piece>> pieces;  // sorted by offset
  uint64_t total_bytes = 0;

  ~Impl() {
    for (RankFile& r : ranks)
      if (r.fd >= 0) ::close(r.fd);
  }

  void open_meta() {
    meta_path = (fs::path(dir) / "checkpoint.json").string();
    if (!fs::is_directory(dir))
      fail_usage("checkpoint '{}' is not a folder: give a checkpoint folder (step-NNNNNNNN) or 'latest'", dir);
    meta = parse_json_file(meta_path, "the checkpoint's metadata");
    if (member(meta, "format", json::value_t::string, meta_path).get<std::string>() != kFormatName)
      refuse(meta_path, "is not a zhost checkpoint (\"format\" differs)");
    const int64_t version = integer(meta, "version", meta_path, 1, std::numeric_limits<int32_t>::max());
    if (version != kFormatVersion)
      fail_usage("checkpoint '{}' has format version {}, this zhost reads version {}: use a zhost of its version", dir,
                 version, kFormatVersion);
    const int64_t world = integer(meta, "world_size", meta_path, 1, 1 << 20);
    for (const json& p : member(meta, "params", json::value_t::array, meta_path)) {
      ParamShape shape;
      shape.name = member(p, "name", json::value_t::string, meta_path).get<std::string>();
      int64_t numel = 1;
      for (const json& d : member(p, "shape", json::value_t::array, meta_path)) {
        if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > kMaxElements)
          refuse(meta_path, fmt::format("has a malformed shape for '{}'", shape.name));
        shape.shape.push_back(d.get<int64_t>());
        numel *= std::max<int64_t>(d.get<int64_t>(), 1);
        if (numel > kMaxElements) refuse(meta_path, fmt::format("has an impossible shape for '{}'", shape.name));
      }
      if (!param_index.emplace(shape.name, params.size()).second)
        refuse(meta_path, fmt::format("lists parameter '{}' twice", shape.name));
      params.push_back(std::move(shape));
    }
    for (const json& s : member(meta, "states", json::value_t::array, meta_path)) {
      if (!s.is_string() || s.get<std::string>().empty()) refuse(meta_path, "has a malformed state name");
      states.push_back(s.get<std::string>());
    }
    if (std::find(states.begin(), states.end(), "master") == states.end())
      refuse(meta_path, "lists no \"master\" state");
    ranks.resize(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) open_rank(r);
    check_tiling();
  }

  void open_rank(int r) {
    RankFile& file = ranks[static_cast<size_t>(r)];
    file.index_path = (fs::path(dir) / (rank_file_stem(r) + ".json")).string();
    const json index = parse_json_file(file.index_path, "rank " + std::to_string(r) + "'s checkpoint index");
    const std::string& where = file.index_path;
    if (integer(index, "rank", where, 0, 1 << 20) != r) refuse(where, "belongs to another rank");
    const std::string data_name = member(index, "data_file", json::value_t::string, where).get<std::string>();
    if (!plain_file_name(data_name)) refuse(where, "names a data file outside the checkpoint");
    file.data_path = (fs::path(dir) / data_name).string();
    file.data_bytes = static_cast<uint64_t>(integer(index, "data_bytes", where, 0, int64_t{1} << 56));
    file.chunk_bytes = static_cast<uint64_t>(integer(index, "chunk_bytes", where, 4096, int64_t{1} << 30));
    for (const json& c : member(index, "chunks", json::value_t::array, where)) {
      if (!c.is_string() || c.get<std::string>().size() != 16) refuse(where, "has a malformed chunk checksum");
      char* end = nullptr;
      const std::string text = c.get<std::string>();
      file.chunks.push_back(std::strtoull(text.c_str(), &end, 16));
      if (end != text.c_str() + 16) refuse(where, "has a malformed chunk checksum");
    }
    if (file.chunks.size() != (file.data_bytes + file.chunk_bytes - 1) / file.chunk_bytes)
      refuse(where, "has a checksum count that does not match its data size");
    file.host = index.contains("host") ? index.at("host") : json::object();
    struct stat info {};
    if (::stat(file.data_path.c_str(), &info) != 0) refuse(file.data_path, "is missing");
    if (static_cast<uint64_t>(info.st_size) != file.data_bytes)
      refuse(file.data_path,
             fmt::format("has {} bytes, its index says {} (truncated?)", info.st_size, file.data_bytes));
    total_bytes += file.data_bytes;
    for (const json& f : member(index, "fragments", json::value_t::array, where)) {
      const std::string name = member(f, "param", json::value_t::string, where).get<std::string>();
      const auto found = param_index.find(name);
      if (found == param_index.end()) refuse(where, fmt::format("has a fragment of unknown parameter '{}'", name));
      const std::string state = member(f, "state", json::value_t::string, where).get<std::string>();
      if (std::find(states.begin(), states.end(), state) == states.end())
        refuse(where, fmt::format("has a fragment of unlisted state '{}'", state));
      const int64_t numel_param = params[found->second].numel();
      Piece piece{integer(f, "offset", where, 0, numel_param), integer(f, "numel", where, 1, numel_param), r,
                  static_cast<uint64_t>(integer(f, "byte_offset", where, 0, int64_t{1} << 56))};
      if (piece.offset + piece.numel > numel_param)
        refuse(where, fmt::format("has a fragment past the end of '{}'", name));
      if (piece.byte_offset + static_cast<uint64_t>(piece.numel) * sizeof(float) > file.data_bytes)
        refuse(where, fmt::format("has a fragment of '{}' past the end of its data file", name));
      pieces[{found->second, state}].push_back(piece);
    }
  }

  // Every (parameter, state) tiled exactly by the fragments of all ranks.
  void check_tiling() {
    for (size_t p = 0; p < params.size(); ++p)
      for (const std::string& state : states) {
        auto& list = pieces[{p, state}];
        std::sort(list.begin(), list.end(), [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
        int64_t next = 0;
        for (const Piece& piece : list) {
          if (piece.offset != next)
            refuse(meta_path, fmt::format("describes a checkpoint whose '{}' state of '{}' has {} at element {}", state,
                                          params[p].name, piece.offset > next ? "a hole" : "an overlap", next));
          next = piece.offset + piece.numel;
        }
        if (next != params[p].numel())
          refuse(meta_path, fmt::format("describes a checkpoint that lacks elements of '{}' state '{}' from {}",
                                        params[p].name, state, next));
      }
  }

  // Copies bytes [begin, begin + size) of rank r's data file into `out`, each chunk checked once read.
  void read_bytes(int r, uint64_t begin, uint64_t size, char* out) {
    RankFile& file = ranks[static_cast<size_t>(r)];
    if (file.fd < 0) {
      file.fd = ::open(file.data_path.c_str(), O_RDONLY | O_CLOEXEC);
      if (file.fd < 0) fail("cannot open the checkpoint file '{}': {}", file.data_path, describe_errno(errno));
    }
    while (size > 0) {
      const auto chunk = static_cast<int64_t>(begin / file.chunk_bytes);
      if (chunk != file.cached_chunk) load_chunk(file, chunk);
      const uint64_t within = begin - static_cast<uint64_t>(chunk) * file.chunk_bytes;
      const uint64_t take = std::min<uint64_t>(size, file.cache.size() - within);
      std::memcpy(out, file.cache.data() + within, take);
      out += take;
      begin += take;
      size -= take;
    }
  }

  static void load_chunk(RankFile& file, int64_t chunk) {
    const uint64_t begin = static_cast<uint64_t>(chunk) * file.chunk_bytes;
    const uint64_t size = std::min(file.chunk_bytes, file.data_bytes - begin);
    file.cache.resize(size);
    uint64_t done = 0;
    while (done < size) {
      const ssize_t n = ::pread(file.fd, file.cache.data() + done, size - done, static_cast<off_t>(begin + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        refuse(file.data_path, n < 0 ? std::string("cannot be read: ") + describe_errno(errno) : "is truncated");
      done += static_cast<uint64_t>(n);
    }
    if (XXH64(file.cache.data(), size, 0) != file.chunks[static_cast<size_t>(chunk)])
      refuse(file.data_path, fmt::format("fails its checksum in bytes [{}, {})", begin, begin + size));
    file.cached_chunk = chunk;
  }
};

CheckpointReader::CheckpointReader(const std::string& dir) : impl_(std::make_unique<Impl>()) {
  impl_->dir = dir;
  impl_->open_meta();
}

CheckpointReader::~CheckpointReader() = default;

const std::string& CheckpointReader::dir() const { return impl_->dir; }
const json& CheckpointReader::meta() const { return impl_->meta; }
const std::vector<ParamShape>& CheckpointReader::params() const { return impl_->params; }
const std::vector<std::string>& CheckpointReader::states() const { return impl_->states; }
int CheckpointReader::world_size() const { return static_cast<int>(impl_->ranks.size()); }
const json& CheckpointReader::rank_host(int rank) const { return impl_->ranks.at(static_cast<size_t>(rank)).host; }
uint64_t CheckpointReader::data_bytes() const { return impl_->total_bytes; }

void CheckpointReader::verify_rank_file(int rank) {
  Impl& c = *impl_;
  RankFile& file = c.ranks.at(static_cast<size_t>(rank));
  std::vector<char> sink;
  for (uint64_t begin = 0; begin < file.data_bytes; begin += file.chunk_bytes) {
    sink.resize(std::min(file.chunk_bytes, file.data_bytes - begin));
    c.read_bytes(rank, begin, sink.size(), sink.data());
  }
}

void CheckpointReader::read(const std::string& param, const std::string& state, int64_t offset, int64_t numel,
                            float* out) {
  Impl& c = *impl_;
  const auto found = c.param_index.find(param);
  if (found == c.param_index.end())
    fail_usage("checkpoint '{}' has no parameter '{}': it was saved from another model", c.dir, param);
  const auto list = c.pieces.find({found->second, state});
  if (list == c.pieces.end())
    fail_usage("checkpoint '{}' has no '{}' state (it has: {}): it was saved with another optimizer", c.dir, state,
               fmt::join(c.states, ", "));
  if (offset < 0 || numel < 0 || offset + numel > c.params[found->second].numel())
    fail("checkpoint read of '{}' [{}, {}) is outside the parameter", param, offset, offset + numel);
  const int64_t end = offset + numel;
  // The first piece that ends after `offset`; pieces tile the parameter, sorted by offset.
  auto piece = std::upper_bound(list->second.begin(), list->second.end(), offset,
                                [](int64_t value, const Piece& p) { return value < p.offset + p.numel; });
  for (; piece != list->second.end() && piece->offset < end; ++piece) {
    const int64_t lo = std::max(offset, piece->offset), hi = std::min(end, piece->offset + piece->numel);
    c.read_bytes(piece->rank, piece->byte_offset + static_cast<uint64_t>(lo - piece->offset) * sizeof(float),
                 static_cast<uint64_t>(hi - lo) * sizeof(float), reinterpret_cast<char*>(out + (lo - offset)));
  }
}

}  // namespace zhost::checkpoint
