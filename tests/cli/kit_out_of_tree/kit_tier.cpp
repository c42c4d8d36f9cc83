// tests/cli/kit_out_of_tree/kit_tier.cpp: a third-party offload tier that links the plugin kit. It
// stores buffers as ATen tensors through the kit's DLPack views (host or device tensors alike). Built out
// of tree to show that a plugin using zhost::kit links with --no-undefined and exports only its entry.
#include <ATen/core/Tensor.h>

#include <map>

#include "zhost/cpp/plugin.hpp"
#include "zhost/kit/dlpack_views.hpp"

namespace {

using zhost::sdk::PluginError;

class KitTier {
 public:
  explicit KitTier(const zhost::sdk::Host&) {}
  void store(uint64_t key, const DLTensor& data) {
    buffers_[key] = zhost::kit::tensor_view(data).to(at::kCPU, true, true);
  }
  void load(uint64_t key, const DLTensor& data) const {
    const auto it = buffers_.find(key);
    if (it == buffers_.end())
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "kit_tier has no buffer " + std::to_string(key));
    zhost::kit::tensor_view(data).copy_(it->second);
  }
  void drop(uint64_t key) { buffers_.erase(key); }

 private:
  std::map<uint64_t, at::Tensor> buffers_;
};

using Instance = zhost::sdk::InstanceOf<KitTier>;

zhost_status* store(zhost_plugin_instance* self, zhost_tier_io_args* args) {
  return zhost::sdk::guard([&] {
    Instance::self(self).store(args->key, *args->data);
    args->event = nullptr;
  });
}
zhost_status* load(zhost_plugin_instance* self, zhost_tier_io_args* args) {
  return zhost::sdk::guard([&] {
    Instance::self(self).load(args->key, *args->data);
    args->event = nullptr;
  });
}
zhost_status* wait_event(zhost_plugin_instance*, zhost_tier_event*) { return nullptr; }
zhost_status* drop(zhost_plugin_instance* self, uint64_t key) {
  return zhost::sdk::guard([&] { Instance::self(self).drop(key); });
}

const zhost_offload_api kOffload = {sizeof(zhost_offload_api), nullptr, store, load, wait_event, drop};
const zhost_plugin_api kApi = {sizeof(zhost_plugin_api), nullptr, nullptr,   Instance::create,
                               Instance::destroy,        nullptr, &kOffload, nullptr};

const zhost_plugin_descriptor* describe() {
  static zhost::sdk::DescriptorBuilder builder("kit_tier", "0.1.0", ZHOST_KIND_OFFLOAD);
  builder.summary("test tier built out of tree on the plugin kit").provides({"offload:kittier"});
  return builder.build();
}

}  // namespace

ZHOST_PLUGIN_ENTRY(describe(), &kApi)
