// tests/zero/storage_swap_test.cpp: hot swap of the storage under the CPU tier's optimizer in running jobs
// (Note [Storage swap], host/engine/storage_swap.hpp), through the real zhost executable and plugin files:
// - a schedule cpu -> nvme -> hello_tier -> cpu ends bit for bit where the job without swaps ends, stages 1-3,
//   1-3 ranks (the CPU tier runs the same kernel on the same values wherever the states are kept);
// - swaps that fail (a full disk, a tier that fills up half way, a plugin of another ABI) leave the job on its
//   storage, bit for bit equal to the job that never tried;
// - `zhost control RUN_DIR swap` swaps a running job, also into a tier built after the job started, and says
//   clearly when there is no job, the command is malformed, or two commands race (Note [Control channel]);
// - with the delayed parameter update, a swap (scheduled or by `zhost control`) drains the step in flight first,
//   exactly where a checkpoint save would (the jobs equal bit for bit).
// - at a step boundary the checkpoint comes first, then the step's line, then the swap (Note [Step observers]).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/loop_disks.hpp"
#include "tests/support/scratch_dir.hpp"
#include "tests/training/training_test_support.hpp"

using namespace zhost::testing;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::string kBase =
    "--set steps=20 --set model.type=llama --set zero.offload_optimizer.device=cpu --set offload_cpu.threads=1 "
    "--set offload_cpu.storage_chunk_elements=1000 --set zero.reduce_bucket_size=3000 --plugin-path " HELLO_TIER_DIR;

std::vector<json> json_lines(const fs::path& file) {
  std::vector<json> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(json::parse(line));
  return lines;
}

// metrics.jsonl's optimizer_storage of every step.
// Each step's storage as metrics.jsonl records it: `field` is optimizer_storage or param_storage.
std::vector<std::string> storages(const RunOutput& run, const char* field = "optimizer_storage") {
  std::vector<std::string> out;
  for (const json& record : json_lines(run.run_dir / "metrics.jsonl"))
    out.push_back(record.value(field, std::string("?")));
  return out;
}

// The job of `args` without swaps, and with `schedule_key` = cpu -> nvme -> hello -> cpu after steps 5, 10 and 15
// (the NVMe folder `nvme_key` = DIR/nvme): both run 20 steps, and end bit for bit alike. Returns the swapped run.
RunOutput expect_swaps_change_no_bit(const ScratchDir& dir, const std::string& args, const std::string& schedule_key,
                                     const std::string& nvme_key) {
  fs::create_directories(dir.path() / "nvme");
  RunOutput plain = run_zhost(dir.path(), small_job_config(), "plain", args);
  RunOutput swapped = run_zhost(dir.path(), small_job_config(), "swapped",
                                args + " --set " + nvme_key + "=" + (dir.path() / "nvme").string() + " --set '" +
                                    schedule_key + "=[\"5:nvme\",\"10:hello\",\"15:cpu\"]'");
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(swapped.exit_code, 0) << swapped.err;
  EXPECT_EQ(plain.losses.size(), 20u);
  EXPECT_EQ(swapped.losses, plain.losses);
  EXPECT_EQ(weights_mismatch(swapped, plain, 0, 0), "");
  return swapped;
}

struct Command {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Command zhost(const std::string& args) {
  Command c;
  FILE* pipe = ::popen((std::string(ZHOST_EXE) + " " + args + " 2>&1").c_str(), "r");
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;) c.output.append(buffer, n);
  const int status = ::pclose(pipe);
  c.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return c;
}

