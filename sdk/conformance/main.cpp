// sdk/conformance/main.cpp: zhost-conformance PLUGIN.so [--set KEY=VALUE]... [--rtol R] [--verbose]
// Runs the conformance kit on one plugin and prints one line per check; exits 1 when a check fails, 2 when
// the file is no loadable zhost plugin or the arguments are wrong.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "zhost/conformance/conformance.hpp"

namespace {

int usage(const char* problem) {
  std::fprintf(stderr,
               "zhost-conformance: %s\nusage: zhost-conformance PLUGIN.so [--set KEY=VALUE]... [--rtol R] [--verbose]\n"
               "  --set KEY=VALUE  a config value for the plugin (else its descriptor's default)\n"
               "  --rtol R         optimizer results within R relative of the reference (default 0: bit for bit)\n",
               problem);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace zhost::conformance;
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--set" && i + 1 < argc) {
      const std::string kv = argv[++i];
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) return usage(("--set " + kv + ": write KEY=VALUE").c_str());
      options.config[kv.substr(0, eq)] = kv.substr(eq + 1);
    } else if (arg == "--rtol" && i + 1 < argc) {
      options.rtol = std::strtod(argv[++i], nullptr);
    } else if (arg == "--verbose") {
      options.verbose = true;
    } else if (!arg.empty() && arg[0] != '-' && options.plugin.empty()) {
      options.plugin = arg;
    } else {
      return usage(("unexpected argument '" + arg + "'").c_str());
    }
  }
  if (options.plugin.empty()) return usage("no plugin given");
  try {
    const Report report = run_checks(options);
    int passed = 0, skipped = 0;
    for (const auto& c : report.checks) {
      const char* tag = c.outcome == Outcome::kPass ? "PASS" : c.outcome == Outcome::kFail ? "FAIL" : "SKIP";
      std::printf("%s  %s%s%s\n", tag, c.name.c_str(), c.detail.empty() ? "" : ": ", c.detail.c_str());
      passed += c.outcome == Outcome::kPass;
      skipped += c.outcome == Outcome::kSkip;
    }
    for (const auto& line : report.not_covered) std::printf("NOT COVERED  %s\n", line.c_str());
    std::printf("%s: %d passed, %d failed, %d skipped\n", report.plugin_name.c_str(), passed, report.failed(), skipped);
    return report.failed() ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zhost-conformance: %s\n", e.what());
    return 2;
  }
}
