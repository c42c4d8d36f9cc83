// host/plugins/instances.cpp: plugin instance lifecycle (probe, create, destroy).
#include "host/plugins/instances.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "host/core/error.hpp"

namespace zhost {

PluginInstances::~PluginInstances() { destroy_all(); }

void PluginInstances::create_all(
    const Resolution& resolution,
    const std::function<std::map<std::string, ConfigValue>(const LoadedPlugin&)>& config_for) {
  try {
    for (const InstanceSpec& spec : resolution.instances) instances_.push_back(create(spec, config_for(*spec.plugin)));
  } catch (...) {
    destroy_all();
    throw;
  }
}

PluginInstance PluginInstances::create(const InstanceSpec& spec, const std::map<std::string, ConfigValue>& config) {
  const LoadedPlugin* plugin = spec.plugin;
  PluginInstance live;
  live.plugin = plugin;
  live.tier_role = spec.tier_role;
  live.ctx = services_.create_context({plugin->info.name, config});
  const std::string where = fmt::format("plugin '{}' ({})", plugin->info.name, plugin->path.string());
  if (plugin->api->probe) {
    zhost_probe_args probe{};
    probe.struct_size = sizeof(probe);
    probe.host = services_.table();
    probe.ctx = live.ctx;
    if (zhost_status* status = plugin->api->probe(&probe)) {
      services_.destroy_context(live.ctx);
      HostServices::throw_if_error(status, where + " cannot run here");
    }
  }
  zhost_plugin_create_args args{};
  args.struct_size = sizeof(args);
  args.host = services_.table();
  args.ctx = live.ctx;
  args.tier_role = spec.tier_role;
  if (zhost_status* status = plugin->api->create(&args)) {
    services_.destroy_context(live.ctx);
    HostServices::throw_if_error(status, where + " failed to initialise");
  }
  live.instance = args.instance;
  spdlog::debug("plugin '{}' {} initialised", plugin->info.name, plugin->info.version);
  return live;
}

const PluginInstance& PluginInstances::create_one(const InstanceSpec& spec,
                                                  const std::map<std::string, ConfigValue>& config,
                                                  const PluginInstance& before) {
  auto at =
      std::find_if(instances_.begin(), instances_.end(), [&](const PluginInstance& live) { return &live == &before; });
  ZHOST_ASSERT(at != instances_.end());
  return *instances_.insert(at, create(spec, config));
}

void PluginInstances::destroy_one(const PluginInstance& live) {
  auto at =
      std::find_if(instances_.begin(), instances_.end(), [&](const PluginInstance& other) { return &other == &live; });
  ZHOST_ASSERT(at != instances_.end());
  at->plugin->api->destroy(at->instance);
  services_.destroy_context(at->ctx);
  instances_.erase(at);
}

void PluginInstances::destroy_all() {
  for (auto it = instances_.rbegin(); it != instances_.rend(); ++it) {
    it->plugin->api->destroy(it->instance);
    services_.destroy_context(it->ctx);
  }
  instances_.clear();
}

const PluginInstance* PluginInstances::of_kind(zhost_capability_kind kind) const {
  for (const auto& live : instances_)
    if (live.plugin->info.kind == kind) return &live;
  return nullptr;
}

}  // namespace zhost
