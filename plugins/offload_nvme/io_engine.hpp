// plugins/offload_nvme/io_engine.hpp: the NVMe tier's I/O engines. A request reads or writes one aligned
// staging slot at one offset of an O_DIRECT file; an engine keeps several in flight and hands them back one
// at a time as they complete in full (a short transfer is resubmitted for its remainder, Note [Short
// transfers]). Two engines: io_uring (liburing, staging slots registered with the ring as fixed buffers)
// and a pool of threads doing pread/pwrite, chosen when io_uring cannot be set up (Note [Engine choice]).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace zhost::nvme_tier {

// Note [Short transfers]: a read or write may move fewer bytes than asked (a signal, a device or file
// system limit). The engines resubmit the rest, from where it stopped, until the whole request moved; a
// request ends early only with an error (its errno) or a read that hits the end of the file (ENODATA), and
// the caller turns either into one line naming the file and offset (describe_failure).

struct IoRequest {
  int fd = -1;
  const std::string* path = nullptr;  // for error messages; the file outlives the request
  bool write = false;
  uint64_t offset = 0;  // in the file, a multiple of 4096
  char* buf = nullptr;  // inside staging slot `slot`
  uint32_t len = 0;     // a multiple of 4096
  int slot = 0;
  uint64_t tag = 0;  // the caller's (the block index)
  // Filled on completion: 0, or the errno of the failure (ENODATA: the file ended before `len` bytes).
  int error = 0;
  uint64_t failed_offset = 0;  // where the failing part started
};

// What the engines share: the slots they may read into and write from (a multiple of 4096 each).
struct EngineOptions {
  char* slots = nullptr;  // slot_count * slot_bytes, aligned to 4096, owned by the caller
  uint32_t slot_count = 0;
  uint32_t slot_bytes = 0;
  bool single_submit = false;  // aio.single_submit: hand each request to the kernel on its own
  int threads = 1;             // aio.intra_op_parallelism: the thread engine's workers
  double deadline_s = 120;     // longest wait for one completion before it counts as hung
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  virtual const char* name() const = 0;
  // Queues `request` (at most slot_count in flight); it reaches the kernel at the latest in wait_one().
  virtual void submit(const IoRequest& request) = 0;
  // Blocks until one request has completed in full or failed (its `error` set) and returns it; throws
  // PluginError only when nothing completes within the deadline.
  virtual IoRequest wait_one() = 0;
  virtual uint32_t in_flight() const = 0;
  uint64_t requests_done() const { return requests_done_; }

 protected:
  uint64_t requests_done_ = 0;  // completions, retries of short transfers included
};

// io_uring with the slots registered; throws PluginError with the reason when the ring cannot be set up
// (no io_uring in this kernel, kernel.io_uring_disabled, a seccomp profile blocking it).
std::unique_ptr<IoEngine> make_uring_engine(const EngineOptions& options);
std::unique_ptr<IoEngine> make_thread_engine(const EngineOptions& options);

// One line for a failed request: what, where, why.
std::string describe_failure(const IoRequest& request);

}  // namespace zhost::nvme_tier
