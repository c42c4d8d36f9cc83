// tests/zero/zero_training_test.cpp: the ZeRO stage 1 and 2 plugins, loaded by the real zhost executable
// from their shared objects, on 1, 2 and 3 ranks (processes over Gloo).
//
// Equality with stage 0 (fp32). Every stage reduces gradients through the same reducer (reduce-scatter in
// buckets, each element summed over ranks in rank order: Note [One summation order]), computes the norm
// exactly (Note [Exact gradient norm]) and steps with the same kernel (Note [One optimizer arithmetic]), so
// the weights are bit for bit stage 0's on any number of ranks, with partitions of uneven fill (the
// padding of the flat layout) and parameters straddling buckets and partitions. With gradient accumulation
// stage 1 sums over micro-batches in .grad before reducing, as stage 0 does: bitwise. Stage 2 reduces every
// micro-batch and sums the reduced values: bitwise with stage 0 under debug.reduce_each_micro_batch, and
// within 1e-6 relative (||difference|| / ||weights|| per tensor, llama, 20 steps) of plain stage 0, where
// the two orders round differently and training amplifies it.
// bf16 (llama too): 16-bit parameters and gradient buckets in every stage: bit for bit as well.
// Buckets are kept small (3000 elements, all-gather chunks of 2000 elements) so that every run reduces and
// gathers in many pieces, with parameters straddling buckets and partitions.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/scratch_dir.hpp"
#include "tests/training/training_test_support.hpp"

using namespace zhost::testing;

namespace {

constexpr double kFp32Relative = 1e-6;  // stage 2 with accumulation against stage 0 reducing once per step
const char* kSmallBuckets = " --set zero.reduce_bucket_size=3000";
const char* kSmallGathers = " --set zero.allgather_bucket_size=2000";  // stages 1 and 2 only

std::string job(const std::string& model, int steps) {
  return " --set model.type=" + model + " --set steps=" + std::to_string(steps);
}

// `zero_args`: keys of the stage plugins, which stage 0 rejects (they are not its keys).
RunOutput train(const ScratchDir& dir, const std::string& name, int stage, const std::string& args,
                const std::string& zero_args = "") {
  std::string stage_args = "--set zero.stage=" + std::to_string(stage) + kSmallBuckets;
  if (stage > 0) stage_args += kSmallGathers + zero_args;
  RunOutput r = run_zhost(dir.path(), small_job_config(), name, stage_args + " " + args);
  EXPECT_EQ(r.exit_code, 0) << name << ":\n" << r.err << r.out;
  return r;
}

struct Layout {
  const char* name;
  const char* model;
  int ranks;
  int micro_batch;
  int accumulation;
  const char* extra;  // e.g. overlap_comm
};

void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }  // stable test names, not the pointers' bytes

class EqualsStageZero : public ::testing::TestWithParam<Layout> {};

INSTANTIATE_TEST_SUITE_P(
    Layouts, EqualsStageZero,
    ::testing::Values(Layout{"LlamaThreeRanksOverlapping", "llama", 3, 2, 1, " --set zero.overlap_comm=true"},
                      Layout{"GptThreeRanks", "gpt", 3, 2, 1, ""},
                      Layout{"LlamaTwoRanksAccumulating", "llama", 2, 1, 2, ""},
                      Layout{"GptThreeRanksAccumulating", "gpt", 3, 1, 2, ""},
                      Layout{"LlamaOneRankOverlapping", "llama", 1, 2, 1, " --set zero.overlap_comm=true"},
                      Layout{"GptOneRankAccumulating", "gpt", 1, 2, 2, ""}),
    [](const ::testing::TestParamInfo<Layout>& layout) { return std::string(layout.param.name); });

TEST_P(EqualsStageZero, Fp32WeightsAfterTwentySteps) {
  const Layout& l = GetParam();
  ScratchDir dir;
  std::string args = job(l.model, 20) + " --set train_micro_batch_size_per_gpu=" + std::to_string(l.micro_batch) +
                     " --set gradient_accumulation_steps=" + std::to_string(l.accumulation) +
                     (l.ranks > 1 ? " --nproc " + std::to_string(l.ranks) : "");
  RunOutput base = train(dir, "stage0", 0, args);
  RunOutput one = train(dir, "stage1", 1, args, l.extra);
  RunOutput two = train(dir, "stage2", 2, args, l.extra);
  ASSERT_EQ(base.losses.size(), 20u);
  expect_clipping_acted(base);
  EXPECT_LT(base.losses.back(), base.losses.front());
  EXPECT_EQ(weights_mismatch(one, base, 0, 0), "") << "stage 1, bit for bit";
  if (l.accumulation == 1) {
    EXPECT_EQ(weights_mismatch(two, base, 0, 0), "") << "stage 2, bit for bit";
    EXPECT_EQ(two.losses, base.losses);
  } else {
    RunOutput per_micro_batch = train(dir, "stage0each", 0, args + " --set debug.reduce_each_micro_batch=true");
    EXPECT_EQ(weights_mismatch(two, per_micro_batch, 0, 0), "") << "stage 2, bit for bit with stage 0 reducing "
                                                                   "every micro-batch";
    if (std::string(l.model) == "llama") {  // see the top of the file
      EXPECT_EQ(weights_norm_mismatch(two, base, kFp32Relative), "") << "stage 2 against stage 0 reducing per step";
    }
  }
  EXPECT_EQ(one.losses, base.losses);
}

