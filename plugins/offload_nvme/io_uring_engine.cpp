// plugins/offload_nvme/io_uring_engine.cpp: the io_uring engine. The staging slots are registered with the
// ring once (fixed buffers: the kernel maps them once, not per request); requests are queued as
// READ_FIXED/WRITE_FIXED entries and handed to the kernel in one io_uring_submit per batch, or one per
// request with aio.single_submit.
#include <liburing.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "plugins/offload_nvme/io_engine.hpp"
#include "zhost/cpp/error.hpp"

namespace zhost::nvme_tier {

using sdk::PluginError;

namespace {

class UringEngine final : public IoEngine {
 public:
  explicit UringEngine(const EngineOptions& options) : options_(options), pending_(options.slot_count) {
    int rc = io_uring_queue_init(options.slot_count, &ring_, 0);
    if (rc < 0) throw PluginError(ZHOST_ERR_UNSUPPORTED, std::string("io_uring_queue_init: ") + std::strerror(-rc));
    std::vector<iovec> slots(options.slot_count);
    for (uint32_t s = 0; s < options.slot_count; ++s)
      slots[s] = iovec{options.slots + static_cast<size_t>(s) * options.slot_bytes, options.slot_bytes};
    rc = io_uring_register_buffers(&ring_, slots.data(), options.slot_count);
    if (rc < 0) {
      io_uring_queue_exit(&ring_);
      throw PluginError(ZHOST_ERR_UNSUPPORTED, std::string("io_uring_register_buffers: ") + std::strerror(-rc));
    }
  }
  ~UringEngine() override {
    // Every request's slot is the caller's: wait for what is still in the kernel before the ring goes.
    while (in_flight_ > 0) {
      try {
        wait_one();
      } catch (...) {
        break;
      }
    }
    io_uring_queue_exit(&ring_);
  }

  const char* name() const override { return "io_uring"; }
  uint32_t in_flight() const override { return in_flight_; }

  void submit(const IoRequest& request) override {
    pending_[request.slot] = Pending{request, 0};
    ++in_flight_;
    queue(request.slot);
    if (options_.single_submit) flush();
  }

  IoRequest wait_one() override {
    flush();
    for (;;) {
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec deadline{static_cast<long long>(options_.deadline_s), 0};
      int rc = io_uring_wait_cqe_timeout(&ring_, &cqe, &deadline);
      if (rc == -EINTR) continue;
      if (rc == -ETIME)
        throw PluginError(ZHOST_ERR_IO, "offload_nvme: no I/O completion within " +
                                            std::to_string(static_cast<int>(options_.deadline_s)) +
                                            " s (io_uring); the disk under nvme_path does not answer");
      if (rc < 0)
        throw PluginError(ZHOST_ERR_IO, std::string("offload_nvme: io_uring_wait_cqe: ") + std::strerror(-rc));
      const int slot = static_cast<int>(io_uring_cqe_get_data64(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      ++requests_done_;
      Pending& p = pending_[slot];
      if (res == -EINTR || res == -EAGAIN) {  // not started: try again as it was
        queue(slot);
        flush();
        continue;
      }
      if (res <= 0) {
        p.request.error = res == 0 ? ENODATA : -res;
        p.request.failed_offset = p.request.offset + p.done;
        return finish(slot);
      }
      p.done += static_cast<uint32_t>(res);
      if (p.done < p.request.len) {  // Note [Short transfers]: resubmit the rest
        queue(slot);
        flush();
        continue;
      }
      return finish(slot);
    }
  }

 private:
  struct Pending {
    IoRequest request;
    uint32_t done = 0;  // bytes transferred so far
  };

  void queue(int slot) {
    const Pending& p = pending_[slot];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {  // the ring has one entry per slot, so this only happens with unflushed retries
      flush();
      sqe = io_uring_get_sqe(&ring_);
    }
    char* buf = p.request.buf + p.done;
    const uint32_t len = p.request.len - p.done;
    const uint64_t offset = p.request.offset + p.done;
    if (p.request.write)
      io_uring_prep_write_fixed(sqe, p.request.fd, buf, len, offset, slot);
    else
      io_uring_prep_read_fixed(sqe, p.request.fd, buf, len, offset, slot);
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
    ++queued_;
  }

  void flush() {
    while (queued_ > 0) {
      int rc = io_uring_submit(&ring_);
      if (rc == -EINTR || rc == -EAGAIN) continue;
      if (rc < 0) throw PluginError(ZHOST_ERR_IO, std::string("offload_nvme: io_uring_submit: ") + std::strerror(-rc));
      queued_ -= static_cast<uint32_t>(rc) < queued_ ? static_cast<uint32_t>(rc) : queued_;
    }
  }

  IoRequest finish(int slot) {
    --in_flight_;
    return pending_[slot].request;
  }

  EngineOptions options_;
  io_uring ring_{};
  std::vector<Pending> pending_;  // by slot: each slot has at most one request in flight
  uint32_t in_flight_ = 0;
  uint32_t queued_ = 0;  // prepared, not yet submitted
};

}  // namespace

std::unique_ptr<IoEngine> make_uring_engine(const EngineOptions& options) {
  return std::make_unique<UringEngine>(options);
}

}  // namespace zhost::nvme_tier
