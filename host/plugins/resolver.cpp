// host/plugins/resolver.cpp: needs -> providers, transitive requirements, conflicts, cycles, order.
#include "host/plugins/resolver.hpp"

#include <algorithm>
#include <functional>
#include <set>

#include "host/core/error.hpp"
#include "host/core/text.hpp"

namespace zhost {

std::vector<Need> needs_for(const ZeroSelection& zero) {
  std::vector<Need> needs;
  // Stage 0 is a need too: the host's built-in data-parallel engine serves it, unless a plugin file
  // providing partition:stage0 is found first on the search path.
  needs.push_back({fmt::format("partition:stage{}", zero.stage), fmt::format("zero.stage = {}", zero.stage)});
  if (zero.offload_optimizer != "none")
    needs.push_back({"offload:" + zero.offload_optimizer,
                     fmt::format("zero.offload_optimizer.device = \"{}\"", zero.offload_optimizer)});
  if (zero.offload_param != "none")
    needs.push_back({"offload:" + zero.offload_param, fmt::format("zero.offload_param.device = \"{}\"", zero.offload_param)});
  if (zero.quantized_weights) needs.push_back({"collective:qwz", "zero.zero_quantized_weights = true"});
  if (zero.quantized_gradients) needs.push_back({"collective:qgz", "zero.zero_quantized_gradients = true"});
  if (zero.hpz_partition_size > 1)
    needs.push_back({"collective:hpz", fmt::format("zero.zero_hpz_partition_size = {}", zero.hpz_partition_size)});
  return needs;
}

namespace {

std::string describe_found(const std::vector<LoadedPlugin>& found) {
  std::vector<std::string> items;
  for (const auto& p : found) items.push_back(fmt::format("{} ({})", p.info.name, text::join(p.info.provides, ", ")));
  return items.empty() ? "no plugins at all" : text::join(items, "; ");
}

const LoadedPlugin* first_provider(const std::vector<LoadedPlugin>& found, const std::string& capability) {
  for (const auto& p : found)
    if (std::count(p.info.provides.begin(), p.info.provides.end(), capability)) return &p;
  return nullptr;
}

}  // namespace

Resolution resolve_plugins(const std::vector<Need>& needs, const std::vector<LoadedPlugin>& found) {
  Resolution resolution;
  // 1. Serve each need, then each chosen plugin's requirements, breadth first.
  std::vector<std::pair<std::string, std::string>> queue;  // capability, why
  for (const auto& need : needs) queue.emplace_back(need.capability, need.reason);
  std::vector<const LoadedPlugin*> chosen;
  for (size_t i = 0; i < queue.size(); ++i) {
    const auto [capability, why] = queue[i];
    const LoadedPlugin* provider = first_provider(found, capability);
    if (!provider) {
      std::vector<std::string> known;
      for (const auto& p : found) known.insert(known.end(), p.info.provides.begin(), p.info.provides.end());
      if (i < needs.size())
        fail_usage("{} needs a plugin providing '{}', but none was found (found: {}){}; add its directory to "
                   "plugins.path or ZHOST_PLUGIN_PATH", why, capability, describe_found(found),
                   text::did_you_mean(capability, known));
      fail_usage("{}, but no plugin providing '{}' was found (found: {})", why, capability, describe_found(found));
    }
    resolution.provider[capability] = provider;
    resolution.chosen_for[provider].push_back(why);
    if (std::find(chosen.begin(), chosen.end(), provider) != chosen.end()) continue;
    chosen.push_back(provider);
    for (const auto& required : provider->info.requires_caps)
      queue.emplace_back(required, fmt::format("plugin '{}' requires '{}'", provider->info.name, required));
  }
  // 2. Conflicts among the chosen plugins.
  for (const auto* plugin : chosen)
    for (const auto& conflict : plugin->info.conflicts)
      for (const auto* other : chosen)
        if (other != plugin && std::count(other->info.provides.begin(), other->info.provides.end(), conflict))
          fail_usage("plugins '{}' ({}) and '{}' ({}) conflict: '{}' declares it cannot run with '{}'; change the config "
                     "so that only one of them is needed", plugin->info.name, plugin->path.string(), other->info.name,
                     other->path.string(), plugin->info.name, conflict);
  // 3. Initialisation order: dependencies first, cycles reported with their path.
  enum class Mark { kNone, kVisiting, kDone };
  std::map<const LoadedPlugin*, Mark> marks;
  std::vector<const LoadedPlugin*> stack;
  std::function<void(const LoadedPlugin*)> visit = [&](const LoadedPlugin* plugin) {
    Mark& mark = marks[plugin];
    if (mark == Mark::kDone) return;
    if (mark == Mark::kVisiting) {
      std::vector<std::string> cycle;
      auto start = std::find(stack.begin(), stack.end(), plugin);
      for (auto it = start; it != stack.end(); ++it) cycle.push_back((*it)->info.name);
      cycle.push_back(plugin->info.name);
      fail_usage("plugin dependency cycle: {}; one of these plugins must drop its requirement",
                 text::join(cycle, " requires "));
    }
    mark = Mark::kVisiting;
    stack.push_back(plugin);
    for (const auto& required : plugin->info.requires_caps) visit(resolution.provider.at(required));
    stack.pop_back();
    marks[plugin] = Mark::kDone;
    resolution.plugins.push_back(plugin);
  };
  for (const auto* plugin : chosen) visit(plugin);
  return resolution;
}

std::map<std::string, std::string> inactive_plugin_keys(const Resolution& resolution,
                                                        const std::vector<LoadedPlugin>& found) {
  std::set<std::string> active;
  for (const auto* plugin : resolution.plugins)
    for (const auto& key : plugin->info.config_keys) active.insert(key.key);
  std::map<std::string, std::string> inactive;
  for (const auto& plugin : found) {
    if (std::count(resolution.plugins.begin(), resolution.plugins.end(), &plugin)) continue;
    for (const auto& key : plugin.info.config_keys)
      if (!active.count(key.key) && !inactive.count(key.key))
        inactive[key.key] = fmt::format("it is read by plugin '{}' ({}), which this config does not use", plugin.info.name,
                                        text::join(plugin.info.provides, ", "));
  }
  return inactive;
}

}  // namespace zhost
