// plugins/offload_nvme/op_queue.cpp: the NVMe tier's operation queue (see the header).
#include "plugins/offload_nvme/op_queue.hpp"

#include "zhost/cpp/error.hpp"

namespace zhost::nvme_tier {

using sdk::PluginError;

OpQueue::OpQueue() : worker_([this] { work(); }) {}

OpQueue::~OpQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  todo_cv_.notify_all();
  worker_.join();
  for (zhost_tier_event* e : live_) delete e;
}

zhost_tier_event* OpQueue::submit(std::function<void()> op, bool with_event) {
  zhost_tier_event* event = with_event ? new zhost_tier_event : nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (event) live_.insert(event);
    todo_.emplace_back(std::move(op), event);
  }
  todo_cv_.notify_one();
  return event;
}

void OpQueue::work() {
  for (;;) {
    std::pair<std::function<void()>, zhost_tier_event*> item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      todo_cv_.wait(lock, [&] { return stopping_ || !todo_.empty(); });
      if (todo_.empty()) return;  // stopping, and everything queued ran
      item = std::move(todo_.front());
      todo_.pop_front();
      busy_ = true;
    }
    zhost_status_code code = ZHOST_OK;
    std::string error;
    try {
      item.first();
    } catch (const PluginError& e) {
      code = e.code();
      error = e.what();
    } catch (const std::exception& e) {
      code = ZHOST_ERR_INTERNAL;
      error = e.what();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (item.second) {
        item.second->code = code;
        item.second->error = std::move(error);
        item.second->done = true;
      }
      busy_ = false;
    }
    done_cv_.notify_all();
  }
}

void OpQueue::check_owned(zhost_tier_event* event) const {
  if (!live_.count(event))
    throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_nvme: the event is not one of this tier's pending events");
}

// Frees a finished event (the lock held) and throws its failure.
void OpQueue::complete(zhost_tier_event* event) {
  live_.erase(event);
  std::unique_ptr<zhost_tier_event> owned(event);
  if (owned->code != ZHOST_OK) throw PluginError(owned->code, owned->error);
}

void OpQueue::wait(zhost_tier_event* event) {
  if (!event) return;
  std::unique_lock<std::mutex> lock(mutex_);
  check_owned(event);
  // Each request inside has its own deadline (the engines'), so this wait ends.
  done_cv_.wait(lock, [&] { return event->done; });
  complete(event);
}

bool OpQueue::test(zhost_tier_event* event) {
  if (!event) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  check_owned(event);
  if (!event->done) return false;
  complete(event);
  return true;
}

void OpQueue::block_until_done(zhost_tier_event* event) {
  if (!event) return;
  std::unique_lock<std::mutex> lock(mutex_);
  check_owned(event);
  done_cv_.wait(lock, [&] { return event->done; });
}

void OpQueue::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return todo_.empty() && !busy_; });
}

}  // namespace zhost::nvme_tier
