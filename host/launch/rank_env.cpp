// host/launch/rank_env.cpp: reads each launcher's variables into a RankEnv and checks them.
#include "host/launch/rank_env.hpp"

#include <unistd.h>

#include <charconv>
#include <climits>
#include <optional>
#include <vector>

#include "host/core/error.hpp"

extern char** environ;

namespace zhost::launch {

namespace {

// Reads one launcher's variables; every message names the launcher.
class EnvReader {
 public:
  EnvReader(const EnvMap& env, std::string launcher) : env_(env), launcher_(std::move(launcher)) {}

  bool has(const std::string& name) const { return env_.count(name) > 0; }

  std::optional<std::string> get(const std::string& name) const {
    auto it = env_.find(name);
    if (it == env_.end()) return std::nullopt;
    return it->second;
  }

  std::string require(const std::string& name, const std::string& hint = "") const {
    std::optional<std::string> value = get(name);
    if (!value || value->empty()) {
      fail_usage("started by {} but {} is not set{}", launcher_, name, hint.empty() ? "" : "; " + hint);
    }
    return *value;
  }

  int to_int(const std::string& name, const std::string& value) const {
    int result = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), result);
    if (error != std::errc() || end != value.data() + value.size()) {
      fail_usage("{}='{}' (from {}) is not an integer", name, value, launcher_);
    }
    return result;
  }

  int require_int(const std::string& name, const std::string& hint = "") const {
    return to_int(name, require(name, hint));
  }

  int int_or(const std::string& name, int fallback) const {
    std::optional<std::string> value = get(name);
    return value ? to_int(name, *value) : fallback;
  }

 private:
  const EnvMap& env_;
  std::string launcher_;
};

void check_consistent(const RankEnv& rank_env) {
  const std::string& from = rank_env.source;
  if (rank_env.world_size < 1) fail_usage("world size {} (from {}) must be at least 1", rank_env.world_size, from);
  if (rank_env.rank < 0 || rank_env.rank >= rank_env.world_size) {
    fail_usage("rank {} (from {}) is outside the world of {} ranks", rank_env.rank, from, rank_env.world_size);
  }
  if (rank_env.local_world_size < 1 || rank_env.local_world_size > rank_env.world_size) {
    fail_usage("{} ranks on this node (from {}) does not fit a world of {} ranks", rank_env.local_world_size, from,
               rank_env.world_size);
  }
  if (rank_env.local_rank < 0 || rank_env.local_rank >= rank_env.local_world_size) {
    fail_usage("local rank {} (from {}) is outside the {} ranks on this node", rank_env.local_rank, from,
               rank_env.local_world_size);
  }
  if (rank_env.master_addr.empty()) fail_usage("the master address (from {}) is empty", from);
  if (rank_env.world_size > 1 && (rank_env.master_port < 1 || rank_env.master_port > 65535)) {
    fail_usage("master port {} (from {}) is not a valid TCP port (1-65535)", rank_env.master_port, from);
  }
}

// zhost's launcher and torchrun use the same names. zhost's launcher sets every variable; torchrun-style
// environments may leave out the local ones.
// The zhost launcher always sets GROUP_RANK; torchrun does too (its node rank), plain RANK/WORLD_SIZE
// environments may not: the host name then.
RankEnv from_torch_style(const EnvReader& vars, const char* source, bool require_local, const std::string& host_name) {
  RankEnv rank_env;
  rank_env.source = source;
  rank_env.rank = vars.require_int("RANK");
  rank_env.world_size = vars.require_int("WORLD_SIZE");
  rank_env.local_rank = require_local ? vars.require_int("LOCAL_RANK") : vars.int_or("LOCAL_RANK", rank_env.rank);
  rank_env.local_world_size =
      require_local ? vars.require_int("LOCAL_WORLD_SIZE") : vars.int_or("LOCAL_WORLD_SIZE", rank_env.world_size);
  rank_env.local_world_size_given = require_local || vars.has("LOCAL_WORLD_SIZE");
  rank_env.master_addr = vars.require("MASTER_ADDR");
  rank_env.master_port = vars.require_int("MASTER_PORT");
  if (require_local || vars.has("GROUP_RANK")) {
    rank_env.node = std::to_string(vars.require_int("GROUP_RANK"));
  } else {
    rank_env.node = host_name;
  }
  return rank_env;
}

RankEnv from_openmpi(const EnvReader& vars, const std::string& host_name) {
  const std::string hint =
      "Open MPI does not provide the rendezvous address: export MASTER_ADDR=<rank 0's host> and MASTER_PORT=<free "
      "port> and pass them with mpirun -x MASTER_ADDR -x MASTER_PORT";
  RankEnv rank_env;
  rank_env.source = "openmpi";
  rank_env.rank = vars.require_int("OMPI_COMM_WORLD_RANK");
  rank_env.world_size = vars.require_int("OMPI_COMM_WORLD_SIZE");
  rank_env.local_rank = vars.require_int("OMPI_COMM_WORLD_LOCAL_RANK");
  rank_env.local_world_size = vars.require_int("OMPI_COMM_WORLD_LOCAL_SIZE");
  rank_env.local_world_size_from = "OMPI_COMM_WORLD_LOCAL_SIZE";
  rank_env.master_addr = vars.require("MASTER_ADDR", hint);
  rank_env.master_port = vars.require_int("MASTER_PORT", hint);
  rank_env.node = host_name;
  return rank_env;
}