struct Case {
  const char* name;
  const char* args;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class SwapSchedule : public ::testing::TestWithParam<Case> {};
INSTANTIATE_TEST_SUITE_P(
    StagesAndRanks, SwapSchedule,
    ::testing::Values(Case{"Stage1OneRank", "--nproc 1 --set zero.stage=1 --set train_micro_batch_size_per_gpu=2"},
                      Case{"Stage2TwoRanksAccumulating",
                           "--nproc 2 --set zero.stage=2 --set train_micro_batch_size_per_gpu=1 "
                           "--set gradient_accumulation_steps=2"},
                      Case{"Stage3ThreeRanks",
                           "--nproc 3 --set zero.stage=3 --set train_micro_batch_size_per_gpu=1 "
                           "--set zero.stage3_param_persistence_threshold=40 --set zero.sub_group_size=3000"}),
    [](const ::testing::TestParamInfo<Case>& c) { return std::string(c.param.name); });

TEST_P(SwapSchedule, CpuNvmeHelloCpuEqualsTheJobWithoutSwapsBitForBit) {
  ScratchDir dir;
  const RunOutput swapped = expect_swaps_change_no_bit(
      dir, kBase + " " + GetParam().args, "zero.offload_optimizer.swap_schedule", "zero.offload_optimizer.nvme_path");
  if (HasFailure()) return;

  const std::vector<json> swaps = json_lines(swapped.run_dir / "swaps.jsonl");
  ASSERT_EQ(swaps.size(), 3u);
  const char* expected[][2] = {{"cpu", "nvme"}, {"nvme", "hello"}, {"hello", "cpu"}};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(swaps[i].value("ok", false)) << swaps[i];
    EXPECT_EQ(swaps[i]["after_step"], 5 * static_cast<int>(i + 1)) << swaps[i];
    EXPECT_EQ(swaps[i]["from"], expected[i][0]) << swaps[i];
    EXPECT_EQ(swaps[i]["to"], expected[i][1]) << swaps[i];
    EXPECT_GT(swaps[i].value("bytes", 0), 0) << swaps[i];
  }
  // Steps 1-5 ran with the states in host memory, 6-10 on NVMe, 11-15 in hello_tier, 16-20 in host memory.
  std::vector<std::string> expected_storages;
  for (const char* storage : {"cpu", "nvme", "hello", "cpu"})
    expected_storages.insert(expected_storages.end(), 5, storage);
  EXPECT_EQ(storages(swapped), expected_storages);
  EXPECT_TRUE(fs::is_empty(dir.path() / "nvme")) << "the NVMe tier swapped out left its files behind";

  // zhost report compares step time per storage (steps after the first), and lists the swaps.
  if (std::string(GetParam().name) != "Stage1OneRank") return;
  const fs::path html = dir.path() / "report.html";
  const Command report = zhost("report " + swapped.run_dir.string() + " -o " + html.string());
  ASSERT_EQ(report.exit_code, 0) << report.output;
  std::ifstream in(html);
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("Step time by optimizer storage"), std::string::npos);
  EXPECT_NE(page.find("<h2>Tier swaps: step time by storage: swapped</h2><img class=\"plot\""), std::string::npos);
  EXPECT_NE(page.find("<tr><td>cpu</td><td>9</td>"), std::string::npos) << "steps 2-5 and 16-20";
  EXPECT_NE(page.find("<tr><td>nvme</td><td>5</td>"), std::string::npos);
  EXPECT_NE(page.find("<tr><td>hello</td><td>5</td>"), std::string::npos);
  EXPECT_NE(page.find("<td>15</td><td>hello</td><td>cpu</td><td>schedule</td>"), std::string::npos);
}

// The order of a step boundary (Note [Step observers], host/engine/observers/step_observer.hpp), as rank 0's
// run.log shows it: after step 2 the checkpoint is saved, then the step's line is logged, then the storage swaps;
// the swap after step 3 (no line) comes before step 4's checkpoint and line.
TEST(StepBoundary, TheCheckpointThenTheStepLineThenTheSwap) {
  ScratchDir dir;
  const RunOutput run =
      run_zhost(dir.path(), small_job_config(), "ordered",
                "--nproc 1 --set steps=4 --set steps_per_print=2 --set model.type=llama --set zero.stage=1 "
                "--set zero.offload_optimizer.device=cpu --set offload_cpu.threads=1 --set checkpoint.interval=2 "
                "--set checkpoint.dir=ckpt --set 'zero.offload_optimizer.swap_schedule=[\"2:hello\",\"3:cpu\"]' "
                "--plugin-path " HELLO_TIER_DIR);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string log = read_text_file(run.run_dir / "run.log");
  const std::vector<std::string> in_order = {"checkpoint of step 2 saved",
                                             "step 2/4 loss",
                                             "optimizer states moved from 'cpu' to 'hello' after step 2",
                                             "optimizer states moved from 'hello' to 'cpu' after step 3",
                                             "checkpoint of step 4 saved",
                                             "step 4/4 loss"};
  size_t previous = 0;
  for (const std::string& text : in_order) {
    const size_t at = log.find(text);
    ASSERT_NE(at, std::string::npos) << "no '" << text << "' in run.log:\n" << log;
    EXPECT_GT(at, previous) << "'" << text << "' is out of order in run.log:\n" << log;
    previous = at;
  }
}