// The gpt with tied embeddings on 2 ranks, through every reduction path: overlapping buckets, all-reduce
// instead of reduce-scatter, one bucket for everything, and gradients arriving from activation
// checkpointing's recomputation (a nested backward): always bit for bit stage 0.
TEST(ZeroVariants, GptOnTwoRanksIsBitwiseStageZeroWhateverTheReductionPath) {
  ScratchDir dir;
  const std::string args = job("gpt", 10) + " --nproc 2 --set train_micro_batch_size_per_gpu=2";
  RunOutput base = train(dir, "stage0", 0, args);
  RunOutput overlap = train(dir, "overlap", 2, args, " --set zero.overlap_comm=true");
  RunOutput all_reduce = train(dir, "allreduce", 1, args, " --set zero.reduce_scatter=false");
  RunOutput one_bucket = train(dir, "onebucket", 2, args,
                               " --set zero.reduce_bucket_size=100000000 --set zero.allgather_bucket_size=100000000");
  RunOutput recomputed = train(dir, "checkpointed", 2, args + " --set activation_checkpointing.enabled=true",
                               " --set zero.overlap_comm=true");
  EXPECT_EQ(weights_mismatch(overlap, base, 0, 0), "");
  EXPECT_EQ(weights_mismatch(recomputed, base, 0, 0), "");
  EXPECT_EQ(weights_mismatch(all_reduce, base, 0, 0), "");
  EXPECT_EQ(weights_mismatch(one_bucket, base, 0, 0), "");
}

// Note [Gradient pre-division] (docs/config.md): DeepSpeed's prescale_gradients and gradient_predivide_factor.
// On 3 ranks (f = 3, not a power of two) the gradients round differently from the plain job; stages 1, 2 and 3
// still equal stage 0 bit for bit, and the weights stay within 2e-4 of each tensor's largest value of the
// plain job's (measured: 7e-5 after 8 AdamW steps, in a bias near zero). A factor of 2, a power of two, scales
// exactly: bit for bit the plain job.
TEST(GradientPredivision, StagesAgreeBitwiseAndStayCloseToThePlainAverage) {
  ScratchDir dir;
  const std::string args = job("gpt", 8) + " --nproc 3 --set train_micro_batch_size_per_gpu=1";
  RunOutput plain = train(dir, "plain", 0, args);
  // With prescale_gradients the factor is not used, as in DeepSpeed: a warning, and pre1's bits.
  RunOutput pre0 = train(dir, "pre0", 0, args + " --set prescale_gradients=true --set gradient_predivide_factor=5");
  EXPECT_NE(pre0.err.find("warning: gradient_predivide_factor = 5 has no effect: prescale_gradients = true"),
            std::string::npos)
      << pre0.err;
  RunOutput pre1 = train(dir, "pre1", 1, args + " --set prescale_gradients=true");
  RunOutput factor3 = train(dir, "factor3", 2, args + " --set gradient_predivide_factor=3");  // f = N
  RunOutput pre3 =
      run_zhost(dir.path(), small_job_config(), "pre3",
                "--set zero.stage=3 --set zero.reduce_bucket_size=3000 --set prescale_gradients=true" + args);
  ASSERT_EQ(pre3.exit_code, 0) << pre3.err;
  RunOutput factor2 = train(dir, "factor2", 0, args + " --set gradient_predivide_factor=2");
  expect_clipping_acted(plain);
  EXPECT_EQ(weights_mismatch(pre1, pre0, 0, 0), "");
  EXPECT_EQ(weights_mismatch(factor3, pre0, 0, 0), "");
  EXPECT_EQ(weights_mismatch(pre3, pre0, 0, 0), "");
  EXPECT_EQ(pre3.losses, pre0.losses);
  EXPECT_EQ(weights_mismatch(factor2, plain, 0, 0), "");
  EXPECT_NE(weights_mismatch(pre0, plain, 0, 0), "");  // it does act
  EXPECT_EQ(weights_mismatch(pre0, plain, 2e-4, 0), "");
}

