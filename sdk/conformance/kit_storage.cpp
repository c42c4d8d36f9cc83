// sdk/conformance/kit_storage.cpp: the kit's reference storage tier (see the header).
#include "kit_storage.hpp"

#include <cstring>
#include <string>

#include "kit_host.hpp"

namespace zhost::conformance {
namespace {

size_t byte_size(const DLTensor& t) {
  size_t n = (t.dtype.bits * t.dtype.lanes + 7) / 8;
  for (int i = 0; i < t.ndim; ++i) n *= static_cast<size_t>(t.shape[i]);
  return n;
}

zhost_status* no_event(zhost_plugin_instance*, zhost_tier_event_args* args) {
  args->done = 1;
  return args->event ? KitHost::make_status(ZHOST_ERR_INVALID_ARGUMENT, "kit storage: not an event of this tier")
                     : nullptr;
}

}  // namespace

zhost_tier_ref KitStorage::ref() {
  table_.struct_size = sizeof(table_);
  table_.store = store;
  table_.load = load;
  table_.wait = no_event;
  table_.test = no_event;
  table_.drop = drop;
  zhost_tier_ref ref{};
  ref.struct_size = sizeof(ref);
  ref.role = ZHOST_TIER_FOR_OPTIMIZER_STORAGE;
  ref.instance = reinterpret_cast<zhost_plugin_instance*>(this);
  ref.storage = &table_;
  ref.name = "kit_storage";
  return ref;
}

uint64_t KitStorage::bytes() const {
  uint64_t total = 0;
  for (const auto& [key, buffer] : buffers_) total += buffer.size();
  return total;
}

zhost_status* KitStorage::store(zhost_plugin_instance* self, zhost_tier_io_args* args) {
  const char* src = static_cast<const char*>(args->data->data) + args->data->byte_offset;
  of(self).buffers_[args->key].assign(src, src + byte_size(*args->data));
  ++of(self).stores_;
  args->event = nullptr;
  return nullptr;
}

zhost_status* KitStorage::load(zhost_plugin_instance* self, zhost_tier_io_args* args) {
  auto it = of(self).buffers_.find(args->key);
  if (it == of(self).buffers_.end())
    return KitHost::make_status(ZHOST_ERR_INVALID_ARGUMENT, "kit storage: no buffer " + std::to_string(args->key));
  if (it->second.size() != byte_size(*args->data))
    return KitHost::make_status(ZHOST_ERR_INVALID_ARGUMENT, "kit storage: size mismatch on load");
  std::memcpy(static_cast<char*>(args->data->data) + args->data->byte_offset, it->second.data(), it->second.size());
  ++of(self).loads_;
  args->event = nullptr;
  return nullptr;
}

zhost_status* KitStorage::drop(zhost_plugin_instance* self, zhost_tier_key_args* args) {
  of(self).buffers_.erase(args->key);
  return nullptr;
}

}  // namespace zhost::conformance
