// tests/zero/stage3_training_test.cpp: the ZeRO stage 3 plugin, loaded by the real zhost executable from
// its shared object, on 1 to 4 ranks (processes over Gloo).
//
// Equality with stage 0 (fp32, 20 steps, clipping acting, activation checkpointing, gradient
// accumulation). Stage 3 reduce-scatters each block's gradients every micro-batch and steps fp32 shards;
// every reduction sums the ranks in rank order (Note [One summation order]), the norm is exact and the
// optimizer's arithmetic is stage 0's, so without accumulation the weights are bit for bit stage 0's on any
// number of ranks. With accumulation stage 3 sums reduced micro-batches, the order stage 0 takes under
// debug.reduce_each_micro_batch: bit for bit with that (stage 0 reducing once per step differs by rounding;
// zero_training_test.cpp bounds it for stage 2, which sums in stage 3's order).
// bf16 (llama, 2 ranks): bit for bit with bf16 stage 0 as well.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/support/scratch_dir.hpp"
#include "tests/training/training_test_support.hpp"

using namespace zhost::testing;

namespace {

// Small units: parameters of at most 40 elements persist (the gpt's norms and biases of width 32), the
// rest are gathered per block (8-14k elements each), prefetched a unit ahead, and released right after use.
const char* kStage3 =
    " --set zero.stage=3 --set zero.stage3_param_persistence_threshold=40 --set zero.stage3_prefetch_bucket_size=20000"
    " --set zero.stage3_max_reuse_distance=0";

std::string job(const std::string& model, int steps, int ranks, int micro_batch, int accumulation) {
  return " --set model.type=" + model + " --set steps=" + std::to_string(steps) +
         " --set train_micro_batch_size_per_gpu=" + std::to_string(micro_batch) +
         " --set gradient_accumulation_steps=" + std::to_string(accumulation) +
         (ranks > 1 ? " --nproc " + std::to_string(ranks) : "");
}

RunOutput train(const ScratchDir& dir, const std::string& name, const std::string& args) {
  RunOutput r = run_zhost(dir.path(), small_job_config(), name, args);
  EXPECT_EQ(r.exit_code, 0) << name << ":\n" << r.err << r.out;
  return r;
}

struct Case {
  const char* name;
  const char* model;
  int ranks, micro_batch, accumulation;
  const char* extra;
  bool checkpointed;  // also with activation checkpointing (recomputation gathers what forward released)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class Stage3EqualsStageZero : public ::testing::TestWithParam<Case> {};

INSTANTIATE_TEST_SUITE_P(Cases, Stage3EqualsStageZero,
                         ::testing::Values(Case{"GptOneRankAccumulating", "gpt", 1, 2, 2, "", false},
                                           Case{"GptTwoRanksOverlapping", "gpt", 2, 2, 1,
                                                " --set zero.overlap_comm=true", true},
                                           Case{"LlamaThreeRanks", "llama", 3, 2, 1, "", false},
                                           Case{"LlamaTwoRanksAccumulating", "llama", 2, 1, 2, "", false},
                                           Case{"GptThreeRanksAccumulatingOverlapping", "gpt", 3, 1, 2,
                                                " --set zero.overlap_comm=true", true}),
                         [](const ::testing::TestParamInfo<Case>& c) { return std::string(c.param.name); });

TEST_P(Stage3EqualsStageZero, Fp32WeightsAfterTwentySteps) {
  const Case& c = GetParam();
  ScratchDir dir;
  const std::string args = job(c.model, 20, c.ranks, c.micro_batch, c.accumulation);
  const std::string order = c.accumulation > 1 ? " --set debug.reduce_each_micro_batch=true" : "";
  RunOutput base = train(dir, "stage0", args + " --set zero.stage=0" + order);
  RunOutput three = train(dir, "stage3", args + kStage3 + c.extra);
  ASSERT_EQ(base.losses.size(), 20u);
  expect_clipping_acted(base);
  EXPECT_EQ(weights_mismatch(three, base, 0, 0), "") << "bit for bit";
  EXPECT_EQ(three.losses, base.losses);
  if (c.checkpointed) {
    RunOutput recomputed =
        train(dir, "stage3ck", args + kStage3 + c.extra + " --set activation_checkpointing.enabled=true");
    EXPECT_EQ(weights_mismatch(recomputed, base, 0, 0), "") << "bit for bit, checkpointed";
    EXPECT_EQ(recomputed.losses, base.losses);
  }
}

// Every way of scheduling gathers and reductions gives the same bits on 2 ranks: no prefetch, prefetch of
// everything with units kept for reuse (DeepSpeed's defaults), a bound on live parameters, a small
// reduction budget (with zero.reduce_scatter = false, which changes nothing here), every parameter persistent, and one
// optimizer sub-group per unit.
TEST(Stage3Variants, GptOnTwoRanksIsBitwiseStageZeroWhateverTheSchedule) {
  ScratchDir dir;
  const std::string args = job("gpt", 8, 2, 2, 1);
  RunOutput base = train(dir, "stage0", args + " --set zero.stage=0");
  const std::vector<std::pair<std::string, std::string>> variants = {
      {"noprefetch", " --set zero.stage3_prefetch_bucket_size=0"},
      // kStage3 overrides DeepSpeed's prefetch and reuse defaults: set them back
      {"defaults", " --set zero.stage3_prefetch_bucket_size=50000000 --set zero.stage3_max_reuse_distance=1000000000"},
      {"maxlive", " --set zero.stage3_max_live_parameters=5000"},
      {"allreduce", " --set zero.reduce_scatter=false --set zero.reduce_bucket_size=1"},
      {"persistent", " --set zero.stage3_param_persistence_threshold=100000"},
      {"subgroups", " --set zero.sub_group_size=1000"},
  };
  for (const auto& [name, extra] : variants) {
    RunOutput r = train(dir, name, args + kStage3 + extra);
    EXPECT_EQ(weights_mismatch(r, base, 0, 0), "") << name;
  }
}

TEST(Stage3Variants, Bf16IsBitwiseStageZero) {
  ScratchDir dir;
  const std::string args = job("llama", 20, 2, 2, 1) + " --set bf16.enabled=true";
  RunOutput base = train(dir, "stage0", args + " --set zero.stage=0");
  RunOutput three = train(dir, "stage3", args + kStage3);
  EXPECT_EQ(weights_mismatch(three, base, 0, 0), "");
  EXPECT_EQ(three.losses, base.losses);
}

// Model-state bytes per rank are ZeRO's 16Ψ/N (bf16: 2 + 2 + 12 bytes per parameter; fp32: the fp32 shard is
// the master, 4 + 4 + 8), and the gather window on top stays within what the keys allow.
TEST(Stage3Memory, ModelStatesAreSixteenPsiOverNPlusTheGatherWindow) {
  ScratchDir dir;
  for (const char* precision : {"bf16", "fp32"}) {
    for (int ranks : {2, 3}) {
      const std::string name = std::string(precision) + std::to_string(ranks);
      RunOutput r = train(dir, name,
                          job("llama", 2, ranks, 1, 1) + kStage3 +
                              " --set zero.stage3_param_persistence_threshold=0 --set model.layers=6" +
                              (std::string(precision) == "bf16" ? " --set bf16.enabled=true" : ""));
      const nlohmann::json states = read_model_states(r);
      const double psi = states.at("num_params").get<double>();
      const double measured = states.at("measured").at("total").get<double>();
      EXPECT_EQ(states.at("formula_text"), "16Ψ/N") << name;
      EXPECT_NEAR(measured / (16 * psi / ranks), 1.0, 0.05) << name;
      // With no reuse and a prefetch budget of 20000 elements, at most the units of one block plus those
      // prefetched are gathered at once (6 layers of 13k elements, embedding and head 8k): under half the model.
      const double window = states.at("gather_window").get<double>();
      EXPECT_GT(window, 0) << name;
      EXPECT_LT(window, 0.5 * psi * (std::string(precision) == "bf16" ? 2 : 4)) << name;
    }
  }
}

// Note [Sums written in place] at stage 3: the sub-groups' gradients are zeros after every step, so a step's
// first sums of a unit are received straight into this rank's gradient shard. With every parameter persistent
// there is one unit, and the reduction holds its staging alone (4 bytes per padded element, fp32) at every
// step; a receive buffer would add the shard (padded / N elements: half as much again at 2 ranks).
TEST(Stage3Memory, FirstSumsOfAStepAreReceivedInPlace) {
  ScratchDir dir;
  const int ranks = 2;
  RunOutput r =
      train(dir, "one-unit",
            job("llama", 3, ranks, 1, 1) + kStage3 + " --set zero.stage3_param_persistence_threshold=100000000");
  const std::string log = r.out + r.err;
  const std::string marker = "largest unit ";
  const size_t at = log.find(marker);
  ASSERT_NE(at, std::string::npos) << log;
  ASSERT_NE(log.find("in 1 fetch units"), std::string::npos) << log;
  const double padded = std::stod(log.substr(at + marker.size()));
  std::ifstream metrics(r.run_dir / "metrics.jsonl");
  int steps = 0;
  for (std::string line; std::getline(metrics, line); ++steps)
    EXPECT_EQ(nlohmann::json::parse(line)["memory"]["buffers"].get<double>(), 4 * padded) << line;
  EXPECT_EQ(steps, 3);
}

// Note [Memory categories]: a step's gather_window is the most parameter storage materialised at once in that
// step, not what is left at its end (units are released as soon as used: little or nothing). The run's peak
// (model_states.json) is then the largest step's, and every step from the first holds at least one whole unit.
TEST(Stage3Memory, EachStepReportsTheMostGatheredAtOnce) {
  ScratchDir dir;
  RunOutput r =
      train(dir, "window", job("llama", 3, 2, 1, 1) + kStage3 + " --set zero.stage3_param_persistence_threshold=0");
  const double run_peak = read_model_states(r).at("gather_window").get<double>();
  ASSERT_GT(run_peak, 0);
  std::ifstream metrics(r.run_dir / "metrics.jsonl");
  double largest = 0;
  int steps = 0;
  for (std::string line; std::getline(metrics, line); ++steps) {
    const double window = nlohmann::json::parse(line)["memory"]["gather_window"].get<double>();
    EXPECT_GT(window, 0.25 * run_peak) << line;
    largest = std::max(largest, window);
  }
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(largest, run_peak);
}

// Per step each rank sends about 3Ψ values' worth (forward gather, backward gather, gradient
// reduce-scatter: each (N-1)/N of c·Ψ bytes) when nothing is kept for reuse or persists. The head's unit,
// read by its forward and at once by its backward, is gathered once, and the small id all-gathers add a
// little: within 5%.
TEST(Stage3Traffic, BytesSentPerStepAreAboutThreePsi) {
  ScratchDir dir;
  for (int ranks : {2, 3}) {
    RunOutput r =
        train(dir, "traffic" + std::to_string(ranks),
              job("llama", 3, ranks, 1, 1) + kStage3 +
                  " --set zero.stage3_param_persistence_threshold=0 --set model.width=64 --set model.layers=4");
    const double psi = read_model_states(r).at("num_params").get<double>();
    const double expected = 3 * 4 * psi * (ranks - 1) / ranks;
    ASSERT_FALSE(r.metrics.empty());
    const double sent = r.metrics.back().at("comm_bytes_sent");
    EXPECT_NEAR(sent / expected, 1.0, 0.05) << ranks << " ranks: " << sent << " bytes sent, 3Ψ gives " << expected;
  }
}

// LayerDrop with the same draws on every rank changes the block order from micro-batch to micro-batch:
// stage 3 re-records it and still equals stage 0 bit for bit. With per-rank draws the ranks walk different
// orders: the job stops within seconds with a message that says so, instead of hanging or exchanging the
// wrong tensors.
TEST(Stage3BlockOrder, ChangingOrderIsFollowedAndDivergentOrderStopsTheJob) {
  ScratchDir dir;
  const std::string args = job("llama", 8, 2, 1, 1) + " --set model.layers=4 --set model.layer_drop=0.3";
  RunOutput base = train(dir, "stage0", args + " --set zero.stage=0");
  RunOutput three = train(dir, "stage3", args + kStage3);
  EXPECT_EQ(weights_mismatch(three, base, 0, 0), "");
  EXPECT_NE(three.err.find("block order changed"), std::string::npos) << three.err;

  const auto started = std::chrono::steady_clock::now();
  RunOutput divergent =
      run_zhost(dir.path(), small_job_config(), "divergent", args + kStage3 + " --set debug.layer_drop_per_rank=true");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_NE(divergent.exit_code, 0);
  EXPECT_NE(divergent.err.find("walk the blocks in different orders"), std::string::npos) << divergent.err;
  EXPECT_LT(seconds, 20);
}

// LayerDrop with gradient accumulation: a block skipped in the boundary micro-batch still holds the
// gradients it accumulated in the earlier ones. Stages 0 and 1 reduce at the boundary and must still be
// handed those; stage 3 reduces every micro-batch. All three train alike (llama, 1e-6 relative).
// Per-rank draws (each rank skips other blocks): stages 0-2 launch their reductions in one fixed order
// whatever arrives (Note [Flat-range buckets]), a parameter its rank skipped reducing as zeros there, so
// they train, and alike: stage 1 equals stage 0 bit for bit, stage 2 equals stage 0 reducing every
// micro-batch bit for bit.
TEST(Stage3BlockOrder, SkippedBlocksKeepTheirAccumulatedGradients) {
  ScratchDir dir;
  const std::string args = job("llama", 8, 2, 1, 2) + " --set model.layers=4 --set model.layer_drop=0.4";
  RunOutput three = train(dir, "stage3", args + kStage3);
  RunOutput same_draws = train(dir, "stage0", args + " --set zero.stage=0");
  RunOutput one = train(dir, "stage1", args + " --set zero.stage=1");
  EXPECT_EQ(weights_norm_mismatch(same_draws, three, 1e-6), "") << "stage 0";
  EXPECT_EQ(weights_norm_mismatch(one, three, 1e-6), "") << "stage 1";

  const std::string per_rank = args + " --set debug.layer_drop_per_rank=true";
  RunOutput zero = train(dir, "perrank0", per_rank + " --set zero.stage=0");
  RunOutput zero_each =
      train(dir, "perrank0each", per_rank + " --set zero.stage=0 --set debug.reduce_each_micro_batch=true");
  RunOutput one_per_rank = train(dir, "perrank1", per_rank + " --set zero.stage=1");
  RunOutput two_per_rank = train(dir, "perrank2", per_rank + " --set zero.stage=2");
  EXPECT_EQ(weights_mismatch(one_per_rank, zero, 0, 0), "") << "stage 1, per-rank draws";
  EXPECT_EQ(weights_mismatch(two_per_rank, zero_each, 0, 0), "") << "stage 2, per-rank draws";
  EXPECT_NE(weights_mismatch(zero, same_draws, 0, 0), "") << "per-rank draws skipped the same blocks";
}

}  // namespace

namespace {

// "[rank R] ... peak resident memory of this rank: N MB" for each rank.
std::vector<double> peak_memory_per_rank(const RunOutput& r, int ranks) {
  std::vector<double> peaks(static_cast<size_t>(ranks), -1);
  std::istringstream lines(r.err + r.out);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find("peak resident memory of this rank: ");
    const size_t rank_at = line.find("[rank ");
    if (at == std::string::npos || rank_at == std::string::npos) continue;
    const int rank = std::stoi(line.substr(rank_at + 6));
    if (rank >= 0 && rank < ranks) peaks[static_cast<size_t>(rank)] = std::stod(line.substr(at + 35));
  }
  return peaks;
}

// A llama of 101M parameters (fp32 model states 1.6 GB per rank at stage 0, 16Ψ) on 4 ranks. Each rank's
// peak resident memory at stage 3 is at most 35% of a stage 0 rank's peak (measured 565 MB vs 2843 MB; stage
// 0 runs on 2 ranks, as what a data-parallel rank holds does not depend on their number apart from its
// split of the reduced gradients; its 2843 MB include 609 MB of communication buffers), and falls from 2 to
// 4 ranks. Under a per-process data limit of 1.2 GB
// (ulimit -d, inherited by every rank) stage 3 trains and stage 0 stops with an out-of-memory message that
// says what the states need and what to change. Gathers are bounded (prefetch one layer, at most two live,
// no reuse, optimizer sub-groups of 1M) so that the gather window stays a few layers.
TEST(Stage3Memory, FourRanksTrainAModelStageZeroCannotHold) {
  ScratchDir dir;
  const std::string model =
      " --set model.type=llama --set model.width=512 --set model.heads=8 --set model.layers=32 --set model.vocab=256"
      " --set steps=1 --set train_micro_batch_size_per_gpu=1 --set run.save_final_weights=false";  // peak: step 1
  const std::string stage3 =
      " --set zero.stage=3 --set zero.stage3_param_persistence_threshold=1000 --set zero.stage3_max_reuse_distance=0"
      " --set zero.sub_group_size=1000000 --set zero.stage3_prefetch_bucket_size=3200000"
      " --set zero.stage3_max_live_parameters=6400000";
  const std::string limit = "ulimit -d 1200000 && ";                               // KiB: 1.2 GB of data per process
  RunOutput base = train(dir, "stage0", model + " --nproc 2 --set zero.stage=0");  // a rank's share: N-free
  RunOutput two = train(dir, "stage3x2", model + " --nproc 2" + stage3);
  RunOutput four = run_zhost(dir.path(), small_job_config(), "stage3x4", model + " --nproc 4" + stage3, limit);
  ASSERT_EQ(four.exit_code, 0) << "stage 3 on 4 ranks under the limit:\n" << four.err;
  const std::vector<double> p0 = peak_memory_per_rank(base, 2), p2 = peak_memory_per_rank(two, 2),
                            p4 = peak_memory_per_rank(four, 4);
  for (int r = 0; r < 4; ++r) {
    ASSERT_GT(p0[r % 2], 0) << base.err;
    ASSERT_GT(p4[r], 0) << four.err;
    EXPECT_LE(p4[r], 0.35 * p0[r % 2]) << "rank " << r << ": stage 3 " << p4[r] << " MB, stage 0 " << p0[r % 2]
                                       << " MB";
    if (r < 2) {
      EXPECT_LT(p4[r], p2[r]) << "rank " << r << ": 4 ranks " << p4[r] << " MB, 2 ranks " << p2[r] << " MB";
    }
  }
  RunOutput refused =
      run_zhost(dir.path(), small_job_config(), "stage0limited", model + " --nproc 4 --set zero.stage=0", limit);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("out of memory on rank"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("model states need 1624 MB per rank at ZeRO stage 0"), std::string::npos) << refused.err;
}

}  // namespace

