// tests/zero/nvme_offload_test.cpp: ZeRO-Infinity's optimizer offload to NVMe (zero.offload_optimizer.device
// = "nvme") through the real zhost executable and plugin files: the CPU tier steps the fp32 master weights
// and Adam states that plugins/offload_nvme keeps in O_DIRECT files under nvme_path, chunk by chunk. Same
// kernel, same values, same order as plain CPU offload (docs/abi.md "Tier composition"), so the job equals
// it bit for bit: every loss and every weight, stages 1, 2 and 3, one to three ranks, both I/O engines, a
// group spanning several chunks and (stage 3) several sub-groups, buffer_count 1, 3 (pipelined: Note
// [Storage pipeline]) and 4. Also: io_uring really carries the I/O
// when the kernel has it, the job leaves nothing under nvme_path, a job SIGKILLed mid-run leaves its
// folder to the next job, which removes it and says so, and `config check` refuses a bad nvme_path.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include "tests/support/scratch_dir.hpp"
#include "tests/training/training_test_support.hpp"

using namespace zhost::testing;
namespace fs = std::filesystem;

namespace {

RunOutput train(const ScratchDir& dir, const std::string& name, const std::string& args) {
  RunOutput r = run_zhost(dir.path(), small_job_config(), name,
                          "--set model.type=llama --set steps=5 --set zero.reduce_bucket_size=3000 "
                          "--set offload_cpu.threads=1 " +
                              args);
  EXPECT_EQ(r.exit_code, 0) << name << ":\n" << r.err << r.out;
  return r;
}

std::string on_nvme(const fs::path& folder, const std::string& engine) {
  fs::create_directories(folder);
  return " --set zero.offload_optimizer.device=nvme --set zero.offload_optimizer.nvme_path=" + folder.string() +
         " --set offload_cpu.storage_chunk_elements=1000 --set aio.block_size=4096 --set aio.queue_depth=4"
         " --set offload_nvme.io_engine=" +
         engine;
}

bool empty_folder(const fs::path& folder) { return fs::is_empty(folder); }

// Rank 0's memory category `name` (Note [Memory categories]) in the run's last metrics.jsonl record.
double last_memory_category(const RunOutput& r, const std::string& name) {
  std::ifstream in(r.run_dir / "metrics.jsonl");
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return nlohmann::json::parse(last).at("memory").at(name).get<double>();
}

struct Case {
  const char* name;
  const char* engine;
  const char* args;        // both runs
  const char* pipelining;  // the NVMe run only (Note [Storage pipeline])
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class NvmeOffload : public ::testing::TestWithParam<Case> {};

INSTANTIATE_TEST_SUITE_P(
    StagesRanksEngines, NvmeOffload,
    ::testing::Values(
        Case{"Stage1OneRankUring", "io_uring", "--nproc 1 --set zero.stage=1", ""},
        Case{"Stage1ThreeRanksThreadsPipelined", "threads", "--nproc 3 --set zero.stage=1",
             " --set zero.offload_optimizer.buffer_count=4 --set zero.offload_optimizer.pipeline_read=true "
             "--set zero.offload_optimizer.pipeline_write=true"},
        Case{"Stage2OneRankThreadsOneBuffer", "threads",
             "--nproc 1 --set zero.stage=2 --set gradient_accumulation_steps=2",
             " --set zero.offload_optimizer.buffer_count=1 --set zero.offload_optimizer.pipeline_write=true"},
        // several sub-groups, each an optimizer group of the CPU tier; reads ahead, writes behind
        Case{"Stage3TwoRanksUringPipelined", "io_uring",
             "--nproc 2 --set zero.stage=3 --set zero.stage3_param_persistence_threshold=40 "
             "--set zero.sub_group_size=3000 --set gradient_accumulation_steps=2",
             " --set zero.offload_optimizer.buffer_count=3 --set zero.offload_optimizer.pipeline_read=true "
             "--set zero.offload_optimizer.pipeline_write=true"},
        // the delayed update at stage 3: the tier's step (and its I/O) runs while the next step trains
        Case{"Stage3TwoRanksThreadsDelayedUpdate", "threads",
             "--nproc 2 --set zero.stage=3 --set zero.stage3_param_persistence_threshold=40 "
             "--set zero.sub_group_size=3000 --set zero.offload_optimizer.delayed_update=true "
             "--set zero.offload_optimizer.delayed_update_start_step=2",
             " --set zero.offload_optimizer.buffer_count=3 --set zero.offload_optimizer.pipeline_read=true"}),
    [](const ::testing::TestParamInfo<Case>& c) { return std::string(c.param.name); });

TEST_P(NvmeOffload, EqualsPlainCpuOffloadBitForBit) {
  ScratchDir dir;
  const std::string args = std::string(GetParam().args) + " --set train_micro_batch_size_per_gpu=1";
  RunOutput plain = train(dir, "plain", args + " --set zero.offload_optimizer.device=cpu");
  RunOutput nvme = train(dir, "nvme", args + on_nvme(dir.path() / "nvme", GetParam().engine) + GetParam().pipelining);
  const std::string log = nvme.out + nvme.err;
  EXPECT_NE(log.find("optimizer states kept in storage tier 'offload_nvme'"), std::string::npos) << log;
  // The engine asked for carried the I/O: every rank's tier counts its completed requests.
  std::smatch m;
  const std::regex requests(std::string("offload_nvme: ([0-9]+) requests completed through ") + GetParam().engine);
  ASSERT_TRUE(std::regex_search(log, m, requests)) << log;
  EXPECT_GT(std::stoll(m[1]), 0) << log;
  ASSERT_EQ(plain.losses.size(), 5u);
  EXPECT_EQ(nvme.losses, plain.losses);
  EXPECT_EQ(weights_mismatch(nvme, plain, 0, 0), "");
  EXPECT_TRUE(empty_folder(dir.path() / "nvme")) << "the job left files under nvme_path";
  // Memory category tier_nvme: the tier's files. On one rank they hold the fp32 master, exp_avg and
  // exp_avg_sq of every parameter (12 bytes each), in chunks of 1000 elements rounded up to 4 KiB blocks.
  EXPECT_EQ(last_memory_category(plain, "tier_nvme"), 0);
  if (std::string(GetParam().args).find("--nproc 1") != std::string::npos) {
    const double states = 12 * read_model_states(nvme).at("num_params").get<double>();
    const double on_nvme = last_memory_category(nvme, "tier_nvme");
    EXPECT_GE(on_nvme, states);
    EXPECT_LE(on_nvme, states * 1.1);
  }
}

// Note [Gradients in storage] (plugins/offload_cpu/group_states.hpp): stage 3 reports each unit's gradients
// finished on the step's last micro-batch, and the CPU tier moves them to the NVMe tier until the step instead
// of keeping 4 bytes per parameter in host memory. With pin_memory the tier keeps them (pinned memory is not
// given back). Both jobs train the same bits; without gradient accumulation the one that moves them peaks
// lower by about the gradients' bytes, and its files hold them too (16 bytes per parameter instead of 12).
// (With accumulation the earlier micro-batches' sums stay in host memory: the Stage3 case above, bit for bit.)
TEST(NvmeOffload, Stage3GradientsLeaveHostMemoryAndChangeNoBit) {
  ScratchDir dir;
  const std::string args =
      "--nproc 1 --set zero.stage=3 --set steps=3 "
      "--set model.width=512 --set model.layers=4 --set model.heads=8 "
      "--set train_micro_batch_size_per_gpu=1" +
      on_nvme(dir.path() / "nvme", "io_uring") + " --set offload_cpu.storage_chunk_elements=262144";
  RunOutput kept = train(dir, "kept", args + " --set zero.offload_optimizer.pin_memory=true");
  RunOutput moved = train(dir, "moved", args);
  ASSERT_EQ(kept.losses.size(), 3u);
  EXPECT_EQ(moved.losses, kept.losses);
  EXPECT_EQ(weights_mismatch(moved, kept, 0, 0), "");
  const double params = read_model_states(moved).at("num_params").get<double>();
  const double gradients = 4 * params;
  ASSERT_GT(gradients, 40e6);  // large enough to stand out of the run-to-run noise of peak RSS
  EXPECT_GT(last_memory_category(kept, "peak_rss") - last_memory_category(moved, "peak_rss"), 0.6 * gradients);
  EXPECT_GE(last_memory_category(moved, "tier_nvme"), 16 * params);
  EXPECT_LT(last_memory_category(kept, "tier_nvme"), 13 * params);
  EXPECT_TRUE(empty_folder(dir.path() / "nvme")) << "the job left files under nvme_path";
}

// Bytes the NVMe tier instances of a run wrote, over every rank (their closing log lines).
long long nvme_bytes_written(const RunOutput& r) {
  const std::string log = r.out + r.err;
  const std::regex written("offload_nvme: [0-9]+ requests completed through \\S+, ([0-9]+) bytes written");
  long long bytes = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), written); it != std::sregex_iterator(); ++it)
    bytes += std::stoll((*it)[1]);
  return bytes;
}

