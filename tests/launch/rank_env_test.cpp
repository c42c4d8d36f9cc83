// tests/launch/rank_env_test.cpp: detect_rank_env() for zhost's launcher, torchrun, Slurm and Open MPI,
// and its errors for missing, malformed and inconsistent variables.
#include "host/launch/rank_env.hpp"

#include <gtest/gtest.h>

#include "host/core/error.hpp"

namespace zhost::launch {
namespace {

void expect_usage_error(const EnvMap& env, const std::string& expected_text) {
  try {
    const RankEnv rank_env = detect_rank_env(env);
    ADD_FAILURE() << "expected an error containing '" << expected_text << "', got source " << rank_env.source;
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(expected_text), std::string::npos) << e.what();
  }
}

const EnvMap kTorchrun{{"RANK", "5"},
                       {"WORLD_SIZE", "8"},
                       {"LOCAL_RANK", "1"},
                       {"LOCAL_WORLD_SIZE", "4"},
                       {"MASTER_ADDR", "node0"},
                       {"MASTER_PORT", "29400"},
                       {"TORCHELASTIC_RUN_ID", "x"}};

TEST(RankEnvTest, NoLauncherIsASingleRank) {
  const RankEnv rank_env = detect_rank_env({{"HOME", "/root"}});
  EXPECT_EQ(rank_env.source, "single");
  EXPECT_EQ(rank_env.rank, 0);
  EXPECT_EQ(rank_env.world_size, 1);
  EXPECT_EQ(rank_env.node, "0");
}

TEST(RankEnvTest, ZhostLauncher) {
  EnvMap env = kTorchrun;
  env["ZHOST_LAUNCHED"] = "1";
  env["GROUP_RANK"] = "1";
  env["SLURM_PROCID"] = "0";  // the zhost launcher inside a Slurm allocation: zhost wins
  const RankEnv rank_env = detect_rank_env(env);
  EXPECT_EQ(rank_env.source, "zhost");
  EXPECT_EQ(rank_env.rank, 5);
  EXPECT_EQ(rank_env.world_size, 8);
  EXPECT_EQ(rank_env.local_rank, 1);
  EXPECT_EQ(rank_env.local_world_size, 4);
  EXPECT_EQ(rank_env.master_addr, "node0");
  EXPECT_EQ(rank_env.master_port, 29400);
  EXPECT_EQ(rank_env.node, "1");  // the launcher's --node-rank, not the host name
}

TEST(RankEnvTest, ZhostLauncherNeedsEveryVariable) {
  EnvMap env = kTorchrun;
  env["ZHOST_LAUNCHED"] = "1";
  env["GROUP_RANK"] = "0";
  env.erase("LOCAL_WORLD_SIZE");
  expect_usage_error(env, "started by the zhost launcher but LOCAL_WORLD_SIZE is not set");
  env = kTorchrun;
  env["ZHOST_LAUNCHED"] = "1";
  expect_usage_error(env, "started by the zhost launcher but GROUP_RANK is not set");
  env["GROUP_RANK"] = "first";
  expect_usage_error(env, "GROUP_RANK='first'");
}

TEST(RankEnvTest, Torchrun) {
  const RankEnv rank_env = detect_rank_env(kTorchrun);
  EXPECT_EQ(rank_env.source, "torchrun");
  EXPECT_EQ(rank_env.rank, 5);
  EXPECT_EQ(rank_env.local_rank, 1);
  EXPECT_EQ(rank_env.local_world_size, 4);
  EXPECT_EQ(rank_env.master_port, 29400);
}

TEST(RankEnvTest, TorchStyleWithoutLocalVariablesIsOneNode) {
  const RankEnv rank_env =
      detect_rank_env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1234"}});
  EXPECT_EQ(rank_env.local_rank, 1);
  EXPECT_EQ(rank_env.local_world_size, 2);
  // A guess, not the launcher's word: the rendezvous must not hold the ranks to it (one process per host
  // with only RANK/WORLD_SIZE ran before the node check existed, and still does).
  EXPECT_FALSE(rank_env.local_world_size_given);
  EXPECT_TRUE(detect_rank_env(kTorchrun).local_world_size_given);
}

TEST(RankEnvTest, TorchrunErrors) {
  EnvMap env = kTorchrun;
  env.erase("WORLD_SIZE");
  expect_usage_error(env, "WORLD_SIZE is not set");
  env = kTorchrun;
  env["RANK"] = "8";
  expect_usage_error(env, "rank 8 (from torchrun) is outside the world of 8 ranks");
  env = kTorchrun;
  env["RANK"] = "two";
  expect_usage_error(env, "RANK='two'");
  env = kTorchrun;
  env["LOCAL_RANK"] = "4";
  expect_usage_error(env, "local rank 4 (from torchrun) is outside the 4 ranks on this node");
  env = kTorchrun;
  env["MASTER_PORT"] = "70000";
  expect_usage_error(env, "master port 70000");
  env = kTorchrun;
  env.erase("MASTER_ADDR");
  expect_usage_error(env, "MASTER_ADDR is not set");
}

const EnvMap kSlurm{{"SLURM_PROCID", "6"},      {"SLURM_NTASKS", "10"},
                    {"SLURM_LOCALID", "2"},     {"SLURM_NODEID", "1"},
                    {"SLURM_NNODES", "3"},      {"SLURM_TASKS_PER_NODE", "4(x2),2"},
                    {"SLURM_JOB_ID", "123456"}, {"SLURM_LAUNCH_NODE_IPADDR", "10.0.0.7"}};

TEST(RankEnvTest, Slurm) {
  const RankEnv rank_env = detect_rank_env(kSlurm);
  EXPECT_EQ(rank_env.source, "slurm");
  EXPECT_EQ(rank_env.rank, 6);
  EXPECT_EQ(rank_env.world_size, 10);
  EXPECT_EQ(rank_env.local_rank, 2);
  EXPECT_EQ(rank_env.local_world_size, 4);
  EXPECT_EQ(rank_env.master_addr, "10.0.0.7");
  EXPECT_EQ(rank_env.master_port, 20000 + 123456 % 20000);
}

TEST(RankEnvTest, SlurmPrefersTheStepAndExplicitMaster) {
  EnvMap env = kSlurm;
  env["SLURM_STEP_TASKS_PER_NODE"] = "3,5,2";
  env["MASTER_ADDR"] = "node-a";
  env["MASTER_PORT"] = "4000";
  env["SLURM_LOCALID"] = "4";
  const RankEnv rank_env = detect_rank_env(env);
  EXPECT_EQ(rank_env.local_world_size, 5);
  EXPECT_EQ(rank_env.master_addr, "node-a");
  EXPECT_EQ(rank_env.master_port, 4000);
}

TEST(RankEnvTest, SlurmErrors) {
  EnvMap env = kSlurm;
  env.erase("SLURM_LAUNCH_NODE_IPADDR");
  expect_usage_error(env, "SLURM_LAUNCH_NODE_IPADDR is not set; export MASTER_ADDR");
  env = kSlurm;
  env["SLURM_NODEID"] = "3";
  expect_usage_error(env, "SLURM_NODEID=3 has no entry in SLURM_TASKS_PER_NODE='4(x2),2'");
  env = kSlurm;
  env["SLURM_TASKS_PER_NODE"] = "4(x2";
  expect_usage_error(env, "SLURM_TASKS_PER_NODE");
}

const EnvMap kOpenMpi{{"OMPI_COMM_WORLD_RANK", "3"},
                      {"OMPI_COMM_WORLD_SIZE", "4"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                      {"MASTER_ADDR", "head"},
                      {"MASTER_PORT", "29500"},
                      {"SLURM_PROCID", "0"}};  // mpirun inside a Slurm job: Open MPI's variables win

TEST(RankEnvTest, OpenMpi) {
  const RankEnv rank_env = detect_rank_env(kOpenMpi);
  EXPECT_EQ(rank_env.source, "openmpi");
  EXPECT_EQ(rank_env.rank, 3);
  EXPECT_EQ(rank_env.world_size, 4);
  EXPECT_EQ(rank_env.local_rank, 1);
  EXPECT_EQ(rank_env.local_world_size, 2);
  EXPECT_EQ(rank_env.master_addr, "head");
}

TEST(RankEnvTest, OpenMpiWithoutMasterSaysHowToPassIt) {
  EnvMap env = kOpenMpi;
  env.erase("MASTER_ADDR");
  expect_usage_error(env, "started by Open MPI but MASTER_ADDR is not set; Open MPI does not provide");
  env = kOpenMpi;
  env.erase("MASTER_PORT");
  expect_usage_error(env, "mpirun -x MASTER_ADDR -x MASTER_PORT");
}

// The node identity by launcher: a node rank where the launcher gives one (nodes simulated on one machine
// share the host name), else the host name.
TEST(RankEnvTest, NodeIdentityOfEachLauncher) {
  EnvMap torchrun = kTorchrun;
  EXPECT_EQ(detect_rank_env(torchrun, "host-7").node, "host-7");  // no GROUP_RANK: the host name
  torchrun["GROUP_RANK"] = "3";
  EXPECT_EQ(detect_rank_env(torchrun, "host-7").node, "3");
  EXPECT_EQ(detect_rank_env(kSlurm, "host-7").node, "1");  // SLURM_NODEID
  EnvMap one_node_slurm{{"SLURM_PROCID", "1"},
                        {"SLURM_NTASKS", "2"},
                        {"SLURM_LOCALID", "1"},
                        {"SLURM_JOB_ID", "5"},
                        {"SLURM_LAUNCH_NODE_IPADDR", "10.0.0.7"}};
  EXPECT_EQ(detect_rank_env(one_node_slurm, "host-7").node, "0");
  EXPECT_EQ(detect_rank_env(kOpenMpi, "host-7").node, "host-7");
  EnvMap zhost = kTorchrun;
  zhost["ZHOST_LAUNCHED"] = "1";
  zhost["GROUP_RANK"] = "0";
  EXPECT_EQ(detect_rank_env(zhost, "host-7").node, "0");
  EXPECT_EQ(detect_rank_env({}, "host-7").node, "0");  // single
  // Without a host name given: this machine's, never empty.
  EXPECT_FALSE(detect_rank_env(kOpenMpi).node.empty());
  // Messages about the layout name the launcher in words.
  EXPECT_EQ(describe_source("zhost"), "the zhost launcher");
  EXPECT_EQ(describe_source(detect_rank_env(kSlurm).source), "Slurm");
  EXPECT_EQ(describe_source(detect_rank_env(kTorchrun).source), "torchrun");
}

}  // namespace
}  // namespace zhost::launch