namespace {

// Note [Parameter offload alone] (plugins/stage3/sub_group_optimizer.cpp): zero.offload_param without
// zero.offload_optimizer, as DeepSpeed allows. The optimizer steps on the device; the shards the gathers read come
// from the params tier, written from the masters after each step: bit for bit stage 3 without offload, in fp32 and
// bf16, and in bf16 the device keeps no 16-bit shard (model states 14Ψ/N instead of 16Ψ/N).
TEST(Stage3Variants, ParameterOffloadAloneIsBitwiseStageThree) {
  ScratchDir dir;
  for (const std::string precision : {"fp32", "bf16"}) {
    const std::string args =
        job("llama", 6, 2, 1, 2) + kStage3 + (precision == "bf16" ? " --set bf16.enabled=true" : "");
    RunOutput base = train(dir, precision + "_stage3", args);
    RunOutput alone = train(dir, precision + "_param_offload",
                            args + " --set zero.offload_param.device=cpu --set zero.offload_param.buffer_count=2");
    ASSERT_EQ(base.losses.size(), 6u) << precision;
    EXPECT_EQ(alone.losses, base.losses) << precision;
    EXPECT_EQ(weights_mismatch(alone, base, 0, 0), "") << precision;
    const nlohmann::json with = read_model_states(alone), without = read_model_states(base);
    const double psi = with.at("num_params").get<double>();
    const double saved =
        without.at("measured").at("total").get<double>() - with.at("measured").at("total").get<double>();
    if (precision == "bf16")  // the 2-byte shard of each owned parameter (2 ranks)
      EXPECT_NEAR(saved / (2 * psi / 2), 1.0, 0.05) << with.dump();
    else  // the fp32 master doubles as the shard on the device either way
      EXPECT_EQ(saved, 0.0) << with.dump();
  }
}

}  // namespace
