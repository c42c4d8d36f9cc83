// sdk/conformance/conformance.cpp: the kit's runner: loads the plugin, runs the checks of its kind, and
// records each outcome (see zhost/conformance/conformance.hpp).
#include "zhost/conformance/conformance.hpp"

#include <exception>

#include "checks.hpp"

namespace zhost::conformance {

int Report::failed() const {
  int n = 0;
  for (const auto& c : checks) n += c.outcome == Outcome::kFail;
  return n;
}

void CheckRun::check(const std::string& name, const std::function<void()>& body) const {
  try {
    body();
    report.checks.push_back({name, Outcome::kPass, ""});
  } catch (const Skipped& e) {
    report.checks.push_back({name, Outcome::kSkip, e.what()});
  } catch (const std::exception& e) {
    report.checks.push_back({name, Outcome::kFail, e.what()});
  }
}

std::unique_ptr<KitHost> CheckRun::host() const {
  return std::make_unique<KitHost>(&plugin.descriptor(), options.config, options.verbose);
}

Report run_checks(const Options& options) {
  PluginUnderTest plugin(options.plugin);
  Report report;
  report.plugin_name = plugin.descriptor().name ? plugin.descriptor().name : "(unnamed)";
  const CheckRun run{options, plugin, report};
  check_common(run);
  switch (plugin.descriptor().kind) {
    case ZHOST_KIND_OFFLOAD:
      check_tier(run);
      break;
    case ZHOST_KIND_PARTITION:
      check_partition(run);
      break;
    case ZHOST_KIND_COLLECTIVE:
      report.not_covered.push_back("collective transforms: only negotiation, descriptor and lifecycle are checked");
      break;
  }
  return report;
}

}  // namespace zhost::conformance
