// sdk/conformance/plugin_under_test.cpp: loading, negotiating and instantiating the plugin under test.
#include "plugin_under_test.hpp"

#include <dlfcn.h>

#include <stdexcept>

namespace zhost::conformance {

PluginUnderTest::PluginUnderTest(const std::string& path) : negotiation_host_(nullptr, {}, false) {
  library_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library_) throw std::runtime_error("cannot load " + path + ": " + dlerror());
  auto entry = reinterpret_cast<zhost_plugin_entry_v1_fn>(dlsym(library_, ZHOST_ENTRY_SYMBOL_V1));
  if (!entry)
    throw std::runtime_error(path + " exports no " ZHOST_ENTRY_SYMBOL_V1 ": not a zhost plugin of ABI major 1");
  negotiation_.struct_size = sizeof(negotiation_);
  negotiation_.host_abi_major = ZHOST_ABI_MAJOR;
  negotiation_.host_abi_minor = ZHOST_ABI_MINOR;
  negotiation_.host = negotiation_host_.table();
  if (zhost_status* refused = entry(&negotiation_))
    throw std::runtime_error(path + " refused negotiation: " + negotiation_host_.take_message(refused));
  if (!negotiation_.descriptor || !negotiation_.api)
    throw std::runtime_error(path + " answered negotiation without a descriptor or lifecycle table");
}

Instance::Instance(const PluginUnderTest& plugin, KitHost& host) : plugin_(plugin) {
  zhost_plugin_create_args args{};
  args.struct_size = sizeof(args);
  args.host = host.table();
  args.ctx = host.context();
  if (zhost_status* status = plugin.api().create(&args))
    error_ = host.take_message(status);
  else
    instance_ = args.instance;
}

Instance::~Instance() {
  if (instance_) plugin_.api().destroy(instance_);
}

}  // namespace zhost::conformance
