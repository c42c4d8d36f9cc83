// sdk/conformance/checks.hpp: how the kit's checks are written and recorded. A check is a named function
// that throws CheckFailed (or Skipped) to say what is wrong; everything the plugin does is reached through
// the C ABI only.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

#include "plugin_under_test.hpp"
#include "zhost/conformance/conformance.hpp"

namespace zhost::conformance {

struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct Skipped : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void expect(bool condition, const std::string& what) {
  if (!condition) throw CheckFailed(what);
}

struct CheckRun {
  const Options& options;
  const PluginUnderTest& plugin;
  Report& report;

  // Runs `body` as the check `name`, recording pass, failure or skip.
  void check(const std::string& name, const std::function<void()>& body) const;
  // A fresh host for one instance: the descriptor's config defaults plus the --set overrides.
  std::unique_ptr<KitHost> host() const;
};

// Negotiation, descriptor and lifecycle checks, for every kind.
void check_common(const CheckRun& run);
// Tier checks (ZHOST_KIND_OFFLOAD): storage, events, export/import, errors, and for computing tiers the
// optimizer against the reference.
void check_tier(const CheckRun& run);
// Partition checks (ZHOST_KIND_PARTITION): what can be driven without a process group.
void check_partition(const CheckRun& run);

}  // namespace zhost::conformance
