// tests/training/multi_node_test.cpp: two `zhost run` launchers on loopback as two nodes (--nnodes 2,
// --node-rank 0 and 1, 2 ranks each: the 2x2 layout) train stage 0 and stage 3; every rank's inter-node
// bytes per step (metrics.jsonl for rank 0, steps.rankN.jsonl for all four) equal what host/comm/traffic.hpp's
// Note [Inter-node traffic] gives for the step's collectives, derived here from the model's parameter count
// and the shard padding. Ranks told the wrong number of ranks on their node stop at once, saying so.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/scratch_dir.hpp"
#include "tests/training/training_test_support.hpp"
#include "zhost/kit/grad_numerics.hpp"

using namespace zhost::testing;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kNodes = 2, kRanksPerNode = 2, kWorld = kNodes * kRanksPerNode;

// One rank's bytes in a step, total and across nodes, both directions alike (every collective below is
// symmetric): the per-rank definition of host/comm/traffic.hpp, Note [Inter-node traffic], for a rank with
// w - 1 peers of which `remote` are on the other node.
struct Bytes {
  uint64_t total = 0, inter_node = 0;
};
constexpr uint64_t kPeers = kWorld - 1, kRemotePeers = kRanksPerNode;  // 2x2: every rank has 2 remote peers

// all_gather or reduce_scatter of equal chunks of `chunk` bytes: one chunk to (or from) each peer.
Bytes equal_chunks(uint64_t chunk) { return {kPeers * chunk, kRemotePeers * chunk}; }
// all_reduce of `n` bytes: 2n/w with each peer each way, floored.
Bytes all_reduce(uint64_t n) { return {2 * n * kPeers / kWorld, 2 * n * kRemotePeers / kWorld}; }
Bytes operator+(Bytes a, Bytes b) { return {a.total + b.total, a.inter_node + b.inter_node}; }

// The step prologue of every ZeRO stage (sdk/zero/src/step_prologue.cpp): the largest gradient
// magnitude (one fp32, MAX) and the exact sum of squares (kSquareSumLimbs int64 limbs, SUM).
Bytes step_prologue() { return all_reduce(sizeof(float)) + all_reduce(zhost::kit::kSquareSumLimbs * sizeof(int64_t)); }

// Every rank's figures of every step, and rank 0's in metrics.jsonl, against `expected`.
void expect_step_bytes(const TwoNodeRun& run, const Bytes& expected, int steps) {
  ASSERT_EQ(run.node0.metrics.size(), static_cast<size_t>(steps));
  for (const auto& m : run.node0.metrics) {
    EXPECT_EQ(m.at("comm_bytes_sent"), expected.total) << "step " << m.at("step");
    EXPECT_EQ(m.at("comm_bytes_received"), expected.total) << "step " << m.at("step");
    EXPECT_EQ(m.at("comm_inter_node_bytes_sent"), expected.inter_node) << "step " << m.at("step");
    EXPECT_EQ(m.at("comm_inter_node_bytes_received"), expected.inter_node) << "step " << m.at("step");
  }
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_EQ(run.rank_steps[rank].size(), static_cast<size_t>(steps)) << "rank " << rank;
    for (const nlohmann::json& record : run.rank_steps[rank]) {
      const std::string where = "rank " + std::to_string(rank) + " step " + record.at("step").dump();
      EXPECT_EQ(record.at("comm_bytes_sent").get<uint64_t>(), expected.total) << where;
      EXPECT_EQ(record.at("comm_bytes_received").get<uint64_t>(), expected.total) << where;
      EXPECT_EQ(record.at("comm_inter_node_bytes_sent").get<uint64_t>(), expected.inter_node) << where;
      EXPECT_EQ(record.at("comm_inter_node_bytes_received").get<uint64_t>(), expected.inter_node) << where;
    }
  }
}

constexpr int kSteps = 2;
const std::string kJob = " --set steps=" + std::to_string(kSteps) + " --set train_micro_batch_size_per_gpu=1";