// Stage 3's parameter shards, offloaded to the CPU tier, move cpu -> nvme -> hello_tier -> cpu (the partition's
// move_param_storage): the job equals the same job without swaps bit for bit.
TEST(SwapParamSchedule, Stage3ShardsCpuNvmeHelloCpuEqualTheJobWithoutSwapsBitForBit) {
  ScratchDir dir;
  const std::string args = kBase +
                           " --nproc 2 --set zero.stage=3 --set train_micro_batch_size_per_gpu=1 "
                           "--set zero.stage3_param_persistence_threshold=40 --set zero.sub_group_size=3000 "
                           "--set zero.offload_param.device=cpu";
  const RunOutput swapped =
      expect_swaps_change_no_bit(dir, args, "zero.offload_param.swap_schedule", "zero.offload_param.nvme_path");
  if (HasFailure()) return;
  const std::vector<json> swaps = json_lines(swapped.run_dir / "swaps.jsonl");
  ASSERT_EQ(swaps.size(), 3u);
  for (const json& swap : swaps) {
    EXPECT_TRUE(swap.value("ok", false)) << swap;
    EXPECT_EQ(swap["role"], "param") << swap;
    EXPECT_GT(swap.value("bytes", 0), 0) << swap;
  }
  std::vector<std::string> expected;
  for (const char* storage : {"cpu", "nvme", "hello", "cpu"}) expected.insert(expected.end(), 5, storage);
  EXPECT_EQ(storages(swapped, "param_storage"), expected);
  EXPECT_NE(swapped.err.find("parameter shards moved from 'nvme' to 'hello' after step 10"), std::string::npos)
      << swapped.err;
  EXPECT_TRUE(fs::is_empty(dir.path() / "nvme")) << "the NVMe tier swapped out left its files behind";
}

// A larger llama (about 5.6 MB of fp32 master and Adam states on one rank), so that a small disk or a small
// hello_tier fills up in the middle of the copy.
const std::string kLarger =
    kBase + " --set model.width=128 --set steps=8 --set offload_cpu.storage_chunk_elements=65536";

// ---- with the delayed parameter update -----------------------------------------------------------------

// zero.offload_optimizer.delayed_update: the tier's step of step N still runs when step() returns, so the step
// before a swap drains it (ZHOST_EXT_DRAIN), as a checkpoint save does (Note [Delayed parameter update]). Swaps
// after steps 5, 10 and 15 therefore equal, bit for bit, the delayed job that saves after steps 5, 10 and 15 (its
// extrapolated weights too), and differ from the delayed job that never drains.
const std::string kDelayedFrom3 =
    " --set zero.offload_optimizer.delayed_update=true --set zero.offload_optimizer.delayed_update_start_step=3 "
    "--set experimental.delayed_update_extrapolation=1.5";

class DelayedUpdateSwap : public ::testing::TestWithParam<Case> {};
INSTANTIATE_TEST_SUITE_P(Stages, DelayedUpdateSwap,
                         ::testing::Values(Case{"Stage2", "--set zero.stage=2"},
                                           Case{"Stage3",
                                                "--set zero.stage=3 --set zero.stage3_param_persistence_threshold=40 "
                                                "--set zero.sub_group_size=3000"}),
                         [](const ::testing::TestParamInfo<Case>& c) { return std::string(c.param.name); });

