// host/services/comm_kv_store.cpp: the host-services key-value store over the job's rendezvous store (see
// the header).
#include "host/services/comm_kv_store.hpp"

#include "host/comm/comm.hpp"

namespace zhost {

void CommKvStore::set(const std::string& key, const std::vector<uint8_t>& value) { world_.store_set(key, value); }

std::optional<std::vector<uint8_t>> CommKvStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return world_.store_get(key, static_cast<double>(timeout.count()) / 1000.0);
}

}  // namespace zhost