// Stage 3's parameter shards on NVMe (zero.offload_param.device = "nvme", the optimizer on the CPU tier):
// stored after each step, loaded for their gathers through the tier's events, equal to shards in host memory,
// whichever part zero.offload_param.max_in_cpu keeps in host memory (Note [max_in_cpu]): none (0), the first
// units' (10000 elements: the shards of the units that fit stay with the CPU tier, the rest are written to
// NVMe) or all (DeepSpeed's default, 1e9, above this model's size: nothing of the shards is written).
TEST(NvmeParamOffload, Stage3ShardsOnNvmeEqualShardsInHostMemoryBitForBit) {
  ScratchDir dir;
  const fs::path folder = dir.path() / "nvme";
  fs::create_directories(folder);
  const std::string args =
      "--nproc 2 --set zero.stage=3 --set zero.stage3_param_persistence_threshold=40 --set zero.sub_group_size=3000 "
      "--set train_micro_batch_size_per_gpu=1 --set zero.offload_optimizer.device=cpu";
  RunOutput plain = train(dir, "plain", args + " --set zero.offload_param.device=cpu");
  ASSERT_EQ(plain.losses.size(), 5u);
  auto shards_on_nvme = [&](const std::string& name, const std::string& max_in_cpu) {
    RunOutput r =
        train(dir, name,
              args + " --set zero.offload_param.device=nvme --set zero.offload_param.nvme_path=" + folder.string() +
                  " --set aio.block_size=4096 --set aio.queue_depth=4" +
                  (max_in_cpu.empty() ? "" : " --set zero.offload_param.max_in_cpu=" + max_in_cpu));
    EXPECT_EQ(r.losses, plain.losses) << name;
    EXPECT_EQ(weights_mismatch(r, plain, 0, 0), "") << name;
    EXPECT_TRUE(empty_folder(folder)) << name << " left files under nvme_path";
    return r;
  };
  const RunOutput none = shards_on_nvme("none_kept", "0"), part = shards_on_nvme("part_kept", "10000"),
                  all = shards_on_nvme("all_kept", "");
  // A storage swap moves only the units the parameter tier keeps; the kept ones stay with the CPU tier.
  const RunOutput swapped =
      shards_on_nvme("part_kept_swapped", "10000 --set 'zero.offload_param.swap_schedule=[\"2:cpu\",\"4:nvme\"]'");
  EXPECT_NE(swapped.err.find("parameter shards moved from 'nvme' to 'cpu' after step 2"), std::string::npos)
      << swapped.err;
  const long long all_bytes = nvme_bytes_written(none), part_bytes = nvme_bytes_written(part);
  EXPECT_GT(all_bytes, 0) << none.out + none.err;
  EXPECT_GT(part_bytes, 0) << part.out + part.err;
  EXPECT_LT(part_bytes, all_bytes) << part.out + part.err;
  EXPECT_EQ(nvme_bytes_written(all), 0) << all.out + all.err;
  // Each rank says which part it keeps: some units, not all, within the limit.
  std::smatch m;
  const std::string part_log = part.out + part.err;
  ASSERT_TRUE(
      std::regex_search(part_log, m,
                        std::regex("max_in_cpu = 10000: the shards of units? [0-9-]+ \\(([0-9]+) of ([0-9]+) "
                                   "elements on this rank\\) stay in host memory, in tier 'offload_cpu'; units? ")))
      << part_log;
  EXPECT_GT(std::stoll(m[1]), 0);
  EXPECT_LE(std::stoll(m[1]), 10000);
  EXPECT_LT(std::stoll(m[1]), std::stoll(m[2]));
  EXPECT_NE((all.out + all.err).find("none on 'offload_nvme' (set max_in_cpu lower to put shards there)"),
            std::string::npos)
      << all.out + all.err;
  EXPECT_EQ((none.out + none.err).find("stay in host memory"), std::string::npos) << none.out + none.err;
}

