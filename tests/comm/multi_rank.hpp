// tests/comm/multi_rank.hpp: runs a named scenario on N ranks: the test binary re-executes itself once per
// rank through zhost's launcher, with "--comm-scenario NAME"; main() (multi_rank.cpp) runs that scenario on
// a Comm built from the rank's environment instead of the tests.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "host/comm/comm.hpp"
#include "host/launch/launcher.hpp"

namespace zhost::comm::testing {

struct RankContext {
  Comm& comm;
  int rank;
  int world_size;
};

using Scenario = std::function<void(RankContext&)>;

// Registers a scenario at static-initialization time: `const bool registered = register_scenario(...)`.
bool register_scenario(const std::string& name, Scenario scenario);

struct RankLine {
  int rank;
  launch::OutputStream stream;
  std::string text;
};

struct ScenarioRun {
  launch::LaunchResult result;
  std::vector<RankLine> lines;
  double seconds = 0;

  // The rank's output lines joined with newlines.
  std::string output_of(int rank) const;
  // Everything, "[rank N] line" per line, for failure messages.
  std::string all_output() const;
};

struct ScenarioOptions {
  double comm_timeout_s = 10;
  double launch_timeout_s = 20;
  double grace_period_s = 2;
  // Simulated nodes: node[r] is rank r's Rendezvous::node (empty: the launcher's, one node), and
  // local_world_size[r] its Rendezvous::local_world_size (empty: how many ranks share its node string).
  std::vector<std::string> nodes;
  std::vector<int> local_world_sizes;
};

ScenarioRun run_scenario(const std::string& name, int world_size, const ScenarioOptions& options = {});

// A failed check inside a scenario: the rank prints it and exits with code 1.
[[noreturn]] void check_failed(const std::string& what);
#define SCENARIO_CHECK(cond, ...)                                                              \
  do {                                                                                         \
    if (!(cond))                                                                               \
      ::zhost::comm::testing::check_failed(                                                    \
          fmt::format("{} ({}:{}): {}", #cond, __FILE__, __LINE__, fmt::format(__VA_ARGS__))); \
  } while (0)

}  // namespace zhost::comm::testing