TEST_P(DelayedUpdateSwap, ScheduledSwapsDrainTheStepInFlightAsACheckpointDoes) {
  ScratchDir dir;
  fs::create_directories(dir.path() / "nvme");
  const std::string args =
      kBase + " --nproc 2 --set train_micro_batch_size_per_gpu=1 " + GetParam().args + kDelayedFrom3;
  RunOutput delayed = run_zhost(dir.path(), small_job_config(), "delayed", args);
  RunOutput saving = run_zhost(dir.path(), small_job_config(), "saving",
                               args + " --set checkpoint.interval=5 --set checkpoint.dir=ckpt");
  RunOutput swapped =
      run_zhost(dir.path(), small_job_config(), "swapped",
                args + " --set zero.offload_optimizer.nvme_path=" + (dir.path() / "nvme").string() +
                    " --set 'zero.offload_optimizer.swap_schedule=[\"5:nvme\",\"10:hello\",\"15:cpu\"]'");
  for (const RunOutput* run : {&delayed, &saving, &swapped}) ASSERT_EQ(run->exit_code, 0) << run->err;
  ASSERT_EQ(swapped.losses.size(), 20u);
  EXPECT_EQ(swapped.losses, saving.losses);
  EXPECT_EQ(weights_mismatch(swapped, saving, 0, 0), "");
  // Steps 1-5 read the same weights in all three; step 6 reads W_5 after a drain, E_4 without one.
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(swapped.losses[i], delayed.losses[i]) << "step " << i + 1;
  EXPECT_NE(swapped.losses[5], delayed.losses[5]) << "no drain before the swap after step 5";
  const std::vector<json> swaps = json_lines(swapped.run_dir / "swaps.jsonl");
  ASSERT_EQ(swaps.size(), 3u);
  for (const json& swap : swaps) EXPECT_TRUE(swap.value("ok", false)) << swap;
  EXPECT_EQ(storages(swapped)[5], "nvme");
  EXPECT_TRUE(fs::is_empty(dir.path() / "nvme")) << "the NVMe tier swapped out left its files behind";
}

// The job trained on without moving, equal to `plain`; swaps.jsonl holds the failure, matching `reason`. The
// FailedSwap jobs set run.memory_check = false: with it, the tiers' own checks (Note [Plugin config checks]) refuse
// a schedule whose storage cannot hold the states before the job starts, and these tests are about a swap that
// fails while the job runs (a disk that another process filled, a tier that fills up).
void expect_stayed(const RunOutput& plain, const RunOutput& tried, const std::string& reason) {
  ASSERT_EQ(tried.exit_code, 0) << tried.err;
  EXPECT_EQ(tried.losses, plain.losses);
  EXPECT_EQ(weights_mismatch(tried, plain, 0, 0), "");
  const std::vector<json> swaps = json_lines(tried.run_dir / "swaps.jsonl");
  ASSERT_EQ(swaps.size(), 1u);
  EXPECT_FALSE(swaps[0].value("ok", true));
  EXPECT_NE(swaps[0].value("error", std::string()).find(reason), std::string::npos) << swaps[0];
  EXPECT_NE(tried.err.find("optimizer states not moved to"), std::string::npos) << tried.err;
  EXPECT_NE(tried.err.find("training goes on with them in 'cpu'"), std::string::npos) << tried.err;
  for (const std::string& storage : storages(tried)) EXPECT_EQ(storage, "cpu");
}

TEST(FailedSwap, IntoAFullDiskLeavesBothRanksOnTheirStorage) {
  ScratchDir dir;
  SmallDisk disk(dir.path(), 4);  // about 2.5 MB free; the two ranks' states need about 5.6 MB together
  if (!disk.mounted()) GTEST_SKIP() << "no loop mount here (needs root, mkfs.ext4 and a loop device)";
  const std::string args = kLarger + " --nproc 2 --set zero.stage=2 --set train_micro_batch_size_per_gpu=1";
  RunOutput plain = run_zhost(dir.path(), small_job_config(), "plain", args);
  RunOutput tried =
      run_zhost(dir.path(), small_job_config(), "tried",
                args + " --set zero.offload_optimizer.nvme_path=" + disk.path().string() +
                    " --set 'zero.offload_optimizer.swap_schedule=[\"3:nvme\"]' --set run.memory_check=false");
  expect_stayed(plain, tried, "offload_nvme");
  EXPECT_EQ(std::distance(fs::directory_iterator(disk.path()), fs::directory_iterator()), 1)
      << "files left on the disk";
}

