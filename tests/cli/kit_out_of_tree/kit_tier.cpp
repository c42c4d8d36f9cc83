// tests/cli/kit_out_of_tree/kit_tier.cpp: a third-party storage tier that links the plugin kit. It keeps
// buffers as ATen tensors through the kit's DLPack views (host or device tensors alike), and is built out
// of tree to show that a plugin using zhost::kit links with --no-undefined and exports only its entry.
#include <ATen/core/Tensor.h>

#include <map>
#include <string>

#include "zhost/cpp/offload.hpp"
#include "zhost/kit/dlpack_views.hpp"
#include "zhost/kit/format.hpp"

namespace {

using zhost::sdk::PluginError;

class KitTier : public zhost::sdk::TierDefaults {
 public:
  static constexpr uint64_t kTierFlags = ZHOST_PLUGIN_FLAG_TIER_STORES;

  explicit KitTier(const zhost::sdk::Host&) {}

  zhost_tier_event* store(uint64_t key, const DLTensor& data) {
    buffers_[key] = zhost::kit::tensor_view(data).to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
    return nullptr;
  }
  zhost_tier_event* load(uint64_t key, DLTensor& data) const {
    const auto it = buffers_.find(key);
    if (it == buffers_.end())
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, zhost::kit::format("kit_tier has no buffer {}", key));
    zhost::kit::tensor_view(data).copy_(it->second);
    return nullptr;
  }
  void drop(uint64_t key) { buffers_.erase(key); }
  void export_state(zhost_state_writer, void*) const {
    throw PluginError(ZHOST_ERR_UNSUPPORTED, "kit_tier does not export its state");
  }
  void import_state(zhost_state_reader, void*) {
    throw PluginError(ZHOST_ERR_UNSUPPORTED, "kit_tier does not import state");
  }

 private:
  std::map<uint64_t, at::Tensor> buffers_;
};

const zhost_plugin_api kApi = zhost::sdk::tier_api<KitTier>();

const zhost_plugin_descriptor* describe() {
  static zhost::sdk::DescriptorBuilder builder("kit_tier", "0.1.0", ZHOST_KIND_OFFLOAD);
  builder.summary("test tier built out of tree on the plugin kit")
      .provides({"offload:kittier"})
      .flags(KitTier::kTierFlags);
  return builder.build();
}

}  // namespace

ZHOST_PLUGIN_ENTRY(describe(), &kApi)
