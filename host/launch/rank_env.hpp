// host/launch/rank_env.hpp: where this process sits in the job, read from the environment that the zhost
// launcher, torchrun, Slurm (srun) or Open MPI (mpirun) set up. A pure function over an env map, so that
// every launcher's variables can be tested without launching anything.
#pragma once

#include <map>
#include <string>

namespace zhost::launch {

using EnvMap = std::map<std::string, std::string>;

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  // False where the launcher did not say how many ranks run on this node (a plain RANK/WORLD_SIZE
  // environment): local_world_size is then a guess, and the rendezvous does not check it.
  bool local_world_size_given = true;
  // The variable local_world_size was read from, for messages: LOCAL_WORLD_SIZE (zhost's launcher, torchrun),
  // OMPI_COMM_WORLD_LOCAL_SIZE, SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE or SLURM_NTASKS.
  std::string local_world_size_from = "LOCAL_WORLD_SIZE";
  std::string master_addr = "127.0.0.1";
  int master_port = 0;            // 0 only for "single": one rank needs no rendezvous port
  std::string source = "single";  // "zhost" | "torchrun" | "slurm" | "openmpi" | "single"
  // Which node this rank runs on: ranks with the same string share a node (comm::Rendezvous::node). It comes
  // from the launcher, never from the device count, and is a node rank where the launcher gives one, so
  // that nodes simulated on one machine (network namespaces share the host name) stay apart.
  std::string node = "0";
};

// The first launcher that matches wins, in this order:
//  zhost     ZHOST_LAUNCHED=1: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
//            node: GROUP_RANK (the launcher's --node-rank)
//  torchrun  RANK or WORLD_SIZE set: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; LOCAL_RANK and
//            LOCAL_WORLD_SIZE default to RANK and WORLD_SIZE (one node) when absent; node: GROUP_RANK
//            (torchrun's node rank) when set, else the host name
//  openmpi   OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}, plus MASTER_ADDR and MASTER_PORT, which
//            Open MPI does not provide (export them with mpirun -x); node: the host name (Open MPI exports
//            no node index: OMPI_COMM_WORLD_NODE_RANK is the rank among the node's processes)
//  slurm     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; tasks on this node from SLURM_STEP_TASKS_PER_NODE
//            or SLURM_TASKS_PER_NODE (e.g. "4(x2),2") at SLURM_NODEID; master address from MASTER_ADDR,
//            else SLURM_LAUNCH_NODE_IPADDR; port from MASTER_PORT, else 20000 + SLURM_JOB_ID % 20000;
//            node: SLURM_NODEID (0 when absent, on one node)
//  single    none of the above: rank 0 of 1, node "0"
// Missing, malformed or inconsistent variables throw UsageError naming the variable and the launcher.
// `host_name` stands for this machine's name where a launcher's node is the host name.
RankEnv detect_rank_env(const EnvMap& env, const std::string& host_name);
// The same with this machine's host name (gethostname).
RankEnv detect_rank_env(const EnvMap& env);

// RankEnv::source in words, for messages: "the zhost launcher", "torchrun", "Slurm", "Open MPI", "no launcher".
std::string describe_source(const std::string& source);

// This process's environment.
EnvMap current_env();

}  // namespace zhost::launch