// Both roles on NVMe, in one folder: the host makes one tier instance per role (Note [One instance per storing
// role]), each with its own job folder and its role's pin_memory (offload_param.pin_memory = true here, the
// optimizer's false), and the job equals both roles in host memory bit for bit.
TEST(NvmeParamOffload, OptimizerAndShardsBothOnNvmeEqualHostMemoryBitForBit) {
  ScratchDir dir;
  const fs::path folder = dir.path() / "nvme";
  fs::create_directories(folder);
  const std::string args =
      "--nproc 2 --set zero.stage=3 --set zero.stage3_param_persistence_threshold=40 --set zero.sub_group_size=3000 "
      "--set train_micro_batch_size_per_gpu=1";
  RunOutput plain =
      train(dir, "plain", args + " --set zero.offload_param.device=cpu --set zero.offload_optimizer.device=cpu");
  RunOutput nvme =
      train(dir, "nvme",
            args + on_nvme(folder, "io_uring") + " --set zero.offload_param.device=nvme " +
                "--set zero.offload_param.max_in_cpu=0 --set zero.offload_param.nvme_path=" + folder.string() +
                " --set zero.offload_param.pin_memory=true");
  const std::string log = nvme.out + nvme.err;
  auto count = [&](const std::string& needle) { return count_occurrences(log, needle); };
  // Page-locking may be refused without CAP_IPC_LOCK (RLIMIT_MEMLOCK): then the tier says so.
  EXPECT_EQ(count(", staging page-locked") + count("zero.offload_param.pin_memory = true, but the staging slots"), 2)
      << log;
  EXPECT_EQ(count(", staging pageable"), 2) << log;
  // Each instance reports its own requests and removes its own folder: two per rank.
  const std::regex removed("requests completed through io_uring, [0-9]+ bytes written, [0-9]+ read; removed (\\S+)");
  std::set<std::string> folders;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), removed); it != std::sregex_iterator(); ++it)
    folders.insert((*it)[1]);
  EXPECT_GE(folders.size(), 2u) << log;
  ASSERT_EQ(plain.losses.size(), 5u);
  EXPECT_EQ(nvme.losses, plain.losses);
  EXPECT_EQ(weights_mismatch(nvme, plain, 0, 0), "");
  EXPECT_TRUE(empty_folder(folder)) << "the job left files under nvme_path";
}