TEST(FailedSwap, ParameterShardsIntoAFullDiskStayInTheCpuTier) {
  ScratchDir dir;
  SmallDisk disk(dir.path(), 4);  // about 2.5 MB free; the shards of a width-256 llama are about 6.5 MB
  if (!disk.mounted()) GTEST_SKIP() << "no loop mount here (needs root, mkfs.ext4 and a loop device)";
  const std::string args = kLarger +
                           " --set model.width=256 --nproc 2 --set zero.stage=3 --set train_micro_batch_size_per_gpu=1 "
                           "--set zero.offload_param.device=cpu";
  RunOutput plain = run_zhost(dir.path(), small_job_config(), "plain", args);
  RunOutput tried =
      run_zhost(dir.path(), small_job_config(), "tried",
                args + " --set zero.offload_param.nvme_path=" + disk.path().string() +
                    " --set 'zero.offload_param.swap_schedule=[\"3:nvme\"]' --set run.memory_check=false");
  ASSERT_EQ(tried.exit_code, 0) << tried.err;
  EXPECT_EQ(tried.losses, plain.losses);
  EXPECT_EQ(weights_mismatch(tried, plain, 0, 0), "");
  const std::vector<json> swaps = json_lines(tried.run_dir / "swaps.jsonl");
  ASSERT_EQ(swaps.size(), 1u);
  EXPECT_FALSE(swaps[0].value("ok", true));
  EXPECT_EQ(swaps[0]["role"], "param");
  EXPECT_NE(tried.err.find("parameter shards not moved to 'nvme' after step 3"), std::string::npos) << tried.err;
  for (const json& record : json_lines(tried.run_dir / "metrics.jsonl"))
    EXPECT_EQ(record.value("param_storage", std::string()), "cpu");
  EXPECT_EQ(std::distance(fs::directory_iterator(disk.path()), fs::directory_iterator()), 1)
      << "files left on the disk";
}

TEST(FailedSwap, IntoATierThatFillsUpHalfWayLeavesTheJobOnItsStorage) {
  ScratchDir dir;
  const std::string args = kLarger + " --nproc 1 --set zero.stage=1 --set train_micro_batch_size_per_gpu=2";
  RunOutput plain = run_zhost(dir.path(), small_job_config(), "plain", args);
  RunOutput tried = run_zhost(dir.path(), small_job_config(), "tried",
                              args +
                                  " --set hello_tier.capacity_mb=2 --set "
                                  "'zero.offload_optimizer.swap_schedule=[\"3:hello\"]' --set run.memory_check=false");
  expect_stayed(plain, tried, "hello_tier is full");
}

// ---- zhost control ---------------------------------------------------------------------------------------

// A running 2-rank stage 2 job with CPU offload whose search path has an empty folder, DIR/late, to which tests
// copy plugins after it started.
class RunningJob {
 public:
  // `sets`: more --set KEY=VALUE for the job.
  explicit RunningJob(const ScratchDir& dir, const std::vector<std::string>& sets = {})
      : late_(dir.path() / "late"), run_dir_(dir.path() / "runs" / "long"), job_(dir, 2, job_sets(dir, sets)) {}
  bool start() { return job_.wait_for_training(); }
  std::string control(const std::string& args) const { return "control swap " + run_dir_.string() + " " + args; }
  const fs::path& late() const { return late_; }
  const fs::path& run_dir() const { return run_dir_; }
  size_t steps() const { return json_lines(run_dir_ / "metrics.jsonl").size(); }
  BackgroundJob& job() { return job_; }
  // The job's settings (BackgroundJob adds steps, the run folder and micro-batches of 1).
  static std::vector<std::string> job_sets(const ScratchDir& dir, const std::vector<std::string>& more) {
    std::vector<std::string> sets = {"zero.stage=2", "zero.offload_optimizer.device=cpu", "offload_cpu.threads=1",
                                     "plugins.path=[\"" + (dir.path() / "late").string() + "\"]",
                                     "zero.offload_optimizer.nvme_path=" + (dir.path() / "nvme").string()};
    sets.insert(sets.end(), more.begin(), more.end());
    return sets;
  }

 private:
  fs::path late_, run_dir_;
  BackgroundJob job_;
};

// The folders exist before the job starts (config check wants nvme_path to be one).
struct Folders {
  explicit Folders(const ScratchDir& dir) {
    fs::create_directories(dir.path() / "late");
    fs::create_directories(dir.path() / "nvme");
  }
};

