// host/services/comm_kv_store.hpp: the key-value store of the host-services table (kv_set, kv_get) for a
// multi-rank job, backed by the job's rendezvous store (c10d's TCPStore), so that plugins on every rank see
// the same values. The engine installs it with HostServices::set_kv_store() once the process group exists.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "host/services/kv_store.hpp"

namespace zhost {
namespace comm {
class Comm;
}

class CommKvStore final : public KvStore {
 public:
  // Serves from `world`'s rendezvous store; `world` outlives the store.
  explicit CommKvStore(comm::Comm& world) : world_(world) {}
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::optional<std::vector<uint8_t>> get(const std::string& key, std::chrono::milliseconds timeout) override;

 private:
  comm::Comm& world_;
};

}  // namespace zhost