// Stage 0 (fp32): the flat gradients, Ψ elements padded to w splits of S = ceil(Ψ/w), are reduce-scattered
// piece by piece (each rank's split is S elements in all, however the pieces cut it: 3S sent, 2S of them
// to the other node's two splits), the prologue runs, and the splits are all-gathered.
TEST(MultiNode, Stage0InterNodeBytesFollowTheLayout) {
  ScratchDir dir;
  const TwoNodeRun run = run_on_two_nodes(dir, "stage0", kJob + " --set zero.stage=0");
  ASSERT_EQ(run.node0.exit_code, 0) << run.node0.err;
  ASSERT_EQ(run.node1_exit_code, 0) << run.node1_err;
  const uint64_t psi = read_model_states(run.node0).at("num_params").get<uint64_t>();
  const uint64_t split = (psi + kWorld - 1) / kWorld * sizeof(float);
  expect_step_bytes(run, equal_chunks(split) + step_prologue() + equal_chunks(split), kSteps);
}

// Stage 3 (fp32) with every parameter in the persistent unit (Ψ elements padded to w shards of S =
// ceil(Ψ/w)): per step its gradients are reduce-scattered, the block order is compared (one int64 from each
// rank), the prologue runs and the updated shards are all-gathered; each of the two unit collectives is
// preceded by the ranks' agreement on it (two int64 from each rank, experimental.stage3_rank_agreement).
TEST(MultiNode, Stage3InterNodeBytesFollowTheLayout) {
  ScratchDir dir;
  const TwoNodeRun run = run_on_two_nodes(
      dir, "stage3", kJob + " --set zero.stage=3 --set zero.stage3_param_persistence_threshold=1000000000");
  ASSERT_EQ(run.node0.exit_code, 0) << run.node0.err;
  ASSERT_EQ(run.node1_exit_code, 0) << run.node1_err;
  const uint64_t psi = read_model_states(run.node0).at("num_params").get<uint64_t>();
  const uint64_t shard = (psi + kWorld - 1) / kWorld * sizeof(float);
  const Bytes agreement = equal_chunks(2 * sizeof(int64_t));
  const Bytes reduce = agreement + equal_chunks(shard);
  const Bytes block_order = equal_chunks(sizeof(int64_t));
  const Bytes gather = agreement + equal_chunks(shard);
  expect_step_bytes(run, reduce + block_order + step_prologue() + gather, kSteps);
  EXPECT_NE(run.node0.err.find(" parameters in 1 fetch units"), std::string::npos) << run.node0.err;
}

// Stage 3 with a unit per block, gathered and released per block: every collective has equal chunks (padded
// shards, ids, limbs) and an even byte count, and every rank has 2 of its 3 peers on the other node, so each
// rank's inter-node bytes are exactly 2/3 of its bytes, in every step and both directions.
TEST(MultiNode, Stage3BlockUnitsSendTwoThirdsAcrossNodes) {
  ScratchDir dir;
  const TwoNodeRun run =
      run_on_two_nodes(dir, "blocks",
                       kJob +
                           " --set zero.stage=3 --set zero.stage3_param_persistence_threshold=40"
                           " --set zero.stage3_prefetch_bucket_size=20000 --set zero.stage3_max_reuse_distance=0");
  ASSERT_EQ(run.node0.exit_code, 0) << run.node0.err;
  ASSERT_EQ(run.node1_exit_code, 0) << run.node1_err;
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_EQ(run.rank_steps[rank].size(), static_cast<size_t>(kSteps)) << "rank " << rank;
    for (const nlohmann::json& record : run.rank_steps[rank]) {
      const std::string where = "rank " + std::to_string(rank) + " step " + record.at("step").dump();
      const auto sent = record.at("comm_bytes_sent").get<uint64_t>();
      const auto received = record.at("comm_bytes_received").get<uint64_t>();
      const uint64_t psi = read_model_states(run.node0).at("num_params").get<uint64_t>();
      EXPECT_GT(sent, 3 * psi * sizeof(float) * kPeers / kWorld / 2) << where << ": the units' gathers are missing";
      EXPECT_EQ(3 * record.at("comm_inter_node_bytes_sent").get<uint64_t>(), 2 * sent) << where;
      EXPECT_EQ(3 * record.at("comm_inter_node_bytes_received").get<uint64_t>(), 2 * received) << where;
    }
  }
}