// Where io_uring is blocked (a container's default seccomp profile; here a filter failing io_uring_setup
// with EPERM, tests/zero/without_io_uring.cpp), io_engine = "auto" says so in one line and the thread
// engine carries the job, bit for bit as in host memory; io_engine = "io_uring" is a clear error instead.
TEST(NvmeEngineChoice, AutoFallsBackToThreadsWhereIoUringIsBlocked) {
  ScratchDir dir;
  const std::string args = "--nproc 1 --set zero.stage=2 --set train_micro_batch_size_per_gpu=1";
  RunOutput plain = train(dir, "plain", args + " --set zero.offload_optimizer.device=cpu");
  RunOutput blocked = run_zhost(dir.path(), small_job_config(), "blocked",
                                "--set model.type=llama --set steps=5 --set zero.reduce_bucket_size=3000 "
                                "--set offload_cpu.threads=1 " +
                                    args + on_nvme(dir.path() / "nvme", "auto"),
                                std::string(WITHOUT_IO_URING) + " ");
  ASSERT_EQ(blocked.exit_code, 0) << blocked.err;
  const std::string log = blocked.out + blocked.err;
  EXPECT_NE(log.find("offload_nvme: io_uring is not available here ("), std::string::npos) << log;
  EXPECT_NE(log.find("); using 1 pread/pwrite thread(s)"), std::string::npos) << log;
  EXPECT_NE(log.find("requests completed through threads"), std::string::npos) << log;
  EXPECT_EQ(blocked.losses, plain.losses);
  EXPECT_EQ(weights_mismatch(blocked, plain, 0, 0), "");
  RunOutput forced = run_zhost(dir.path(), small_job_config(), "forced",
                               "--set steps=1 " + args + on_nvme(dir.path() / "nvme", "io_uring"),
                               std::string(WITHOUT_IO_URING) + " ");
  EXPECT_NE(forced.exit_code, 0);
  EXPECT_NE(forced.err.find("offload_nvme.io_engine = \"io_uring\", but "), std::string::npos) << forced.err;
  EXPECT_TRUE(empty_folder(dir.path() / "nvme")) << "a job left files under nvme_path";
}

