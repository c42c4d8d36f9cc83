// tests/comm/multi_rank.cpp: the multi-rank harness of tests/comm and the test binary's main(): as a rank
// ("--comm-scenario NAME") it builds a Comm from its environment and runs the scenario; otherwise it runs
// the GoogleTest suites.
#include "tests/comm/multi_rank.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>

#include "host/core/error.hpp"
#include "host/launch/rank_env.hpp"

namespace zhost::comm::testing {

namespace {

std::map<std::string, Scenario>& scenarios() {
  static std::map<std::string, Scenario> registry;
  return registry;
}

constexpr const char* kScenarioFlag = "--comm-scenario";
constexpr const char* kTimeoutVariable = "ZHOST_TEST_COMM_TIMEOUT_S";
constexpr const char* kNodesVariable = "ZHOST_TEST_COMM_NODES";                        // "a,a,b,b"
constexpr const char* kLocalWorldSizesVariable = "ZHOST_TEST_COMM_LOCAL_WORLD_SIZES";  // "2,2,2,2"

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  for (size_t comma; (comma = text.find(',', start)) != std::string::npos; start = comma + 1)
    items.push_back(text.substr(start, comma - start));
  items.push_back(text.substr(start));
  return items;
}

// The rendezvous from the rank's environment, with the simulated node layout of ScenarioOptions if any.
Rendezvous rendezvous_of(const launch::RankEnv& env) {
  Rendezvous rendezvous{env.rank, env.world_size, env.master_addr, env.master_port, 20.0};
  rendezvous.node = env.node;
  rendezvous.local_world_size = env.local_world_size;
  rendezvous.launcher = launch::describe_source(env.source);
  if (const char* nodes = std::getenv(kNodesVariable)) {
    const std::vector<std::string> node_of = split_commas(nodes);
    rendezvous.node = node_of.at(env.rank);
    rendezvous.local_world_size = static_cast<int>(std::count(node_of.begin(), node_of.end(), rendezvous.node));
    rendezvous.launcher = "the test's simulated layout";
  }
  if (const char* sizes = std::getenv(kLocalWorldSizesVariable))
    rendezvous.local_world_size = std::stoi(split_commas(sizes).at(env.rank));
  return rendezvous;
}

// One rank of a scenario; the exit code tells the test how it went.
int run_rank(const std::string& name) {
  std::unique_ptr<Comm> comm;  // outlives the error message, so the message comes out at once
  try {
    auto scenario = scenarios().find(name);
    if (scenario == scenarios().end()) throw std::runtime_error("no scenario named " + name);
    const launch::RankEnv env = launch::detect_rank_env(launch::current_env());
    CommOptions options;
    options.backend = Backend::kGloo;
    const char* timeout = std::getenv(kTimeoutVariable);
    options.timeout_s = timeout ? std::stod(timeout) : 10.0;
    comm = Comm::create(rendezvous_of(env), options);
    RankContext context{*comm, env.rank, env.world_size};
    scenario->second(context);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "zhost: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scenario %s failed: %s\n", name.c_str(), e.what());
    return 1;
  }
}

}  // namespace

bool register_scenario(const std::string& name, Scenario scenario) {
  return scenarios().emplace(name, std::move(scenario)).second;
}

void check_failed(const std::string& what) { throw std::runtime_error("check failed: " + what); }

std::string ScenarioRun::output_of(int rank) const {
  std::string text;
  for (const RankLine& line : lines) {
    if (line.rank == rank) text += line.text + "\n";
  }
  return text;
}

std::string ScenarioRun::all_output() const {
  std::string text = result.error.empty() ? "" : "launcher: " + result.error + "\n";
  for (const RankLine& line : lines) text += fmt::format("[rank {}] {}\n", line.rank, line.text);
  return text;
}

ScenarioRun run_scenario(const std::string& name, int world_size, const ScenarioOptions& options) {
  ScenarioRun run;
  launch::LaunchOptions launch;
  launch.nproc = world_size;
  launch.args = std::vector<std::string>{kScenarioFlag, name};
  launch.env = {{kTimeoutVariable, std::to_string(options.comm_timeout_s)}};
  if (!options.nodes.empty()) launch.env.emplace_back(kNodesVariable, fmt::format("{}", fmt::join(options.nodes, ",")));
  if (!options.local_world_sizes.empty())
    launch.env.emplace_back(kLocalWorldSizesVariable, fmt::format("{}", fmt::join(options.local_world_sizes, ",")));
  launch.timeout_s = options.launch_timeout_s;
  launch.grace_period_s = options.grace_period_s;
  launch.on_output = [&run](int rank, launch::OutputStream stream, std::string_view line) {
    run.lines.push_back({rank, stream, std::string(line)});
  };
  const auto started = std::chrono::steady_clock::now();
  run.result = launch::run_local_ranks(launch);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return run;
}

}  // namespace zhost::comm::testing

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == zhost::comm::testing::kScenarioFlag) return zhost::comm::testing::run_rank(argv[i + 1]);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