// Three ranks on one node (same node identity) whose launcher says 2 run there: each stops at the rendezvous
// within seconds, naming both figures, the launcher and the variable it read, with a usage error.
void expect_wrong_local_world_size_refused(const std::function<std::vector<std::string>(int rank, int port)>& env,
                                           const std::string& expected) {
  ScratchDir dir;
  const fs::path config = dir.path() / "job.toml";
  std::ofstream(config) << small_job_config();
  const int port = unused_port();
  const auto started = Clock::now();
  std::vector<pid_t> ranks;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string r = std::to_string(rank);
    ranks.push_back(spawn_logged({ZHOST_EXE, "run", config.string(), "--set",
                                  "run.dir=" + (dir.path() / "runs").string(), "--set", "comm.timeout_s=30"},
                                 dir.path() / ("rank" + r + ".out"), dir.path() / ("rank" + r + ".err"),
                                 env(rank, port)));
  }
  for (int rank = 0; rank < 3; ++rank) {
    const int exit_code = wait_for_exit_code(ranks[rank], 60);
    const std::string err = read_text_file(dir.path() / ("rank" + std::to_string(rank) + ".err"));
    EXPECT_EQ(exit_code, 2) << err;
    EXPECT_NE(err.find("zhost: error: the ranks do not agree on the nodes: " + expected), std::string::npos) << err;
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - started).count(), 25) << "well within comm.timeout_s";
}

TEST(MultiNode, WrongLocalWorldSizeIsAClearErrorNotAHang) {
  expect_wrong_local_world_size_refused(
      [](int rank, int port) {
        return std::vector<std::string>{"RANK=" + std::to_string(rank),
                                        "WORLD_SIZE=3",
                                        "LOCAL_RANK=" + std::to_string(rank % 2),
                                        "LOCAL_WORLD_SIZE=2",
                                        "GROUP_RANK=0",
                                        "MASTER_ADDR=127.0.0.1",
                                        "MASTER_PORT=" + std::to_string(port)};
      },
      "torchrun told rank 0 that 2 ranks run on its node (LOCAL_WORLD_SIZE), but 3 ranks (0, 1, 2) name its node "
      "'0'");
}

// The same under Slurm, whose tasks per node come from SLURM_STEP_TASKS_PER_NODE ("2,1": 2 on node 0).
TEST(MultiNode, WrongSlurmTasksPerNodeNamesSlurmsVariable) {
  expect_wrong_local_world_size_refused(
      [](int rank, int port) {
        return std::vector<std::string>{"SLURM_PROCID=" + std::to_string(rank),
                                        "SLURM_NTASKS=3",
                                        "SLURM_LOCALID=" + std::to_string(rank % 2),
                                        "SLURM_NODEID=0",
                                        "SLURM_NNODES=2",
                                        "SLURM_STEP_TASKS_PER_NODE=2,1",
                                        "MASTER_ADDR=127.0.0.1",
                                        "MASTER_PORT=" + std::to_string(port)};
      },
      "Slurm told rank 0 that 2 ranks run on its node (SLURM_STEP_TASKS_PER_NODE), but 3 ranks (0, 1, 2) name its "
      "node '0'; give the ranks of a node the same node identity (--node-rank, GROUP_RANK, SLURM_NODEID, else the "
      "host name) and their number as SLURM_STEP_TASKS_PER_NODE");
}

}  // namespace
