// tests/zero/composed_offload_test.cpp: a composed tier pair (docs/abi.md "Tier composition") through the
// real zhost executable and plugin files: the CPU tier runs the optimizer while the fp32 master weights and
// Adam states live in examples/plugins/hello_tier, a storage-only third-party tier
// (zero.offload_optimizer.storage = "hello"), loaded into the CPU tier's staging chunk by chunk for each step
// and stored back. The CPU tier runs the same kernel on the same values in the same order whether the
// states are resident or stored, so the job equals plain CPU offload bit for bit: every weight and every
// loss, stages 1, 2 and 3, one and two ranks. A chunk of 1000 elements makes each group span several chunks
// and ranges cross chunk borders.
#include <gtest/gtest.h>

#include <fstream>
#include <ostream>
#include <string>

#include "tests/support/scratch_dir.hpp"
#include "tests/training/training_test_support.hpp"

using namespace zhost::testing;

namespace {

RunOutput train(const ScratchDir& dir, const std::string& name, const std::string& args) {
  RunOutput r = run_zhost(dir.path(), small_job_config(), name,
                          "--set model.type=llama --set steps=12 --set zero.reduce_bucket_size=3000 "
                          "--set zero.offload_optimizer.device=cpu --set offload_cpu.threads=1 " +
                              args);
  EXPECT_EQ(r.exit_code, 0) << name << ":\n" << r.err << r.out;
  return r;
}

const std::string kOverHello =
    " --plugin-path " HELLO_TIER_DIR
    " --set zero.offload_optimizer.storage=hello --set offload_cpu.storage_chunk_elements=1000";

struct Case {
  const char* name;
  const char* args;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class CpuOverStorageTier : public ::testing::TestWithParam<Case> {};

INSTANTIATE_TEST_SUITE_P(
    StagesAndRanks, CpuOverStorageTier,
    ::testing::Values(Case{"Stage1OneRank", "--nproc 1 --set zero.stage=1 --set train_micro_batch_size_per_gpu=2"},
                      Case{"Stage2TwoRanksAccumulating",
                           "--nproc 2 --set zero.stage=2 --set train_micro_batch_size_per_gpu=1 "
                           "--set gradient_accumulation_steps=2"},
                      // several sub-groups, each an optimizer group of the CPU tier
                      Case{"Stage3TwoRanks",
                           "--nproc 2 --set zero.stage=3 --set train_micro_batch_size_per_gpu=1 "
                           "--set zero.stage3_param_persistence_threshold=40 --set zero.sub_group_size=3000"}),
    [](const ::testing::TestParamInfo<Case>& c) { return std::string(c.param.name); });

TEST_P(CpuOverStorageTier, EqualsPlainCpuOffloadBitForBit) {
  ScratchDir dir;
  RunOutput plain = train(dir, "plain", GetParam().args);
  RunOutput composed = train(dir, "composed", GetParam().args + kOverHello);
  const std::string log = composed.out + composed.err;
  EXPECT_NE(log.find("optimizer states kept in storage tier 'hello_tier'"), std::string::npos) << log;
  ASSERT_EQ(plain.losses.size(), 12u);
  EXPECT_EQ(composed.losses, plain.losses);
  EXPECT_EQ(weights_mismatch(composed, plain, 0, 0), "");
}

// With the delayed parameter update, the CPU tier's step stores into hello_tier on its own thread while the
// next step trains. The host's per-step memory figures must not call the storing tier then (docs/abi.md §3:
// one call at a time, which hello_tier enforces): the job runs, its figures count the tier's bytes, and it
// equals the delayed job over plain CPU offload bit for bit. (With the host calling the tier regardless, 4
// runs in 4 of this job failed with hello_tier's error: at this width the tier's step runs into the next.)
TEST(CpuOverStorageTier, DelayedUpdateNeverCallsTheStoringTierConcurrently) {
  ScratchDir dir;
  const std::string delayed =
      "--nproc 2 --set zero.stage=2 --set model.type=gpt --set model.width=128 --set steps=24 --set "
      "memory_breakdown=true "
      "--set steps_per_print=1 --set zero.offload_optimizer.delayed_update=true "
      "--set zero.offload_optimizer.delayed_update_start_step=2";
  RunOutput plain = train(dir, "plain", delayed);
  RunOutput composed = train(dir, "composed", delayed + kOverHello);
  EXPECT_EQ(composed.err.find("called while another of its calls ran"), std::string::npos) << composed.err;
  ASSERT_EQ(plain.losses.size(), 24u);
  EXPECT_EQ(composed.losses, plain.losses);
  EXPECT_EQ(weights_mismatch(composed, plain, 0, 0), "");
  // Every step's record counts the states hello_tier holds (metrics.jsonl's tier_nvme: storage of its own).
  std::ifstream metrics(composed.run_dir / "metrics.jsonl");
  size_t counted = 0;
  for (std::string line; std::getline(metrics, line);) {
    if (line.find("\"step\"") == std::string::npos) continue;
    const size_t at = line.find("\"tier_nvme\":");
    ASSERT_NE(at, std::string::npos) << line;
    EXPECT_GT(std::stod(line.substr(at + 12)), 0.0) << line;
    ++counted;
  }
  EXPECT_GE(counted, 24u);
}

}  // namespace
