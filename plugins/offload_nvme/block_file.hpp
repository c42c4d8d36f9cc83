// plugins/offload_nvme/block_file.hpp: one O_DIRECT file of the NVMe tier, cut into extents (one per stored
// buffer), and the transfers between a caller's buffer and an extent: block_size requests through the
// aligned staging slots, queue_depth of them in flight, each block's xxHash checksum taken on write and
// verified on read (Note [Block checksums]).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "plugins/offload_nvme/io_engine.hpp"

namespace zhost::nvme_tier {

// Note [Block checksums]: every block written gets an XXH3-64 checksum of its bytes, kept in memory next
// to the buffer's extent (the files never outlive the job, Note [Job folders], so the checksums need not
// be on disk). A read recomputes each block's checksum before its bytes reach the caller; a mismatch is
// an error naming the file and offset (the blocks before it may already be in the caller's buffer, which
// the error marks as unusable). offload_nvme.verify_checksums = false skips both.
struct Stored {
  uint64_t offset = 0;    // in the file; a multiple of 4096
  uint64_t capacity = 0;  // bytes reserved: `bytes` rounded up to 4096
  uint64_t bytes = 0;
  std::vector<uint64_t> sums;  // one per block, empty when checksums are off
};

struct TransferOptions {
  uint32_t block_size = 1 << 20;  // aio.block_size, a multiple of 4096
  uint32_t queue_depth = 8;       // aio.queue_depth: staging slots, requests in flight
  bool overlap_events = true;     // aio.overlap_events: refill a slot as soon as it completes
  bool verify = true;             // offload_nvme.verify_checksums
};

class JobDir;

class BlockFile {
 public:
  // Opens DIR/data.bin with O_DIRECT; `slots` are the engine's staging slots (queue_depth of block_size).
  BlockFile(const JobDir& dir, IoEngine& engine, char* slots, const TransferOptions& options);
  ~BlockFile();
  BlockFile(const BlockFile&) = delete;
  BlockFile& operator=(const BlockFile&) = delete;

  // Writes `bytes` from `src` into a new extent (space reserved first: a full disk is an error before any
  // byte is written); on failure the extent is released and nothing else changed. `what` names the buffer.
  Stored write(const char* src, uint64_t bytes, const std::string& what);
  // Reads `stored` into `dst`, verifying each block.
  void read(const Stored& stored, char* dst, const std::string& what);
  void release(const Stored& stored);
  uint64_t reserved_bytes() const { return end_; }
  const std::string& path() const { return path_; }

 private:
  uint64_t allocate(uint64_t capacity, const std::string& what);
  void run(const Stored& stored, bool write, const char* src, char* dst, std::vector<uint64_t>* sums,
           const std::string& what);

  const JobDir& dir_;
  IoEngine& engine_;
  char* slots_;
  TransferOptions options_;
  std::string path_;
  int fd_ = -1;
  uint64_t end_ = 0;                        // file bytes reserved so far
  std::multimap<uint64_t, uint64_t> free_;  // capacity -> offset of released extents
};

}  // namespace zhost::nvme_tier