TEST(ControlSwap, MovesARunningJobIntoATierBuiltAfterItStartedAndBack) {
  ScratchDir dir;
  Folders folders(dir);
  RunningJob job(dir);
  ASSERT_TRUE(job.start()) << job.job().err();
  // hello_tier was not on the job's search path at start: it is found, negotiated and created at the swap.
  fs::copy_file(fs::path(HELLO_TIER_DIR) / "zhost_hello_tier.so", job.late() / "zhost_hello_tier.so");
  Command hello = zhost(job.control("--optimizer hello"));
  EXPECT_EQ(hello.exit_code, 0) << hello.output;
  EXPECT_NE(hello.output.find("accepted: the job acts on it after step"), std::string::npos) << hello.output;
  EXPECT_NE(hello.output.find("moved from 'cpu' to 'hello'"), std::string::npos) << hello.output;
  Command nvme = zhost(job.control("--optimizer nvme"));
  EXPECT_EQ(nvme.exit_code, 0) << nvme.output;
  Command cpu = zhost(job.control("--optimizer cpu"));
  EXPECT_EQ(cpu.exit_code, 0) << cpu.output;
  const std::vector<json> swaps = json_lines(job.run_dir() / "swaps.jsonl");
  ASSERT_EQ(swaps.size(), 3u);
  EXPECT_EQ(swaps[0]["to"], "hello");
  EXPECT_EQ(swaps[1]["to"], "nvme");
  EXPECT_EQ(swaps[2]["to"], "cpu");
  for (const json& swap : swaps) {
    EXPECT_TRUE(swap.value("ok", false)) << swap;
    EXPECT_EQ(swap["origin"].get<std::string>().rfind("control ", 0), 0u) << swap;
  }
  // Each step's record names where the states were; the job is still training.
  bool saw_hello = false;
  for (const json& record : json_lines(job.run_dir() / "metrics.jsonl"))
    saw_hello = saw_hello || record.value("optimizer_storage", std::string()) == "hello";
  EXPECT_TRUE(saw_hello);
  const size_t before = job.steps();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_GT(job.steps(), before) << "the job stopped training";
}

TEST(ControlSwap, APluginOfAnotherAbiIsRefusedAndTheJobTrainsOn) {
  ScratchDir dir;
  Folders folders(dir);
  RunningJob job(dir);
  ASSERT_TRUE(job.start()) << job.job().err();
  fs::copy_file(fs::path(NEGOTIATION_PLUGIN_DIR) / "zhost_np_wrong_major.so", job.late() / "zhost_np_wrong_major.so");
  Command swap = zhost(job.control("--optimizer np_wrong_major"));
  EXPECT_EQ(swap.exit_code, 1) << swap.output;
  EXPECT_NE(swap.output.find("the swap failed, and the job goes on as before"), std::string::npos) << swap.output;
  EXPECT_NE(swap.output.find("zhost_np_wrong_major.so"), std::string::npos) << swap.output;
  EXPECT_NE(swap.output.find("major"), std::string::npos) << swap.output;
  Command unknown = zhost(job.control("--optimizer nosuch"));
  EXPECT_EQ(unknown.exit_code, 1) << unknown.output;
  EXPECT_NE(unknown.output.find("no plugin provides 'offload:nosuch'"), std::string::npos) << unknown.output;
  const size_t before = job.steps();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_GT(job.steps(), before) << "the job stopped training";
  for (const json& swap_line : json_lines(job.run_dir() / "swaps.jsonl")) EXPECT_FALSE(swap_line.value("ok", true));
}

TEST(ControlSwap, RacingCommandsAreServedOneAfterTheOther) {
  ScratchDir dir;
  Folders folders(dir);
  RunningJob job(dir);
  ASSERT_TRUE(job.start()) << job.job().err();
  Command first, second;
  std::thread a([&] { first = zhost(job.control("--optimizer nvme")); });
  std::thread b([&] { second = zhost(job.control("--optimizer cpu")); });
  a.join();
  b.join();
  const std::vector<json> swaps = json_lines(job.run_dir() / "swaps.jsonl");
  ASSERT_EQ(swaps.size(), 2u);
  EXPECT_NE(swaps[0]["origin"], swaps[1]["origin"]);
  // Served one after the other, in request order, whichever arrived first. The states start in host
  // memory: "nvme" first moves them and "cpu" then moves them back; "cpu" first is refused (the states are
  // there already: exit 1, the job stays) and "nvme" then moves them.
  const bool cpu_first = swaps[0]["to"] == "cpu";
  EXPECT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(second.exit_code, cpu_first ? 1 : 0) << second.output;
  EXPECT_EQ(swaps[0]["ok"], !cpu_first);
  EXPECT_EQ(swaps[1]["ok"], true);
  EXPECT_EQ(swaps[1]["from"], cpu_first ? swaps[0]["from"] : swaps[0]["to"]);
  EXPECT_LE(swaps[0]["after_step"].get<int>(), swaps[1]["after_step"].get<int>());
  EXPECT_LT(swaps[0]["origin"].get<std::string>(), swaps[1]["origin"].get<std::string>());
}

