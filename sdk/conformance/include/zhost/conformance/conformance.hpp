// zhost/conformance/conformance.hpp: the SDK's conformance kit. It loads any tier or partition plugin
// (.so) and drives it through the C ABI only, with a minimal host of its own (no zhost host libraries),
// against reference behaviour: negotiation and descriptor, store/load round trips of odd sizes and
// alignments, drop, events (wait and test), export/import into a fresh instance, error statuses for bad
// calls, calls after failures, the key namespaces, and for computing tiers optimizer steps equal to the
// kit's scalar reference (AdamW, Adam, SGD, Lion), whole and by ranges, alone and over the kit's storage
// tier. What it cannot drive (a partition plugin's hooks need a process group) it lists as not covered.
// docs/abi.md "Conformance kit" says what each check means.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace zhost::conformance {

struct Options {
  std::string plugin;                         // path of the .so under test
  std::map<std::string, std::string> config;  // config overrides, TOML literals by key (else the defaults)
  double rtol = 0;       // optimizer results: 0 = bit for bit (the reference's operation order, no FMA)
  bool verbose = false;  // show the plugin's log lines
};

enum class Outcome { kPass, kFail, kSkip };

struct CheckResult {
  std::string name;
  Outcome outcome;
  std::string detail;  // why it failed or was skipped
};

struct Report {
  std::string plugin_name;
  std::vector<CheckResult> checks;
  std::vector<std::string> not_covered;  // what the kit does not drive for this plugin, and why
  int failed() const;
};

// Runs every check that applies to the plugin's kind. Never throws for the plugin's faults (they are
// failed checks); throws std::runtime_error when the file cannot be loaded as a zhost plugin at all.
Report run_checks(const Options& options);

}  // namespace zhost::conformance
