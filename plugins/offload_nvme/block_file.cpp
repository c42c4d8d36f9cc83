// plugins/offload_nvme/block_file.cpp: extents and block transfers of the NVMe tier (see the header).
#include "plugins/offload_nvme/block_file.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>

#include "plugins/offload_nvme/job_dir.hpp"
#include "zhost/cpp/error.hpp"

namespace zhost::nvme_tier {

using sdk::PluginError;

namespace {

constexpr uint64_t kAlign = 4096;  // O_DIRECT: offsets, lengths and buffers on 4 KiB

uint64_t align_up(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

BlockFile::BlockFile(const JobDir& dir, IoEngine& engine, char* slots, const TransferOptions& options)
    : dir_(dir), engine_(engine), slots_(slots), options_(options), path_(dir.path() + "/data.bin") {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    const int e = errno;
    throw PluginError(ZHOST_ERR_UNSUPPORTED,
                      "offload_nvme: cannot open " + path_ + " with O_DIRECT: " + std::strerror(e) +
                          (e == EINVAL ? " (this file system has no direct I/O, e.g. tmpfs; point "
                                         "zero.offload_optimizer.nvme_path at a disk)"
                                       : ""));
  }
}

BlockFile::~BlockFile() {
  if (fd_ >= 0) ::close(fd_);
}

// Reuses a released extent of at least `capacity` bytes (splitting off the rest), else grows the file.
// Growing reserves the space with fallocate first, so a full disk shows here, before any byte is written.
uint64_t BlockFile::allocate(uint64_t capacity, const std::string& what) {
  auto it = free_.lower_bound(capacity);
  if (it != free_.end()) {
    const uint64_t offset = it->second, rest = it->first - capacity;
    free_.erase(it);
    if (rest) free_.emplace(rest, offset + capacity);
    return offset;
  }
  const uint64_t available = dir_.free_bytes();
  if (available < capacity)
    throw PluginError(ZHOST_ERR_IO, "offload_nvme: storing " + what + " needs " + std::to_string(capacity) +
                                        " more bytes in " + path_ + ", but its file system has " +
                                        std::to_string(available) +
                                        " bytes free; free space there or point zero.offload_optimizer.nvme_path "
                                        "at a larger disk");
  if (int rc = ::posix_fallocate(fd_, static_cast<off_t>(end_), static_cast<off_t>(capacity)); rc != 0)
    throw PluginError(ZHOST_ERR_IO, "offload_nvme: cannot reserve " + std::to_string(capacity) + " bytes at offset " +
                                        std::to_string(end_) + " of " + path_ + " for " + what + ": " +
                                        std::strerror(rc) +
                                        (rc == ENOSPC ? "; free space there or point "
                                                        "zero.offload_optimizer.nvme_path at a larger disk"
                                                      : ""));
  const uint64_t offset = end_;
  end_ += capacity;
  return offset;
}

void BlockFile::release(const Stored& stored) {
  if (stored.capacity) free_.emplace(stored.capacity, stored.offset);
}

Stored BlockFile::write(const char* src, uint64_t bytes, const std::string& what) {
  Stored stored;
  stored.bytes = bytes;
  stored.capacity = align_up(bytes);
  if (!bytes) return stored;
  stored.offset = allocate(stored.capacity, what);
  try {
    run(stored, true, src, nullptr, options_.verify ? &stored.sums : nullptr, what);
  } catch (...) {
    release(stored);
    throw;
  }
  return stored;
}

void BlockFile::read(const Stored& stored, char* dst, const std::string& what) {
  if (stored.bytes) run(stored, false, nullptr, dst, nullptr, what);
}

// One transfer: blocks go through the free slots; with overlap_events a slot is refilled as soon as its
// request completes, else each wave of queue_depth requests completes before the next is submitted. The
// first failure stops new submissions; what is in flight is waited for (the slots are borrowed) and the
// failure is thrown.
void BlockFile::run(const Stored& stored, bool write, const char* src, char* dst, std::vector<uint64_t>* sums,
                    const std::string& what) {
  const uint64_t block = options_.block_size;
  const uint64_t blocks = (stored.bytes + block - 1) / block;
  if (sums) sums->assign(blocks, 0);
  std::vector<int> free_slots;
  for (int s = static_cast<int>(options_.queue_depth) - 1; s >= 0; --s) free_slots.push_back(s);
  std::string failure;
  uint64_t next = 0;
  bool wave_open = true;
  auto real_len = [&](uint64_t b) { return std::min(block, stored.bytes - b * block); };

  while ((failure.empty() && next < blocks) || engine_.in_flight() > 0) {
    if (!options_.overlap_events && engine_.in_flight() == 0) wave_open = true;
    while (failure.empty() && next < blocks && !free_slots.empty() && (options_.overlap_events || wave_open)) {
      IoRequest r;
      r.fd = fd_;
      r.path = &path_;
      r.write = write;
      r.slot = free_slots.back();
      free_slots.pop_back();
      r.buf = slots_ + static_cast<uint64_t>(r.slot) * block;
      r.offset = stored.offset + next * block;
      r.len = static_cast<uint32_t>(align_up(real_len(next)));
      r.tag = next;
      if (write) {
        const uint64_t n = real_len(next);
        std::memcpy(r.buf, src + next * block, n);
        std::memset(r.buf + n, 0, r.len - n);
        if (sums) (*sums)[next] = XXH3_64bits(r.buf, n);
      }
      engine_.submit(r);
      ++next;
    }
    wave_open = false;
    if (engine_.in_flight() == 0) break;
    IoRequest done = engine_.wait_one();
    free_slots.push_back(done.slot);
    if (done.error) {
      if (failure.empty()) failure = describe_failure(done) + " (" + what + ")";
      continue;
    }
    if (write || !failure.empty()) continue;
    const uint64_t n = real_len(done.tag);
    if (options_.verify && !stored.sums.empty() && XXH3_64bits(done.buf, n) != stored.sums[done.tag]) {
      failure = "offload_nvme: checksum mismatch in " + path_ + " at offset " + std::to_string(done.offset) +
                " (a block of " + std::to_string(n) + " bytes of " + what +
                "): the bytes on disk are not the bytes written, so they are not used; the disk or "
                "something writing to that file corrupted them";
      continue;
    }
    std::memcpy(dst + done.tag * block, done.buf, n);
  }
  if (!failure.empty()) throw PluginError(ZHOST_ERR_IO, failure);
}

std::string describe_failure(const IoRequest& r) {
  const std::string where = " at offset " + std::to_string(r.failed_offset) + " of " + (r.path ? *r.path : "?");
  if (r.error == ENODATA)
    return "offload_nvme: read of " + std::to_string(r.len) + " bytes" + where + " hit the end of the file";
  return std::string("offload_nvme: ") + (r.write ? "write" : "read") + " of " + std::to_string(r.len) + " bytes" +
         where + " failed: " + std::strerror(r.error) +
         (r.error == ENOSPC ? "; free space there or point the nvme_path key at a larger disk" : "");
}

}  // namespace zhost::nvme_tier