TEST(ZeroVariants, Bf16IsBitwiseStageZero) {
  ScratchDir dir;
  const std::string args =
      job("llama", 20) + " --nproc 3 --set train_micro_batch_size_per_gpu=2 --set bf16.enabled=true";
  RunOutput base = train(dir, "stage0", 0, args);
  RunOutput one = train(dir, "stage1", 1, args);
  RunOutput two = train(dir, "stage2", 2, args);
  EXPECT_EQ(weights_mismatch(one, base, 0, 0), "");
  EXPECT_EQ(weights_mismatch(two, base, 0, 0), "");
  EXPECT_EQ(two.losses, base.losses);
}

// Per-rank model-state bytes and per-step traffic against ZeRO's formulas, in mixed precision (bf16
// parameters and gradients, fp32 master and Adam states: c = 2, K = 8), computed here from Ψ.
struct Accounting {
  int stage;
  int ranks;
};

void PrintTo(const Accounting& a, std::ostream* os) { *os << "stage " << a.stage << ", " << a.ranks << " ranks"; }

class ZeroFormulas : public ::testing::TestWithParam<Accounting> {
 protected:
  // The gpt in bf16 for `steps` steps, at the parameter's stage and rank count, with `extra` settings.
  RunOutput train_bf16_gpt(const ScratchDir& dir, int steps, const std::string& extra) const {
    return train(
        dir, "run", GetParam().stage,
        job("gpt", steps) + " --nproc " + std::to_string(GetParam().ranks) + " --set bf16.enabled=true" + extra);
  }
};

INSTANTIATE_TEST_SUITE_P(StagesAndRanks, ZeroFormulas,
                         ::testing::Values(Accounting{1, 2}, Accounting{1, 3}, Accounting{2, 2}, Accounting{2, 3}),
                         [](const ::testing::TestParamInfo<Accounting>& a) {
                           return "Stage" + std::to_string(a.param.stage) + "On" + std::to_string(a.param.ranks) +
                                  "Ranks";
                         });

TEST_P(ZeroFormulas, ModelStateBytesAndTrafficMatch) {
  const auto [stage, ranks] = GetParam();
  ScratchDir dir;
  RunOutput r = train_bf16_gpt(dir, 3, " --set train_micro_batch_size_per_gpu=1");
  auto states = read_model_states(r);
  const double psi = states["num_params"].get<double>(), n = ranks;
  const double expected = stage == 1 ? 4 * psi + 12 * psi / n : 2 * psi + 14 * psi / n;
  const double measured = states["measured"]["total"].get<double>();
  EXPECT_NEAR(measured / expected, 1.0, 0.05) << "measured " << measured << " bytes, ZeRO formula " << expected;
  // Stage 2 holds no full-size gradient: its gradient bytes are one partition.
  const double grads = states["measured"]["grads"].get<double>();
  EXPECT_NEAR(grads / (stage == 1 ? 2 * psi : 2 * psi / n), 1.0, 0.05);
  const std::string log = r.out + r.err;
  for (int rank = 0; rank < ranks; ++rank)  // each rank logs its model states
    EXPECT_NE(log.find("[rank " + std::to_string(rank) + "] "), std::string::npos) << log;
  EXPECT_EQ(count_occurrences(log, "model states per rank"), ranks) << log;

  // Per step each rank sends its share of a reduce-scatter and of an all-gather of Ψ bf16 values:
  // 2 * 2Ψ(N-1)/N bytes, "about 2Ψ" elements in ZeRO's words, plus one scalar for the gradient norm.
  const double traffic = 2 * 2 * psi * (n - 1) / n;
  ASSERT_FALSE(r.metrics.empty());
  for (const auto& m : r.metrics) EXPECT_NEAR(m.at("comm_bytes_sent") / traffic, 1.0, 0.05) << "step " << m.at("step");
}

