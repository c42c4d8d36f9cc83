// host/services/kv_store.cpp: the in-process key-value store.
#include "host/services/kv_store.hpp"

namespace zhost {

void LocalKvStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    values_[key] = value;
  }
  changed_.notify_all();
}

std::optional<std::vector<uint8_t>> LocalKvStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!changed_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; })) return std::nullopt;
  return values_.at(key);
}

}  // namespace zhost