// Slurm's compressed per-node task counts: "4(x2),2" means 4, 4, 2.
std::vector<int> expand_tasks_per_node(const EnvReader& vars, const std::string& name, const std::string& value) {
  std::vector<int> counts;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = std::min(value.find(',', start), value.size());
    const std::string item = value.substr(start, comma - start);
    const size_t paren = item.find("(x");
    const int count = vars.to_int(name, item.substr(0, paren));
    int repeat = 1;
    if (paren != std::string::npos) {
      if (item.back() != ')') fail_usage("{}='{}' (from Slurm) is malformed", name, value);
      repeat = vars.to_int(name, item.substr(paren + 2, item.size() - paren - 3));
    }
    counts.insert(counts.end(), static_cast<size_t>(std::max(repeat, 0)), count);
    start = comma + 1;
  }
  return counts;
}

// The tasks Slurm runs on this node, and the variable that said so.
int slurm_tasks_on_this_node(const EnvReader& vars, std::string& from) {
  for (const std::string name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (!vars.has(name)) continue;
    from = name;
    const std::vector<int> counts = expand_tasks_per_node(vars, name, *vars.get(name));
    const int node = vars.require_int("SLURM_NODEID");
    if (node < 0 || node >= static_cast<int>(counts.size())) {
      fail_usage("SLURM_NODEID={} has no entry in {}='{}'", node, name, *vars.get(name));
    }
    return counts[node];
  }
  from = "SLURM_NTASKS";
  if (vars.int_or("SLURM_NNODES", 1) == 1) return vars.require_int("SLURM_NTASKS");
  fail_usage("started by Slurm on several nodes but neither SLURM_STEP_TASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set");
}

RankEnv from_slurm(const EnvReader& vars) {
  RankEnv rank_env;
  rank_env.source = "slurm";
  rank_env.rank = vars.require_int("SLURM_PROCID");
  rank_env.world_size = vars.require_int("SLURM_NTASKS");
  rank_env.local_rank = vars.require_int("SLURM_LOCALID");
  rank_env.local_world_size = slurm_tasks_on_this_node(vars, rank_env.local_world_size_from);
  rank_env.node = std::to_string(vars.int_or("SLURM_NODEID", 0));
  if (vars.has("MASTER_ADDR")) {
    rank_env.master_addr = vars.require("MASTER_ADDR");
  } else {
    rank_env.master_addr =
        vars.require("SLURM_LAUNCH_NODE_IPADDR", "export MASTER_ADDR=<the first node's address> in the job script");
  }
  if (vars.has("MASTER_PORT")) {
    rank_env.master_port = vars.require_int("MASTER_PORT");
  } else {
    const int job_id = vars.require_int("SLURM_JOB_ID", "export MASTER_PORT=<free port> in the job script");
    rank_env.master_port = 20000 + job_id % 20000;
  }
  return rank_env;
}

}  // namespace

RankEnv detect_rank_env(const EnvMap& env, const std::string& host_name) {
  RankEnv rank_env;
  const auto zhost_launched = env.find("ZHOST_LAUNCHED");
  if (zhost_launched != env.end() && zhost_launched->second == "1") {
    rank_env = from_torch_style(EnvReader(env, "the zhost launcher"), "zhost", true, host_name);
  } else if (env.count("RANK") || env.count("WORLD_SIZE")) {
    rank_env = from_torch_style(EnvReader(env, "torchrun (RANK/WORLD_SIZE)"), "torchrun", false, host_name);
  } else if (env.count("OMPI_COMM_WORLD_RANK")) {
    rank_env = from_openmpi(EnvReader(env, "Open MPI"), host_name);
  } else if (env.count("SLURM_PROCID")) {
    rank_env = from_slurm(EnvReader(env, "Slurm"));
  } else {
    return rank_env;
  }
  check_consistent(rank_env);
  return rank_env;
}

RankEnv detect_rank_env(const EnvMap& env) {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) name[0] = '\0';
  return detect_rank_env(env, name[0] ? std::string(name) : std::string("localhost"));
}

std::string describe_source(const std::string& source) {
  if (source == "zhost") return "the zhost launcher";
  if (source == "slurm") return "Slurm";
  if (source == "openmpi") return "Open MPI";
  if (source == "single") return "no launcher";
  return source;  // torchrun
}

EnvMap current_env() {
  EnvMap env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text(*entry);
    const size_t equals = text.find('=');
    if (equals != std::string::npos) env.emplace(text.substr(0, equals), text.substr(equals + 1));
  }
  return env;
}

}  // namespace zhost::launch