// Communication buffers of stages 1 and 2 (Note [Transient communication buffers]), in bf16 (2 bytes), each
// run measured at every step. During backward: stage 2's range staging (one flat range of all Ψ at DeepSpeed's
// default of 5e8 elements); stage 1 stages in the flat buffer it accumulates the gradients in, reported as its
// gradients, 2*N*S (Note [Stage 1 accumulates in its flat staging]). This rank's share of a range is received
// straight into its gradient partition (Note [Sums written in place]). During the step: the parameter
// all-gather's receive (N*chunk) and send (chunk) buffers. They are never held at once: the report is the
// larger. A run with gathers of 64 elements per rank shows the staging alone (a receive buffer would add S =
// Ψ/N), one with small ranges the gather alone ((N+1)*S; held through backward it would add to the staging).
TEST_P(ZeroFormulas, CommunicationBuffersAreTheRangesOrTheGatherNeverBoth) {
  const auto [stage, ranks] = GetParam();
  const double n = ranks;
  double psi = 0;
  auto buffers_each_step = [&](const std::string& buckets, const std::function<double(double)>& expected,
                               const char* what) {
    ScratchDir dir;
    RunOutput r = train_bf16_gpt(dir, 2, buckets);
    psi = read_model_states(r)["num_params"].get<double>();
    std::ifstream metrics(r.run_dir / "metrics.jsonl");
    int steps = 0;
    for (std::string line; std::getline(metrics, line); ++steps) {
      const nlohmann::json memory = nlohmann::json::parse(line)["memory"];
      const double buffers = memory["buffers"].get<double>(), want = expected(psi);
      EXPECT_NEAR(buffers / want, 1.0, 0.001) << what << ": " << buffers << " bytes, expected " << want;
      if (stage == 1) {
        EXPECT_EQ(memory["grads"].get<double>(), 2 * n * std::ceil(psi / n)) << what;
      }
    }
    EXPECT_EQ(steps, 2) << what;
  };
  buffers_each_step(
      " --set zero.reduce_bucket_size=500000000 --set zero.allgather_bucket_size=" + std::to_string(64 * ranks),
      [&](double p) { return stage == 2 ? 2 * p : 2 * 64 * (n + 1); }, "one range, small gathers");
  buffers_each_step(
      " --set zero.reduce_bucket_size=1000 --set zero.allgather_bucket_size=500000000",
      [&](double p) { return 2 * (n + 1) * std::ceil(p / n); }, "small ranges, one gather");
}

// Note [Stage 0 holds its gradients once]: stage 0 takes the gradients into its flat buffer, so the rank holds one
// full-size copy of them (2Ψ in bf16, padded to N*S) and, beside it, only its split (2S), which receives the sums
// in place (Note [Sums written in place]). The host's .grad kept as well would count 2Ψ more gradient bytes; a
// receive buffer, 2S more buffer bytes. Measured at every step, with accumulation.
TEST(StageZeroMemory, GradientsOnceAndTheSplitBeside) {
  ScratchDir dir;
  const int ranks = 2;
  RunOutput r = train(dir, "stage0", 0,
                      job("gpt", 2) +
                          " --nproc 2 --set bf16.enabled=true --set train_micro_batch_size_per_gpu=1"
                          " --set gradient_accumulation_steps=2");
  const double psi = read_model_states(r)["num_params"].get<double>();
  const double s = std::ceil(psi / ranks);
  std::ifstream metrics(r.run_dir / "metrics.jsonl");
  int steps = 0;
  for (std::string line; std::getline(metrics, line); ++steps) {
    const nlohmann::json memory = nlohmann::json::parse(line)["memory"];
    EXPECT_EQ(memory["grads"].get<double>(), 2 * ranks * s) << line;
    EXPECT_EQ(memory["buffers"].get<double>(), 2 * s) << line;
  }
  EXPECT_EQ(steps, 2);
}

// Stages 1-3 reduce through the one GradientReducer, which also checks what arrives: with
// zero.ignore_unused_parameters = false, a parameter that receives no gradient (its block skipped by
// LayerDrop) stops the job with one error that names it and the key, at every stage alike. The default
// reduces it as zeros (Stage3BlockOrder's LayerDrop tests).
class UnusedParameter : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(Stages, UnusedParameter, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& stage) {
                           return "Stage" + std::to_string(stage.param);
                         });

TEST_P(UnusedParameter, StopsTheJobNamingItWhenNotIgnored) {
  ScratchDir dir;
  const std::string stage = std::to_string(GetParam());
  RunOutput r = run_zhost(dir.path(), small_job_config(), "run",
                          "--set zero.stage=" + stage + job("llama", 6) +
                              " --nproc 2 --set model.layers=4 --set model.layer_drop=0.5"
                              " --set zero.ignore_unused_parameters=false");
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("stage" + stage + ": parameter "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("received no gradient in this backward (unused by the loss); set "
                       "zero.ignore_unused_parameters = true to treat it as zero"),
            std::string::npos)
      << r.err;
}

TEST(ZeroConfig, StageTwoKeyInAStageOneConfigIsRejected) {
  ScratchDir dir;
  RunOutput r =
      run_zhost(dir.path(), small_job_config() + "[zero]\nstage = 1\ncontiguous_gradients = true\n", "run", "");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("zero.contiguous_gradients is set, but it is read by plugin 'stage2'"), std::string::npos)
      << r.err;
}

TEST(ZeroConfig, KeysWithoutEffectAreNamedInTheLog) {
  ScratchDir dir;
  RunOutput r = run_zhost(dir.path(), small_job_config(), "run",
                          "--set zero.stage=2 --set steps=1 --set zero.round_robin_gradients=true "
                          "--set zero.contiguous_gradients=false");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string log = r.out + r.err;
  EXPECT_NE(log.find("zero.round_robin_gradients = true has no effect"), std::string::npos) << log;
  EXPECT_NE(log.find("zero.contiguous_gradients = false"), std::string::npos) << log;
}

}  // namespace
