// plugins/offload_nvme/io_thread_engine.cpp: the engine used where io_uring is not available (Note [Engine
// choice]): aio.intra_op_parallelism threads take requests from a queue and run pread/pwrite until the
// whole request is transferred (Note [Short transfers]) or fails; completions go back through a second
// queue.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "plugins/offload_nvme/io_engine.hpp"
#include "zhost/cpp/error.hpp"

namespace zhost::nvme_tier {

using sdk::PluginError;

namespace {

class ThreadEngine final : public IoEngine {
 public:
  explicit ThreadEngine(const EngineOptions& options) : options_(options) {
    for (int t = 0; t < std::max(1, options.threads); ++t) workers_.emplace_back([this] { work(); });
  }
  ~ThreadEngine() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    todo_cv_.notify_all();
    for (auto& w : workers_) w.join();  // a worker finishes the request it holds first
  }

  const char* name() const override { return "threads"; }
  uint32_t in_flight() const override { return in_flight_; }

  void submit(const IoRequest& request) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      todo_.push_back(request);
    }
    ++in_flight_;
    todo_cv_.notify_one();
  }

  IoRequest wait_one() override {
    std::unique_lock<std::mutex> lock(mutex_);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.deadline_s);
    if (!done_cv_.wait_until(lock, deadline, [&] { return !done_.empty(); }))
      throw PluginError(ZHOST_ERR_IO, "offload_nvme: no I/O completion within " +
                                          std::to_string(static_cast<int>(options_.deadline_s)) +
                                          " s (threads); the disk under nvme_path does not answer");
    IoRequest r = done_.front();
    done_.pop_front();
    --in_flight_;
    return r;
  }

 private:
  void work() {
    for (;;) {
      IoRequest r;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        todo_cv_.wait(lock, [&] { return stopping_ || !todo_.empty(); });
        if (todo_.empty()) return;
        r = todo_.front();
        todo_.pop_front();
      }
      transfer(r);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        done_.push_back(r);
        ++requests_done_;
      }
      done_cv_.notify_one();
    }
  }

  static void transfer(IoRequest& r) {
    uint32_t done = 0;
    while (done < r.len) {
      ssize_t n = r.write ? ::pwrite(r.fd, r.buf + done, r.len - done, static_cast<off_t>(r.offset + done))
                          : ::pread(r.fd, r.buf + done, r.len - done, static_cast<off_t>(r.offset + done));
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        r.error = n == 0 ? ENODATA : errno;
        r.failed_offset = r.offset + done;
        return;
      }
      done += static_cast<uint32_t>(n);  // Note [Short transfers]: loop for the rest
    }
  }

  EngineOptions options_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable todo_cv_, done_cv_;
  std::deque<IoRequest> todo_, done_;
  bool stopping_ = false;
  uint32_t in_flight_ = 0;  // the caller's thread only
};

}  // namespace

std::unique_ptr<IoEngine> make_thread_engine(const EngineOptions& options) {
  return std::make_unique<ThreadEngine>(options);
}

}  // namespace zhost::nvme_tier
