// host/plugins/resolver.hpp: from what a config needs to the set of plugins that serve it.
//
// Needs are capability names with the config setting that asks for them ("partition:stage2" because
// zero.stage = 2). Each need is served by the first plugin in search order that provides it; the chosen
// plugins' own requirements are served the same way, transitively. Reported before anything runs, each
// as one line: a need nobody provides (listing what was found), a requirement nobody provides, two chosen
// plugins that conflict, and dependency cycles. The result is in initialisation order (dependencies first).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "host/plugins/plugin_info.hpp"

namespace zhost {

struct Need {
  std::string capability;  // e.g. "offload:nvme"
  std::string reason;      // e.g. "zero.offload_optimizer.device = \"nvme\""
};

// The ZeRO selectors of a config, from which needs derive.
struct ZeroSelection {
  int64_t stage = 0;
  std::string offload_optimizer = "none";
  std::string offload_param = "none";
  bool quantized_weights = false;
  bool quantized_gradients = false;
  int64_t hpz_partition_size = 1;
};

std::vector<Need> needs_for(const ZeroSelection& zero);

struct Resolution {
  std::vector<const LoadedPlugin*> plugins;                       // initialisation order
  std::map<std::string, const LoadedPlugin*> provider;            // capability -> chosen plugin
  std::map<const LoadedPlugin*, std::vector<std::string>> chosen_for;  // plugin -> reasons it was chosen
};

// Throws UsageError on the first problem. `found` is in search order.
Resolution resolve_plugins(const std::vector<Need>& needs, const std::vector<LoadedPlugin>& found);

// Config keys declared by found plugins that the resolution does not use, with the reason, for the
// config validator ("it belongs to plugin 'stage2', which this config does not use").
std::map<std::string, std::string> inactive_plugin_keys(const Resolution& resolution,
                                                        const std::vector<LoadedPlugin>& found);

}  // namespace zhost
