// sdk/conformance/plugin_under_test.hpp: the plugin the kit checks: its shared object loaded with dlopen,
// negotiated as a host of this SDK's ABI would, and instances created and destroyed against a KitHost.
#pragma once

#include <memory>
#include <string>

#include "kit_host.hpp"

namespace zhost::conformance {

class PluginUnderTest {
 public:
  // Throws std::runtime_error when the file is no zhost plugin (no entry) or refuses negotiation.
  explicit PluginUnderTest(const std::string& path);
  PluginUnderTest(const PluginUnderTest&) = delete;
  PluginUnderTest& operator=(const PluginUnderTest&) = delete;

  const zhost_negotiation& negotiation() const { return negotiation_; }
  const zhost_plugin_descriptor& descriptor() const { return *negotiation_.descriptor; }
  const zhost_plugin_api& api() const { return *negotiation_.api; }

 private:
  void* library_ = nullptr;  // never closed: plugins may leave thread-locals and atexit handlers behind
  KitHost negotiation_host_;
  zhost_negotiation negotiation_{};
};

// One live instance of the plugin; destroyed with this object.
class Instance {
 public:
  // Creates the instance; on failure instance() is NULL and error() says why.
  Instance(const PluginUnderTest& plugin, KitHost& host);
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  zhost_plugin_instance* get() const { return instance_; }
  const std::string& error() const { return error_; }

 private:
  const PluginUnderTest& plugin_;
  zhost_plugin_instance* instance_ = nullptr;
  std::string error_;
};

}  // namespace zhost::conformance
