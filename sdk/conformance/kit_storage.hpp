// sdk/conformance/kit_storage.hpp: the conformance kit's reference storage tier, installed under a
// computing tier that declares ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE (tier_for(ZHOST_TIER_FOR_OPTIMIZER_STORAGE)):
// a map of buffers by key, synchronous, that counts what it holds, so the kit can see that the computing
// tier really keeps its states there and drops them with its groups.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "zhost/zhost.h"

namespace zhost::conformance {

class KitStorage {
 public:
  // The ref to install with KitHost::set_tier; valid while this object lives.
  zhost_tier_ref ref();
  uint64_t bytes() const;
  size_t buffers() const { return buffers_.size(); }
  uint64_t stores() const { return stores_; }
  uint64_t loads() const { return loads_; }

 private:
  static zhost_status* store(zhost_plugin_instance* self, zhost_tier_io_args* args);
  static zhost_status* load(zhost_plugin_instance* self, zhost_tier_io_args* args);
  static zhost_status* drop(zhost_plugin_instance* self, zhost_tier_key_args* args);
  static KitStorage& of(zhost_plugin_instance* self) { return *reinterpret_cast<KitStorage*>(self); }

  std::map<uint64_t, std::vector<char>> buffers_;
  uint64_t stores_ = 0, loads_ = 0;
  zhost_storage_api table_{};
};

}  // namespace zhost::conformance