// A control request reaches the ranks with the loss of a step whose tier step still runs: it is served one step
// later, after a step that drained. The job that swapped after step N (swaps.jsonl) thus equals, bit for bit, the
// same job that saves a checkpoint after step N (the scheduler does not depend on the job's length).
TEST(ControlSwap, ADelayedUpdateJobDrainsTheNextStepAndSwapsAfterIt) {
  ScratchDir dir;
  Folders folders(dir);
  const std::vector<std::string> delayed = {"zero.offload_optimizer.delayed_update=true",
                                            "zero.offload_optimizer.delayed_update_start_step=1"};
  RunningJob job(dir, delayed);
  ASSERT_TRUE(job.start()) << job.job().err();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (job.steps() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const Command nvme = zhost(job.control("--optimizer nvme"));
  ASSERT_EQ(nvme.exit_code, 0) << nvme.output;
  EXPECT_NE(nvme.output.find("moved from 'cpu' to 'nvme'"), std::string::npos) << nvme.output;
  const std::vector<json> swaps = json_lines(job.run_dir() / "swaps.jsonl");
  ASSERT_EQ(swaps.size(), 1u);
  const int after = swaps[0]["after_step"].get<int>();
  ASSERT_GE(after, 4) << "seen after step 3 at the earliest, served a step later";
  while (job.steps() < static_cast<size_t>(after + 2) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::vector<double> losses;
  for (const json& record : json_lines(job.run_dir() / "metrics.jsonl")) losses.push_back(record["loss"]);
  ASSERT_GE(losses.size(), static_cast<size_t>(after + 2)) << "the job stopped training";

  std::string args = "--nproc 2 --set train_micro_batch_size_per_gpu=1 --set steps=" + std::to_string(after + 2) +
                     " --set checkpoint.interval=" + std::to_string(after) + " --set checkpoint.dir=ckpt";
  for (const std::string& set : RunningJob::job_sets(dir, delayed)) args += " --set '" + set + "'";
  const RunOutput saving = run_zhost(dir.path(), small_job_config(), "saving", args);
  ASSERT_EQ(saving.exit_code, 0) << saving.err;
  ASSERT_EQ(saving.losses.size(), static_cast<size_t>(after + 2));
  losses.resize(saving.losses.size());
  EXPECT_EQ(losses, saving.losses) << "the swap after step " << after << " did not drain exactly there";
}

TEST(ControlSwap, AMalformedRequestIsRefusedAndTheJobTrainsOn) {
  ScratchDir dir;
  Folders folders(dir);
  RunningJob job(dir);
  ASSERT_TRUE(job.start()) << job.job().err();
  std::ofstream(job.run_dir() / "control" / "00000099.request") << "swap to nvme please\n";
  const fs::path ack = job.run_dir() / "control" / "00000099.ack";
  for (int i = 0; i < 500 && !fs::exists(ack); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(fs::exists(ack));
  EXPECT_NE(json_lines(ack)[0].value("error", std::string()).find("not a JSON object"), std::string::npos);
  Command empty = zhost(job.control("--optimizer ''"));
  EXPECT_EQ(empty.exit_code, 2) << empty.output;
  Command both = zhost(job.control("--optimizer cpu --param cpu"));
  EXPECT_EQ(both.exit_code, 2) << both.output;
  // A stage 2 job keeps no parameter shards in a tier: refused at once, with the reason.
  Command param = zhost(job.control("--param nvme"));
  EXPECT_EQ(param.exit_code, 2) << param.output;
  EXPECT_NE(param.output.find("keeps no parameter shards in a tier"), std::string::npos) << param.output;
  // Into the storage the states are in: tried, refused, and the job stays (exit code 1).
  Command same = zhost(job.control("--optimizer cpu"));
  EXPECT_EQ(same.exit_code, 1) << same.output;
  EXPECT_NE(same.output.find("the optimizer's states are kept in 'cpu' already"), std::string::npos) << same.output;
  const size_t before = job.steps();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_GT(job.steps(), before) << "the job stopped training";
}

TEST(ControlSwap, AJobThatEndedOrNoJobAtAllIsAClearError) {
  ScratchDir dir;
  RunOutput done = run_zhost(dir.path(), small_job_config(), "done", kBase + " --set steps=2 --set zero.stage=1");
  ASSERT_EQ(done.exit_code, 0) << done.err;
  Command ended = zhost("control swap " + done.run_dir.string() + " --optimizer cpu");
  EXPECT_EQ(ended.exit_code, 2) << ended.output;
  EXPECT_NE(ended.output.find("is not running (it has ended)"), std::string::npos) << ended.output;
  Command nowhere = zhost("control swap " + dir.path().string() + " --optimizer cpu");
  EXPECT_EQ(nowhere.exit_code, 2) << nowhere.output;
  EXPECT_NE(nowhere.output.find("is not a zhost run directory"), std::string::npos) << nowhere.output;
}

// ---- config check --------------------------------------------------------------------------------------

TEST(SwapScheduleConfig, WhatCannotWorkIsRefusedBeforeTheJobStarts) {
  ScratchDir dir;
  const fs::path config = dir.path() / "job.toml";
  std::ofstream(config) << small_job_config();
  auto check = [&](const std::string& sets) { return zhost("config check " + config.string() + " " + sets); };
  const std::pair<std::string, std::string> cases[] = {
      {"--set zero.stage=2 --set 'zero.offload_optimizer.swap_schedule=[\"3:nvme\"]'",
       "has none; set zero.offload_optimizer.device = \"cpu\""},
      {"--set zero.stage=2 --set zero.offload_optimizer.device=cpu --set "
       "'zero.offload_optimizer.swap_schedule=[\"x:nvme\"]'",
       "is not \"STEP:STORAGE\""},
      {"--set zero.stage=2 --set zero.offload_optimizer.device=cpu --set "
       "'zero.offload_optimizer.swap_schedule=[\"4:cpu\",\"2:cpu\"]'",
       "list the steps in increasing order"},
      {"--set zero.stage=2 --set zero.offload_optimizer.device=cpu --set "
       "'zero.offload_optimizer.swap_schedule=[\"6:cpu\"]'",
       "would swap after the job's last step"},
      {"--set zero.stage=2 --set zero.offload_optimizer.device=cpu --set "
       "'zero.offload_optimizer.swap_schedule=[\"3:nosuch\"]'",
       "no plugin provides 'offload:nosuch'"},
      {"--set zero.stage=2 --set zero.offload_optimizer.device=cpu --set "
       "'zero.offload_optimizer.swap_schedule=[\"3:nvme\"]'",
       "zero.offload_optimizer.nvme_path"},
      {"--set zero.stage=2 --set zero.offload_optimizer.device=cpu --set "
       "'zero.offload_optimizer.swap_schedule=[\"2:cpu\"]'",
       "\"2:cpu\" moves them into 'cpu', where they already are"},
  };
  const std::pair<std::string, std::string> param_cases[] = {
      {"--set zero.stage=3 --set zero.offload_optimizer.device=cpu --set "
       "'zero.offload_param.swap_schedule=[\"3:cpu\"]'",
       "this config keeps them in none"},
      {"--set zero.stage=3 --set zero.offload_optimizer.device=cpu --set zero.offload_param.device=cpu "
       "--set 'zero.offload_param.swap_schedule=[\"3:none\"]'",
       "keeps offloaded shards in a tier for the whole job"},
      // Into the storage the shards are in: the copy would overwrite them, and the commit drop them.
      {"--set zero.stage=3 --set zero.offload_optimizer.device=cpu --set zero.offload_param.device=cpu "
       "--set 'zero.offload_param.swap_schedule=[\"3:cpu\"]'",
       "zero.offload_param.swap_schedule: \"3:cpu\" moves them into 'cpu', where they already are"},
  };
  for (const auto& [sets, expected] : param_cases) {
    const Command c = check(sets);
    EXPECT_EQ(c.exit_code, 2) << sets << "\n" << c.output;
    EXPECT_NE(c.output.find(expected), std::string::npos) << sets << "\n" << c.output;
  }
  for (const auto& [sets, expected] : cases) {
    const Command c = check(sets);
    EXPECT_EQ(c.exit_code, 2) << sets << "\n" << c.output;
    EXPECT_NE(c.output.find(expected), std::string::npos) << sets << "\n" << c.output;
  }
  // And a good one passes, with hello_tier's keys accepted because the schedule uses it.
  const Command good =
      check("--plugin-path " HELLO_TIER_DIR
            " --set zero.stage=2 --set zero.offload_optimizer.device=cpu --set hello_tier.capacity_mb=64 "
            "--set 'zero.offload_optimizer.swap_schedule=[\"3:hello\",\"4:cpu\"]'");
  EXPECT_EQ(good.exit_code, 0) << good.output;
}

}  // namespace