// A job SIGKILLed while it trains leaves its folder (nothing runs at SIGKILL); the next job on the same
// nvme_path removes it, says so, trains, and leaves nothing behind.
TEST(NvmeOffloadFaults, KilledJobsFilesAreRemovedByTheNextJob) {
  ScratchDir dir;
  const fs::path folder = dir.path() / "nvme";
  fs::create_directories(folder);
  {
    BackgroundJob job(
        dir, 1,
        {"zero.stage=2", "zero.offload_optimizer.device=nvme", "zero.offload_optimizer.nvme_path=" + folder.string(),
         "offload_cpu.storage_chunk_elements=1000"});
    ASSERT_TRUE(job.wait_for_training()) << job.err();
    ASSERT_FALSE(empty_folder(folder));
    for (const auto& [rank, pid] : job.ranks()) kill(pid, SIGKILL);
    ASSERT_TRUE(job.wait_for_exit(20).has_value()) << job.err();
  }
  ASSERT_FALSE(empty_folder(folder)) << "SIGKILL cannot clean up: the killed job's folder should be there";
  RunOutput next = train(dir, "next",
                         "--nproc 1 --set zero.stage=2 --set zero.offload_optimizer.device=nvme "
                         "--set zero.offload_optimizer.nvme_path=" +
                             folder.string());
  const std::string log = next.out + next.err;
  EXPECT_NE(log.find("by a job that ended without cleaning up"), std::string::npos) << log;
  EXPECT_TRUE(empty_folder(folder)) << "files left under nvme_path";
}

std::string config_check(const ScratchDir& dir, const std::string& sets) {
  const std::string config = dir.write("train.toml", small_job_config());
  const std::string command = std::string(ZHOST_EXE) + " config check " + config + " " + sets + " 2>&1";
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  char buf[4096];
  while (pipe && fgets(buf, sizeof(buf), pipe)) out += buf;
  const int status = pipe ? pclose(pipe) : -1;
  EXPECT_NE(status, 0) << out;
  return out;
}

// `config check` reports every problem of a config at once: one run covers what zhost refuses, two more the
// nvme_path errors.
TEST(NvmeOffloadConfig, CheckRefusesABadNvmePathAndWhatIsMissing) {
  ScratchDir dir;
  const std::string missing = config_check(dir,
                                           "--set zero.stage=3 --set zero.offload_optimizer.device=nvme "
                                           "--set zero.offload_param.device=nvme --set aio.use_gds=true "
                                           "--set zero.offload_optimizer.pipeline_read=true "
                                           "--set zero.offload_optimizer.buffer_count=1");
  for (const char* expected : {"aio.use_gds = true is not supported", "set buffer_count to 2 or more"})
    EXPECT_NE(missing.find(expected), std::string::npos) << expected << " in:\n" << missing;
  EXPECT_NE(config_check(dir, "--set zero.stage=2 --set zero.offload_optimizer.device=nvme")
                .find("zero.offload_optimizer.device = \"nvme\" needs zero.offload_optimizer.nvme_path"),
            std::string::npos);
  const std::string absent = config_check(dir,
                                          "--set zero.stage=2 --set zero.offload_optimizer.device=nvme --set "
                                          "zero.offload_optimizer.nvme_path=/nonexistent/x");
  EXPECT_NE(absent.find("zero.offload_optimizer.nvme_path = \"/nonexistent/x\" is not a folder"), std::string::npos)
      << absent;
}

}  // namespace
