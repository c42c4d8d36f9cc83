// host/services/kv_store.hpp: the key-value store ranks use to agree on things (plugins reach it
// through the host-services table). One process: LocalKvStore. A multi-rank job installs a store backed
// by the job's rendezvous store (c10d's TCPStore) through HostServices::set_kv_store().
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace zhost {

class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Waits up to `timeout` for `key`; nullopt when it did not appear in time.
  virtual std::optional<std::vector<uint8_t>> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

class LocalKvStore final : public KvStore {
 public:
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::optional<std::vector<uint8_t>> get(const std::string& key, std::chrono::milliseconds timeout) override;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<uint8_t>> values_;
};

}  // namespace zhost
