// tests/zero/offload_training_test.cpp: ZeRO-Offload with the offload_cpu tier, through the real zhost
// executable and plugin files: stages 1, 2 and 3 with zero.offload_optimizer.device = "cpu" hand the fp32
// master partition (stage 3: each optimizer sub-group), the optimizer states and the gradient
// accumulation to the tier, whose fused SIMD optimizer steps them and writes the compute-dtype weights
// for the all-gather.
//
// Equality: the tier steps with the kernel the kit's optimizer uses on the CPU, with the same gradient
// factor (Note [One optimizer arithmetic], Note [Step prologue]), so offloading changes no bit: every run
// equals the same job without offload bit for bit, fp32 and bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "tests/support/scratch_dir.hpp"
#include "tests/training/training_test_support.hpp"

using namespace zhost::testing;

namespace {

// The job of these tests: 20 steps of llama, reductions in buckets of 3000 elements.
RunOutput run(const ScratchDir& dir, const std::string& name, const std::string& args,
              const std::string& shell_prefix = "") {
  return run_zhost(dir.path(), small_job_config(), name,
                   "--set model.type=llama --set steps=20 --set zero.reduce_bucket_size=3000 " + args, shell_prefix);
}

RunOutput train(const ScratchDir& dir, const std::string& name, const std::string& args,
                const std::string& shell_prefix = "") {
  RunOutput r = run(dir, name, args, shell_prefix);
  EXPECT_EQ(r.exit_code, 0) << name << ":\n" << r.err << r.out;
  return r;
}

const char* kOffload = " --set zero.offload_optimizer.device=cpu --set offload_cpu.threads=1";

// `args` resumed (as run NAME) from CKPT_DIR's step 10 of the 20-step job `full`: steps 11-20 and the final weights
// the same bits.
void expect_resume_at_ten_is_bitwise(const ScratchDir& dir, const std::string& name, const std::string& args,
                                     const std::string& ckpt_dir, const RunOutput& full) {
  RunOutput resumed = train(
      dir, name,
      args + " --set checkpoint.dir=" + name + "-ckpt --resume " + (dir.path() / ckpt_dir / "step-00000010").string());
  ASSERT_EQ(resumed.losses.size(), 10u) << name;
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(resumed.losses[i], full.losses[i + 10]) << name << ", step " << i + 11;
  EXPECT_EQ(weights_mismatch(resumed, full, 0, 0), "") << name;
}

// Checkpoints hold fp32 values whatever the masters' dtype: the fp32-master job's step-10 checkpoint (CKPT32) resumed
// with `half_args` (16-bit masters), and the 16-bit-master job's (CKPT16) with `fp32_args`. Step 11 runs on the same
// 16-bit weights either way (a resume rounds the checkpoint's masters), so its loss is the uninterrupted job's; the
// steps after it part (masters rounded or not).
void expect_resumes_across_precisions(const ScratchDir& dir, const std::string& half_args, const std::string& fp32_args,
                                      const RunOutput& full16, const RunOutput& full32) {
  RunOutput into16 =
      train(dir, "into16",
            half_args + " --set checkpoint.dir=i16 --resume " + (dir.path() / "ckpt32" / "step-00000010").string());
  RunOutput into32 =
      train(dir, "into32",
            fp32_args + " --set checkpoint.dir=i32 --resume " + (dir.path() / "ckpt16" / "step-00000010").string());
  ASSERT_EQ(into16.losses.size(), 10u);
  ASSERT_EQ(into32.losses.size(), 10u);
  EXPECT_EQ(into16.losses[0], full32.losses[10]);
  EXPECT_EQ(into32.losses[0], full16.losses[10]);
  EXPECT_NE(into16.losses.back(), full32.losses.back());
}

struct Case {
  const char* name;
  int stage;
  const char* layout;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }  // test names, not bytes

class OffloadEqualsNoOffload : public ::testing::TestWithParam<Case> {};

INSTANTIATE_TEST_SUITE_P(
    StagesAndRanks, OffloadEqualsNoOffload,
    ::testing::Values(Case{"Stage1TwoRanks", 1, "--nproc 2 --set train_micro_batch_size_per_gpu=2"},
                      Case{"Stage2ThreeRanksAccumulating", 2,
                           "--nproc 3 --set train_micro_batch_size_per_gpu=1 --set gradient_accumulation_steps=2"},
                      // several sub-groups, each a group of the tier
                      Case{"Stage3ThreeRanksAccumulating", 3,
                           "--nproc 3 --set train_micro_batch_size_per_gpu=1 --set gradient_accumulation_steps=2 "
                           "--set zero.stage3_param_persistence_threshold=40 --set zero.sub_group_size=3000"}),
    [](const ::testing::TestParamInfo<Case>& c) { return std::string(c.param.name); });

TEST_P(OffloadEqualsNoOffload, Fp32WeightsAfterTwentySteps) {
  const Case& c = GetParam();
  ScratchDir dir;
  const std::string args = std::string(c.layout) + " --set zero.stage=" + std::to_string(c.stage);
  RunOutput plain = train(dir, "plain", args);
  RunOutput offloaded = train(dir, "offloaded", args + kOffload);
  ASSERT_EQ(plain.losses.size(), 20u);
  EXPECT_NE((offloaded.out + offloaded.err).find("optimizer offloaded to tier 'offload_cpu'"), std::string::npos)
      << offloaded.err;
  EXPECT_EQ(weights_mismatch(offloaded, plain, 0, 0), "");
  EXPECT_EQ(offloaded.losses, plain.losses);
}

// DeepSpeed's `bias_correction: false` (optimizer.bias_correction): the tier's fused kernel and the kit's
// optimizer take the raw moments alike (their formula against float64: tests/optim, tests/offload_cpu), and
// the switch reaches both - the job differs from the one with bias correction.
TEST(Offload, AdamWithoutBiasCorrectionIsTheSameInTheTier) {
  ScratchDir dir;
  const std::string args = "--nproc 2 --set train_micro_batch_size_per_gpu=2 --set zero.stage=2";
  RunOutput plain = train(dir, "plain", args + " --set optimizer.bias_correction=false");
  RunOutput offloaded = train(dir, "offloaded", args + " --set optimizer.bias_correction=false" + kOffload);
  EXPECT_EQ(weights_mismatch(offloaded, plain, 0, 0), "");
  EXPECT_EQ(offloaded.losses, plain.losses);
  RunOutput corrected = train(dir, "corrected", args + kOffload);
  EXPECT_NE(weights_mismatch(corrected, offloaded, 0, 0), "");
}

TEST(Offload, Bf16StageTwoKeepsOnlyParametersOnTheDevice) {
  ScratchDir dir;
  const std::string args =
      "--nproc 2 --set train_micro_batch_size_per_gpu=2 --set bf16.enabled=true --set zero.stage=2";
  RunOutput plain = train(dir, "plain", args);
  RunOutput offloaded = train(dir, "offloaded", args + kOffload);
  EXPECT_EQ(weights_mismatch(offloaded, plain, 0, 0), "");
  EXPECT_EQ(offloaded.losses, plain.losses);

  // ZeRO-Offload's device side at stage 2: the 16-bit parameters (2Ψ); gradients, master and Adam states
  // (4 + 4 + 8 bytes per owned parameter) are in the tier's host memory.
  auto states = read_model_states(offloaded);
  const double psi = states["num_params"].get<double>(), n = 2;
  EXPECT_NEAR(states["measured"]["total"].get<double>() / (2 * psi), 1.0, 0.05) << states.dump();
  EXPECT_EQ(states["measured"]["master"].get<double>(), 0.0);
  EXPECT_EQ(states["measured"]["optimizer"].get<double>(), 0.0);
  EXPECT_NEAR(states["offloaded"].get<double>() / (16 * psi / n), 1.0, 0.05) << states.dump();
}

// Note [Sums written in place]: the tier's fp32 accumulator, zeros after every step, receives this rank's sums
// of an fp32 job straight, as a gradient partition does. Stage 2's communication buffers at every step are then
// its one range's staging (4Ψ at one range of DeepSpeed's default 5e8 elements, the all-gather in chunks of 64
// elements smaller) and the updated partition the tier writes for the all-gather (4S); a receive buffer would
// add 4S, from the second step on if the accumulator were not known to be zero after the tier's step.
TEST(Offload, TheTiersAccumulatorReceivesTheSumsInPlace) {
  ScratchDir dir;
  const int ranks = 2;
  RunOutput r = train(dir, "offloaded",
                      "--nproc 2 --set train_micro_batch_size_per_gpu=2 --set zero.stage=2 "
                      "--set zero.reduce_bucket_size=500000000 --set zero.allgather_bucket_size=128" +
                          std::string(kOffload));
  const double psi = read_model_states(r)["num_params"].get<double>();
  const double s = std::ceil(psi / ranks);
  std::ifstream metrics(r.run_dir / "metrics.jsonl");
  int steps = 0;
  for (std::string line; std::getline(metrics, line); ++steps)
    EXPECT_EQ(nlohmann::json::parse(line)["memory"]["buffers"].get<double>(), 4 * psi + 4 * s) << line;
  EXPECT_EQ(steps, 20);
}

// Stage 3 + offload keeps only the 16-bit parameter shards on the device side (2Ψ/N), the tier 16Ψ/N.
TEST(Offload, Bf16StageThreeKeepsOnlyParameterShardsOnTheDevice) {
  ScratchDir dir;
  RunOutput offloaded = train(dir, "offloaded",
                              "--nproc 2 --set train_micro_batch_size_per_gpu=2 --set bf16.enabled=true "
                              "--set zero.stage=3 --set zero.stage3_param_persistence_threshold=0" +
                                  std::string(kOffload));
  auto states = read_model_states(offloaded);
  const double psi = states["num_params"].get<double>(), n = 2;
  EXPECT_EQ(states["formula_text"], "2Ψ/N (optimizer and gradients offloaded)");
  EXPECT_NEAR(states["measured"]["total"].get<double>() / (2 * psi / n), 1.0, 0.05) << states.dump();
  EXPECT_NEAR(states["offloaded"].get<double>() / (16 * psi / n), 1.0, 0.05) << states.dump();
}

// DeepSpeed's bf16_master_weights_and_grads and fp16_master_weights_and_grads (Note [bf16 master weights]): in that
// 16-bit training the tier keeps 2-byte masters (14 bytes per owned parameter with the fp32 accumulator and Adam's
// moments), the job trains differently from fp32 masters, a 16-bit-master checkpoint resumes bit for bit, and
// checkpoints resume across the two (fp32 values in both).
struct HalfCase {
  const char* name;
  const char* type;  // "bf16" or "fp16": <type>.enabled and <type>.master_weights_and_grads
};

void PrintTo(const HalfCase& c, std::ostream* os) { *os << c.name; }

class HalfMasterWeights : public ::testing::TestWithParam<HalfCase> {};

INSTANTIATE_TEST_SUITE_P(Types, HalfMasterWeights,
                         ::testing::Values(HalfCase{"Bf16", "bf16"}, HalfCase{"Fp16", "fp16"}),
                         [](const ::testing::TestParamInfo<HalfCase>& c) { return std::string(c.param.name); });

TEST_P(HalfMasterWeights, HoldFewerBytesAndResumeAcrossPrecisions) {
  const std::string type = GetParam().type;
  ScratchDir dir;
  const std::string fp32_master = "--nproc 2 --set train_micro_batch_size_per_gpu=2 --set " + type +
                                  ".enabled=true --set zero.stage=2 --set checkpoint.interval=10" + kOffload;
  const std::string half_master = fp32_master + " --set " + type + ".master_weights_and_grads=true";
  RunOutput full32 = train(dir, "full32", fp32_master + " --set checkpoint.dir=ckpt32");
  RunOutput full16 = train(dir, "full16", half_master + " --set checkpoint.dir=ckpt16");
  ASSERT_EQ(full16.losses.size(), 20u);
  EXPECT_NE(full16.err.find(type + " master weights"), std::string::npos) << full16.err;
  EXPECT_NE(full16.losses, full32.losses);  // 16-bit masters round every update
  EXPECT_LT(full16.losses.back(), full16.losses.front());

  auto states = read_model_states(full16);
  const double psi = states["num_params"].get<double>(), n = 2;
  EXPECT_NEAR(states["offloaded"].get<double>() / (14 * psi / n), 1.0, 0.05) << states.dump();

  // The 16-bit-master job resumed from its own step 10: steps 11-20 the same bits.
  expect_resume_at_ten_is_bitwise(dir, "resumed16", half_master, "ckpt16", full16);

  // Across: an fp32-master checkpoint resumed with 16-bit masters, and back.
  expect_resumes_across_precisions(dir, half_master, fp32_master, full16, full32);
}

// bf16_optimizer_states too: Adam's moments in bf16, 10 bytes per owned parameter in the tier (2 + 2 + 2 and the fp32
// accumulator); the job differs from bf16 masters with fp32 moments, and resumes bit for bit.
TEST(Offload, Bf16OptimizerStatesHoldTenBytesAndResumeBitForBit) {
  ScratchDir dir;
  const std::string masters =
      "--nproc 2 --set train_micro_batch_size_per_gpu=2 --set bf16.enabled=true --set zero.stage=3 "
      "--set zero.stage3_param_persistence_threshold=0 --set bf16.master_weights_and_grads=true "
      "--set checkpoint.interval=10" +
      std::string(kOffload);
  const std::string states16 = masters + " --set bf16.optimizer_states=true";
  RunOutput moments32 = train(dir, "moments32", masters + " --set checkpoint.dir=c32");
  RunOutput full = train(dir, "full", states16 + " --set checkpoint.dir=c16");
  ASSERT_EQ(full.losses.size(), 20u);
  EXPECT_NE(full.losses, moments32.losses);
  auto states = read_model_states(full);
  const double psi = states["num_params"].get<double>(), n = 2;
  EXPECT_NEAR(states["offloaded"].get<double>() / (10 * psi / n), 1.0, 0.05) << states.dump();
  expect_resume_at_ten_is_bitwise(dir, "resumed", states16, "c16", full);
}

// Note [bf16 masters without offload]: without ZeRO-Offload, each stage keeps its bf16 masters and Adam moments
// itself and steps them with the kit's Adam, the CPU tier's kernel, so the job trains to the same bits as the same job
// with the CPU tier's bf16 masters and moments (Offload.Bf16* above), and its model states are 2 + 4 bytes of master
// and moments per owned parameter, the formula's. (Stage 1 accumulates in its flat staging either way; stages 2 and
// 3 would part with gradient accumulation: their partitions add in bf16, the tier in fp32.)
struct DeviceBf16Case {
  const char* name;
  const char* args;
  const char* formula;
};

void PrintTo(const DeviceBf16Case& c, std::ostream* os) { *os << c.name; }

class Bf16MastersOnTheDevice : public ::testing::TestWithParam<DeviceBf16Case> {};

INSTANTIATE_TEST_SUITE_P(
    Stages, Bf16MastersOnTheDevice,
    ::testing::Values(DeviceBf16Case{"Stage1Accumulating",
                                     "--nproc 2 --set zero.stage=1 --set train_micro_batch_size_per_gpu=1 "
                                     "--set gradient_accumulation_steps=2",
                                     "4Ψ+6Ψ/N"},
                      DeviceBf16Case{"Stage2ThreeRanks",
                                     "--nproc 3 --set zero.stage=2 --set train_micro_batch_size_per_gpu=2", "2Ψ+8Ψ/N"},
                      DeviceBf16Case{"Stage3SubGroups",
                                     "--nproc 2 --set zero.stage=3 --set train_micro_batch_size_per_gpu=2 "
                                     "--set zero.stage3_param_persistence_threshold=40 --set zero.sub_group_size=3000",
                                     "8Ψ/N"}),
    [](const ::testing::TestParamInfo<DeviceBf16Case>& c) { return std::string(c.param.name); });

TEST_P(Bf16MastersOnTheDevice, EqualTheCpuTiersBitForBitInFewerBytes) {
  const DeviceBf16Case& c = GetParam();
  ScratchDir dir;
  const std::string args = std::string(c.args) +
                           " --set bf16.enabled=true --set bf16.master_weights_and_grads=true "
                           "--set bf16.optimizer_states=true";
  RunOutput device = train(dir, "device", args);
  RunOutput tier = train(dir, "tier", args + kOffload);
  ASSERT_EQ(device.losses.size(), 20u);
  EXPECT_NE(device.err.find("bf16 master weights and optimizer states"), std::string::npos) << device.err;
  EXPECT_EQ(device.losses, tier.losses);
  EXPECT_EQ(weights_mismatch(device, tier, 0, 0), "");
  RunOutput fp32_masters = train(dir, "fp32", std::string(c.args) + " --set bf16.enabled=true");
  EXPECT_NE(device.losses, fp32_masters.losses);  // bf16 masters round every update

  auto states = read_model_states(device);
  const double psi = states["num_params"].get<double>(), n = states["world_size"].get<double>();
  EXPECT_EQ(states["formula_text"], c.formula) << states.dump();
  EXPECT_NEAR(states["ratio"].get<double>(), 1.0, 0.05) << states.dump();
  // The master and Adam's two moments at 2 bytes each (stage 3: the master is the parameter shard).
  const double master = states["measured"]["master"].get<double>(), optimizer = states["measured"]["optimizer"];
  EXPECT_NEAR(optimizer / (4 * psi / n), 1.0, 0.05) << states.dump();
  if (std::string(c.name).rfind("Stage3", 0) == 0) {
    EXPECT_EQ(master, 0.0) << states.dump();
  } else {
    EXPECT_NEAR(master / (2 * psi / n), 1.0, 0.05) << states.dump();
  }
}

// A checkpoint of bf16 masters and moments kept on the device resumes bit for bit, holds fp32 values like any other
// (resumed across fp32 masters both ways), and the CPU tier's bf16 job resumes from it.
TEST(Bf16MastersOnTheDevice, ResumeBitForBitAndAcrossPrecisionsAndTiers) {
  ScratchDir dir;
  const std::string fp32_masters =
      "--nproc 2 --set train_micro_batch_size_per_gpu=2 --set bf16.enabled=true --set zero.stage=2 "
      "--set checkpoint.interval=10";
  const std::string bf16_masters =
      fp32_masters + " --set bf16.master_weights_and_grads=true --set bf16.optimizer_states=true";
  RunOutput full32 = train(dir, "full32", fp32_masters + " --set checkpoint.dir=ckpt32");
  RunOutput full16 = train(dir, "full16", bf16_masters + " --set checkpoint.dir=ckpt16");
  ASSERT_EQ(full16.losses.size(), 20u);
  expect_resume_at_ten_is_bitwise(dir, "resumed16", bf16_masters, "ckpt16", full16);
  // The CPU tier's bf16 masters and moments from the device's checkpoint: the same job, so the same bits.
  expect_resume_at_ten_is_bitwise(dir, "tier16", bf16_masters + kOffload, "ckpt16", full16);

  expect_resumes_across_precisions(dir, bf16_masters, fp32_masters, full16, full32);
}

// ZeRO-Infinity's CPU form: parameters and optimizer offloaded. The 16-bit (here fp32) shards live in the
// tier and come back through one staging buffer per gather in flight (buffer_count = 1 forces every
// prefetch to wait for the gather before it); training equals stage 3 without offload bit for bit, and
// the device side keeps no model state: the tier holds master, Adam states, gradient accumulator and the
// parameter shard, 20 bytes per owned parameter in fp32.
TEST(Offload, StageThreeWithParametersOffloadedTooEqualsNoOffload) {
  ScratchDir dir;
  const std::string args =
      "--nproc 3 --set train_micro_batch_size_per_gpu=1 --set gradient_accumulation_steps=2 "
      "--set zero.stage=3 --set zero.stage3_param_persistence_threshold=40 "
      "--set zero.stage3_prefetch_bucket_size=20000";
  RunOutput plain = train(dir, "plain", args);
  RunOutput offloaded = train(dir, "offloaded",
                              args + kOffload +
                                  " --set zero.offload_param.device=cpu "
                                  "--set zero.offload_param.buffer_count=1");
  EXPECT_EQ(weights_mismatch(offloaded, plain, 0, 0), "");
  EXPECT_EQ(offloaded.losses, plain.losses);
  auto states = read_model_states(offloaded);
  const double psi = states["num_params"].get<double>(), n = 3;
  EXPECT_EQ(states["measured"]["total"].get<double>(), 0.0) << states.dump();
  EXPECT_NEAR(states["offloaded"].get<double>() / (20 * psi / n), 1.0, 0.05) << states.dump();
  EXPECT_GT(states["buffers"].get<double>(), 0.0);  // the staging buffer
}

// Staged copies, the path a GPU job takes (reduced gradients to pinned host memory by copy while backward
// goes on, updated weights back by copy while the next sub-group steps), run on the CPU:
// debug.deferred_device_copies makes the host report device memory of its own and run every copy as late
// as the copy contract allows (at order_compute_after or wait). A stage that reads a copy's destination
// before waiting for it, or rewrites its source before ordering after it, then trains on stale values.
// Each case must equal the same job with immediate copies bit for bit: the additions are the same, in the
// same order, only staged.
struct StagedCase {
  const char* name;
  const char* args;
  const char* offload_only = "";  // settings of the offloaded run alone (its baseline could not take them)
};

void PrintTo(const StagedCase& c, std::ostream* os) { *os << c.name; }

class StagedCopiesEqualDirect : public ::testing::TestWithParam<StagedCase> {};

INSTANTIATE_TEST_SUITE_P(
    Stages, StagedCopiesEqualDirect,
    ::testing::Values(
        // the step in chunks, each copied back while the next steps
        StagedCase{"Stage1TwoRanksChunkedStep",
                   "--nproc 2 --set zero.stage=1 --set train_micro_batch_size_per_gpu=2 "
                   "--set zero.offload_optimizer.step_chunk_size=700"},
        // two buckets alternating: a bucket's copy is in flight while the other fills
        StagedCase{"Stage2ThreeRanksAccumulatingOverlapped",
                   "--nproc 3 --set zero.stage=2 --set train_micro_batch_size_per_gpu=1 "
                   "--set gradient_accumulation_steps=2 --set zero.overlap_comm=true "
                   "--set zero.offload_optimizer.step_chunk_size=1000"},
        // all-reduce: the copy reads the bucket's send buffer, which the next launch rewrites
        StagedCase{"Stage2AllReduceOneRankOwnsLittle",
                   "--nproc 2 --set zero.stage=2 --set zero.reduce_scatter=false --set zero.reduce_bucket_size=500"},
        StagedCase{"Stage3ThreeRanksSubGroupsOverlapped",
                   "--nproc 3 --set zero.stage=3 --set train_micro_batch_size_per_gpu=1 "
                   "--set gradient_accumulation_steps=2 --set zero.overlap_comm=true "
                   "--set zero.stage3_param_persistence_threshold=40 --set zero.sub_group_size=3000 "
                   "--set zero.offload_optimizer.step_chunk_size=1000"},
        StagedCase{"Stage3ParametersOffloadedOneBuffer",
                   "--nproc 2 --set zero.stage=3 --set zero.stage3_param_persistence_threshold=40 "
                   "--set zero.offload_param.device=cpu --set zero.offload_param.buffer_count=1"},
        // several loads in flight, each ordered before its gather without the host waiting
        StagedCase{"Stage3ParametersOffloadedPrefetching",
                   "--nproc 2 --set zero.stage=3 --set zero.stage3_param_persistence_threshold=40 "
                   "--set zero.stage3_prefetch_bucket_size=20000 --set zero.offload_param.device=cpu "
                   "--set zero.offload_param.buffer_count=3"},
        // 16-bit gradients staged, added into the fp32 accumulator on the host
        StagedCase{"Stage2Bf16", "--nproc 2 --set zero.stage=2 --set bf16.enabled=true"},
        StagedCase{"Stage3Bf16", "--nproc 2 --set zero.stage=3 --set bf16.enabled=true --set zero.sub_group_size=3000"},
        // the delayed update (Note [Delayed parameter update]): the step in flight writes pinned host buffers,
        // copied to the device at the next boundary, extrapolated ones included
        StagedCase{"Stage2DelayedUpdateExtrapolated",
                   "--nproc 2 --set zero.stage=2 --set zero.offload_optimizer.delayed_update=true "
                   "--set zero.offload_optimizer.delayed_update_start_step=2 "
                   "--set experimental.delayed_update_extrapolation=1.5"},
        StagedCase{"Stage3DelayedUpdateExtrapolatedBf16",
                   "--nproc 2 --set zero.stage=3 --set bf16.enabled=true --set zero.sub_group_size=3000 "
                   "--set zero.stage3_param_persistence_threshold=40 --set zero.offload_optimizer.delayed_update=true "
                   "--set zero.offload_optimizer.delayed_update_start_step=2 "
                   "--set experimental.delayed_update_extrapolation=1.5"},
        // the lookahead completes the prediction in fp32 at the boundary and casts it there
        StagedCase{
            "Stage2DelayedUpdateLookaheadBf16",
            "--nproc 2 --set zero.stage=2 --set bf16.enabled=true --set zero.offload_optimizer.delayed_update=true "
            "--set zero.offload_optimizer.delayed_update_start_step=2 "
            "--set experimental.delayed_update_extrapolation=1.2 "
            "--set experimental.delayed_update_lookahead=0.1"}),
    [](const ::testing::TestParamInfo<StagedCase>& c) { return std::string(c.param.name); });

TEST_P(StagedCopiesEqualDirect, BitForBit) {
  ScratchDir dir;
  const std::string args = std::string(GetParam().args) + kOffload;
  RunOutput direct = train(dir, "direct", args);
  RunOutput staged = train(dir, "staged", args + " --set debug.deferred_device_copies=true");
  EXPECT_NE(staged.err.find("debug.deferred_device_copies: host-device copies"), std::string::npos) << staged.err;
  EXPECT_EQ(staged.err.find("never completed"), std::string::npos) << staged.err;
  EXPECT_EQ(weights_mismatch(staged, direct, 0, 0), "");
  expect_losses_near(staged, direct, 0);
}

// On a GPU (skipped, saying so, without one): the same staging over CUDA copy streams and pinned memory,
// one rank (NCCL does not put two ranks on one GPU), fp32, against the same stage without offload.
// Tolerance 1e-5 rather than the CPU's 1e-6: CUDA's embedding backward adds with atomics, so two identical
// CUDA runs already differ in their last bits.
class OffloadOnCuda : public ::testing::TestWithParam<StagedCase> {};

INSTANTIATE_TEST_SUITE_P(
    Stages, OffloadOnCuda,
    ::testing::Values(StagedCase{"Stage1", "--set zero.stage=1"},
                      StagedCase{"Stage2Overlapped",
                                 "--set zero.stage=2 --set zero.overlap_comm=true "
                                 "--set gradient_accumulation_steps=2"},
                      StagedCase{"Stage3SubGroups",
                                 "--set zero.stage=3 --set zero.sub_group_size=3000 "
                                 "--set zero.stage3_param_persistence_threshold=40"},
                      // the baseline keeps its parameters on the GPU: offload_param needs offload_optimizer
                      StagedCase{"Stage3ParametersOffloaded",
                                 "--set zero.stage=3 --set zero.stage3_param_persistence_threshold=40",
                                 " --set zero.offload_param.device=cpu --set zero.offload_param.buffer_count=2"}),
    [](const ::testing::TestParamInfo<StagedCase>& c) { return std::string(c.param.name); });

TEST_P(OffloadOnCuda, EqualsNoOffloadWithPinnedStaging) {
  if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device on this machine";
  ScratchDir dir;
  const std::string args = std::string("--nproc 1 --set run.device=cuda ") + GetParam().args;
  RunOutput plain = run(dir, "plain", args);
  if (built_without_cuda(plain)) GTEST_SKIP() << "this zhost was built without CUDA";
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  RunOutput offloaded = train(
      dir, "offloaded", args + kOffload + " --set zero.offload_optimizer.pin_memory=true" + GetParam().offload_only);
  EXPECT_EQ(weights_norm_mismatch(offloaded, plain, 1e-5), "");
  expect_losses_near(offloaded, plain, 1e-5);
}

TEST(Offload, SgdIsRefusedWithWhatToDo) {
  ScratchDir dir;
  RunOutput r = run_zhost(dir.path(), small_job_config(), "sgd",
                          "--set zero.stage=2 --set optimizer.type=SGD --set zero.offload_optimizer.device=cpu");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("offload_cpu runs AdamW, Adam and Lion"), std::string::npos) << r.err;
}

}  // namespace
