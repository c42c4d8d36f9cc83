// tests/checkpoint/checkpoint_training_test.cpp: real `zhost run` jobs (2-4 ranks over Gloo) that save
// checkpoints and resume from them (docs/checkpoints.md):
//   - resuming on the same ranks and stage continues bit for bit: every later loss, the final weights, and the
//     next checkpoint's files byte for byte (masters and optimizer states), for stages 0-3 in fp32 and bf16;
//   - a checkpoint resumes on other world sizes and stages (4 -> 2 -> 3 ranks, stage 2 -> 3 -> 1) and training
//     continues equal to the uninterrupted run within the ZeRO core's fp32 bound;
//   - kill -9 at random points of a job that saves every step: `latest` always names a checkpoint that loads and
//     resumes exactly (ZHOST_CHECKPOINT_KILLS sets how many kills, 3 by default; 50 in docs/checkpoints.md);
//   - a full disk during a save: a clear error, and the previous checkpoint still resumes;
//   - SIGTERM: the job saves at the next step boundary and stops, and resumes from there exactly.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "tests/support/scratch_dir.hpp"
#include "tests/training/training_test_support.hpp"

using namespace zhost::testing;
namespace fs = std::filesystem;

namespace {

constexpr double kFp32Tolerance = 2e-5;  // the ZeRO core's bound across world sizes (tests/training)
constexpr double kFp32Absolute = 5e-6;

std::string read_file(const fs::path& path) { return read_text_file(path); }

// "" when the data files and indexes of two checkpoint folders are byte for byte equal; else the first that
// differs. (checkpoint.json differs in nothing but may name another partition plugin: compared apart.)
std::string checkpoint_files_differ(const fs::path& a, const fs::path& b) {
  if (!fs::is_directory(a) || !fs::is_directory(b)) return "missing folder " + (fs::is_directory(a) ? b : a).string();
  size_t compared = 0;
  for (const auto& entry : fs::directory_iterator(a)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank-", 0) != 0 || entry.path().extension() != ".bin") continue;
    if (read_file(entry.path()) != read_file(b / name)) return name;
    ++compared;
  }
  return compared == 0 ? "no data files in " + a.string() : "";
}

std::string step_dir(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return name;
}

std::string resume_args(const fs::path& from) { return " --resume " + from.string(); }

struct ResumeCase {
  int stage;
  bool bf16;
  const char* offload = "";  // --set arguments that offload, and a name for them
  const char* offload_name = "";
};
void PrintTo(const ResumeCase& c, std::ostream* out) {
  *out << "stage " << c.stage << (c.bf16 ? " bf16 " : " fp32 ") << c.offload_name;
}

class ExactResume : public ::testing::TestWithParam<ResumeCase> {};

// 6 steps saving every 3 (2 ranks, accumulation 2), then a job resumed from step 3 to 6.
TEST_P(ExactResume, ContinuesBitForBit) {
  ScratchDir dir;
  fs::create_directories(dir.path() / "nvme");
  const std::string job =
      "--nproc 2 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=2 --set zero.stage=" +
      std::to_string(GetParam().stage) + (GetParam().bf16 ? " --set bf16.enabled=true" : "") +
      " --set checkpoint.interval=3" + GetParam().offload +
      (std::string(GetParam().offload).find("nvme") != std::string::npos
           ? " --set zero.offload_optimizer.nvme_path=" + (dir.path() / "nvme").string()
           : "");
  RunOutput full = run_zhost(dir.path(), small_job_config(), "full", job + " --set checkpoint.dir=full_ckpt");
  ASSERT_EQ(full.exit_code, 0) << full.err << full.out;
  RunOutput resumed =
      run_zhost(dir.path(), small_job_config(), "resumed",
                job + " --set checkpoint.dir=resumed_ckpt" + resume_args(dir.path() / "full_ckpt" / "step-00000003"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err << resumed.out;
  EXPECT_NE(resumed.err.find("resumed from"), std::string::npos) << resumed.err;
  ASSERT_EQ(full.losses.size(), 6u);
  ASSERT_EQ(resumed.losses.size(), 3u);  // steps 4-6
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], full.losses[i + 3]) << "step " << i + 4;
  EXPECT_EQ(weights_mismatch(resumed, full, 0, 0), "");
  EXPECT_EQ(checkpoint_files_differ(dir.path() / "full_ckpt" / "step-00000006",
                                    dir.path() / "resumed_ckpt" / "step-00000006"),
            "");
}

INSTANTIATE_TEST_SUITE_P(Stages, ExactResume,
                         ::testing::Values(ResumeCase{0, false}, ResumeCase{1, false}, ResumeCase{2, false},
                                           ResumeCase{3, false}, ResumeCase{0, true}, ResumeCase{3, true},
                                           ResumeCase{2, false, " --set zero.offload_optimizer.device=cpu", "_cpu"},
                                           ResumeCase{3, true, " --set zero.offload_optimizer.device=nvme", "_nvme"},
                                           ResumeCase{3, false,
                                                      " --set zero.offload_optimizer.device=cpu"
                                                      " --set zero.offload_param.device=cpu",
                                                      "_cpu_params"}),
                         [](const ::testing::TestParamInfo<ResumeCase>& c) {
                           return "stage" + std::to_string(c.param.stage) + (c.param.bf16 ? "_bf16" : "_fp32") +
                                  c.param.offload_name;
                         });

// experimental.checkpoint_async writes the same files from a snapshot while training goes on, and publishes each one.
TEST(AsyncSave, WritesWhatASynchronousSaveWritesAndResumesExactly) {
  ScratchDir dir;
  const std::string job = "--nproc 2 --set zero.stage=3 --set checkpoint.interval=2 --set checkpoint.keep_last=3";
  RunOutput sync = run_zhost(dir.path(), small_job_config(), "sync", job + " --set checkpoint.dir=sync_ckpt");
  RunOutput async = run_zhost(dir.path(), small_job_config(), "async",
                              job + " --set experimental.checkpoint_async=true --set checkpoint.dir=async_ckpt");
  ASSERT_EQ(sync.exit_code, 0) << sync.err;
  ASSERT_EQ(async.exit_code, 0) << async.err;
  EXPECT_NE(async.err.find("s of training for the snapshot"), std::string::npos) << async.err;
  for (int64_t step : {2, 4, 6})
    EXPECT_EQ(
        checkpoint_files_differ(dir.path() / "sync_ckpt" / step_dir(step), dir.path() / "async_ckpt" / step_dir(step)),
        "")
        << "step " << step;
  RunOutput resumed = run_zhost(dir.path(), small_job_config(), "resumed",
                                "--nproc 2 --set zero.stage=3" + resume_args(dir.path() / "async_ckpt" / step_dir(4)));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(weights_mismatch(resumed, async, 0, 0), "");
}

// One global batch (12 = 4 x 3 = 2 x 6 = 3 x 4) on every world size: the same samples each step.
const std::string kReshardBatch = " --set train_batch_size=12 --set train_micro_batch_size_per_gpu=1 --set steps=9";

TEST(Reshard, FourToTwoToThreeRanksAcrossStagesContinuesAsTheUninterruptedRun) {
  ScratchDir dir;
  RunOutput four = run_zhost(dir.path(), small_job_config(), "four",
                             "--nproc 4 --set zero.stage=2 --set checkpoint.interval=3 --set checkpoint.keep_last=3 "
                             "--set checkpoint.dir=four_ckpt" +
                                 kReshardBatch);
  ASSERT_EQ(four.exit_code, 0) << four.err << four.out;
  RunOutput two = run_zhost(dir.path(), small_job_config(), "two",
                            "--nproc 2 --set zero.stage=3 --set checkpoint.interval=3 --set checkpoint.dir=two_ckpt" +
                                kReshardBatch + resume_args(dir.path() / "four_ckpt" / "step-00000003"));
  ASSERT_EQ(two.exit_code, 0) << two.err << two.out;
  RunOutput three = run_zhost(
      dir.path(), small_job_config(), "three",
      "--nproc 3 --set zero.stage=1" + kReshardBatch + resume_args(dir.path() / "two_ckpt" / "step-00000006"));
  ASSERT_EQ(three.exit_code, 0) << three.err << three.out;
  EXPECT_NE(two.err.find("saved by 4 rank(s) via 'stage2', loaded on 2 via 'stage3'"), std::string::npos) << two.err;
  EXPECT_NE(three.err.find("saved by 2 rank(s) via 'stage3', loaded on 3 via 'stage1'"), std::string::npos)
      << three.err;
  ASSERT_EQ(four.losses.size(), 9u);
  ASSERT_EQ(three.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(two.losses[i], four.losses[i + 3], kFp32Tolerance * four.losses[i + 3]) << "step " << i + 4;
    EXPECT_NEAR(three.losses[i], four.losses[i + 6], kFp32Tolerance * four.losses[i + 6]) << "step " << i + 7;
  }
  EXPECT_EQ(weights_mismatch(three, four, kFp32Tolerance, kFp32Absolute), "");
  EXPECT_LT(three.losses.back(), four.losses.front());  // it trained
}

// Offloaded states come out as the same fragments: a checkpoint of an NVMe-offloaded job resumes without offload
// on another world size, and one saved without offload resumes into the CPU tier.
TEST(Reshard, OffloadedAndNotOffloadedCheckpointsResumeIntoEachOther) {
  ScratchDir dir;
  fs::create_directories(dir.path() / "nvme");
  const std::string nvme = " --set zero.offload_optimizer.nvme_path=" + (dir.path() / "nvme").string();
  RunOutput offloaded =
      run_zhost(dir.path(), small_job_config(), "offloaded",
                "--nproc 2 --set zero.stage=2 --set zero.offload_optimizer.device=nvme" + nvme +
                    " --set checkpoint.interval=3 --set checkpoint.keep_last=3 --set checkpoint.dir=offloaded_ckpt" +
                    kReshardBatch);
  ASSERT_EQ(offloaded.exit_code, 0) << offloaded.err;
  RunOutput plain =
      run_zhost(dir.path(), small_job_config(), "plain",
                "--nproc 3 --set zero.stage=3 --set checkpoint.interval=3 --set checkpoint.dir=plain_ckpt" +
                    kReshardBatch + resume_args(dir.path() / "offloaded_ckpt" / "step-00000003"));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  RunOutput back = run_zhost(dir.path(), small_job_config(), "back",
                             "--nproc 2 --set zero.stage=1 --set zero.offload_optimizer.device=cpu" + kReshardBatch +
                                 resume_args(dir.path() / "plain_ckpt" / "step-00000006"));
  ASSERT_EQ(back.exit_code, 0) << back.err;
  ASSERT_EQ(offloaded.losses.size(), 9u);
  ASSERT_EQ(back.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(back.losses[i], offloaded.losses[i + 6], kFp32Tolerance * offloaded.losses[i + 6]) << "step " << i + 7;
  EXPECT_EQ(weights_mismatch(back, offloaded, kFp32Tolerance, kFp32Absolute), "");
}

TEST(Reshard, AnIncompatibleCheckpointIsRefusedBeforeTraining) {
  ScratchDir dir;
  RunOutput saved = run_zhost(dir.path(), small_job_config(), "saved",
                              "--set checkpoint.at_end=true --set checkpoint.dir=ckpt --set steps=2");
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  RunOutput other_model = run_zhost(dir.path(), small_job_config(), "other_model",
                                    "--set model.width=64 --resume latest --set checkpoint.dir=ckpt");
  EXPECT_EQ(other_model.exit_code, 2) << other_model.err;
  EXPECT_NE(other_model.err.find("it was saved from another model"), std::string::npos) << other_model.err;
  RunOutput other_optimizer =
      run_zhost(dir.path(), small_job_config(), "other_optimizer",
                "--set optimizer.type=SGD --set optimizer.momentum=0.9 --resume latest --set checkpoint.dir=ckpt");
  EXPECT_EQ(other_optimizer.exit_code, 2) << other_optimizer.err;
  EXPECT_NE(other_optimizer.err.find("was saved with optimizer AdamW"), std::string::npos) << other_optimizer.err;
  // A checkpoint.dir that cannot be created (under a file): refused before the first step, not at the first save.
  const std::string file = dir.write("a_file", "x");
  RunOutput unwritable = run_zhost(dir.path(), small_job_config(), "unwritable",
                                   "--nproc 2 --set checkpoint.interval=1 --set checkpoint.dir=" + file + "/ckpt");
  EXPECT_NE(unwritable.exit_code, 0);
  EXPECT_NE(unwritable.err.find("set checkpoint.dir to a folder this job can write"), std::string::npos)
      << unwritable.err;
  // Every rank names the cause, so the launcher's summary does whichever rank exits first.
  const size_t summary = unwritable.err.rfind("zhost: error: rank ");
  ASSERT_NE(summary, std::string::npos) << unwritable.err;
  EXPECT_NE(unwritable.err.find("Not a directory", summary), std::string::npos) << unwritable.err;
  EXPECT_TRUE(unwritable.losses.empty());
  RunOutput none = run_zhost(dir.path(), small_job_config(), "none", "--resume latest --set checkpoint.dir=empty");
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_NE(none.err.find("no checkpoint found"), std::string::npos) << none.err;
}

// Kills every process of a background job at once, as a crash of the machine would.
void kill_job(const BackgroundJob& job) {
  for (const auto& [rank, pid] : job.ranks()) kill(pid, SIGKILL);
  kill(job.launcher(), SIGKILL);
}

// The step `latest` under `root` names; -1 when there is no `latest`.
int64_t latest_step(const fs::path& root) {
  if (!fs::exists(root / "latest")) return -1;
  const std::string latest = read_file(root / "latest");
  EXPECT_EQ(latest.rfind("step-", 0), 0u) << "latest = '" << latest << "'";
  return std::stoll(latest.substr(5));
}

// Background jobs (BackgroundJob: 2 ranks, micro-batch 1) against this uninterrupted reference of them.
const std::string kBackgroundLike =
    "--nproc 2 --set train_micro_batch_size_per_gpu=1 --set run.save_final_weights=false";

TEST(Crash, KillDuringSavesAlwaysLeavesALatestCheckpointThatResumesExactly) {
  const char* env = std::getenv("ZHOST_CHECKPOINT_KILLS");
  const int kills = env ? std::atoi(env) : 3;
  constexpr int64_t kReferenceSteps = 300;
  ScratchDir dir;
  RunOutput reference = run_zhost(dir.path(), small_job_config(), "reference",
                                  kBackgroundLike + " --set steps=" + std::to_string(kReferenceSteps) +
                                      " --set checkpoint.interval=1 --set checkpoint.keep_last=1000 "
                                      "--set checkpoint.dir=reference_ckpt");
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  std::mt19937 random(20261124);
  int resumed = 0;
  for (int k = 0; k < kills; ++k) {
    const fs::path ckpt = dir.path() / ("killed" + std::to_string(k));
    {
      BackgroundJob job(dir, 2, {"checkpoint.interval=1", "checkpoint.dir=" + ckpt.string()});
      ASSERT_TRUE(job.wait_for_training()) << job.err();
      std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 600)(random)));
      kill_job(job);
      job.wait_for_exit(10);
    }
    const int64_t step = latest_step(ckpt);
    if (step < 0 || step + 2 > kReferenceSteps) continue;  // killed before the first save, or past the reference
    RunOutput next = run_zhost(dir.path(), small_job_config(), "next" + std::to_string(k),
                               kBackgroundLike + " --set steps=" + std::to_string(step + 2) +
                                   " --set checkpoint.at_end=true --set checkpoint.dir=" + ckpt.string() + "_next" +
                                   resume_args(ckpt));
    ASSERT_EQ(next.exit_code, 0) << "kill " << k << " after step " << step << ": " << next.err;
    EXPECT_EQ(checkpoint_files_differ(dir.path() / "reference_ckpt" / step_dir(step + 2),
                                      fs::path(ckpt.string() + "_next") / step_dir(step + 2)),
              "")
        << "kill " << k << ": resumed from step " << step;
    ++resumed;
  }
  EXPECT_GT(resumed, 0) << "no kill left a checkpoint to resume from";
  std::printf("%d kills; %d left a checkpoint that resumed and was compared\n", kills, resumed);
}

// A tmpfs of a fixed size: the disk fills up for real. Needs root (mount); skipped otherwise.
class SmallDisk {
 public:
  SmallDisk(const fs::path& where, const std::string& size) : where_(where) {
    fs::create_directories(where);
    mounted_ = ::mount("tmpfs", where.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
  }
  ~SmallDisk() {
    if (mounted_) ::umount2(where_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }

 private:
  fs::path where_;
  bool mounted_ = false;
};

TEST(DiskFull, ASaveThatRunsOutOfSpaceFailsClearlyAndThePreviousCheckpointStillResumes) {
  ScratchDir dir;
  // One checkpoint of the small job is about 0.4 MB of values: two fit in 1 MB, the third does not.
  SmallDisk disk(dir.path() / "disk", "1000k");
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root): the disk-full case is not tested";
  const std::string ckpt = (dir.path() / "disk" / "ckpt").string();
  RunOutput full = run_zhost(dir.path(), small_job_config(), "full",
                             "--nproc 2 --set steps=6 --set checkpoint.interval=1 --set checkpoint.keep_last=5 "
                             "--set checkpoint.dir=" +
                                 ckpt);
  EXPECT_NE(full.exit_code, 0);
  EXPECT_NE(full.err.find("not saved"), std::string::npos) << full.err;
  EXPECT_NE(full.err.find("disk full"), std::string::npos) << full.err;
  const int64_t step = latest_step(ckpt);
  ASSERT_GE(step, 1) << full.err;
  EXPECT_EQ(fs::exists(fs::path(ckpt) / (".tmp-" + step_dir(step + 1))), false);  // the failed save is removed
  RunOutput reference = run_zhost(dir.path(), small_job_config(), "reference", "--nproc 2 --set steps=6");
  RunOutput resumed = run_zhost(dir.path(), small_job_config(), "resumed",
                                "--nproc 2 --set steps=6 --set checkpoint.dir=" + ckpt + " --resume latest");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  EXPECT_EQ(weights_mismatch(resumed, reference, 0, 0), "");
}

TEST(Signal, SigtermSavesAtTheNextStepBoundaryAndTheJobResumesFromThere) {
  ScratchDir dir;
  const fs::path ckpt = dir.path() / "ckpt";
  int64_t stopped_at = -1;
  {
    BackgroundJob job(dir, 2, {"checkpoint.interval=100000", "checkpoint.dir=" + ckpt.string()});
    ASSERT_TRUE(job.wait_for_training()) << job.err();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(job.launcher(), SIGTERM);
    const std::optional<int> status = job.wait_for_exit(60);
    ASSERT_TRUE(status.has_value()) << job.err();
    EXPECT_NE(job.err().find("checkpoint saved; resume with --resume latest"), std::string::npos) << job.err();
    stopped_at = latest_step(ckpt);
  }
  ASSERT_GE(stopped_at, 1);
  RunOutput reference =
      run_zhost(dir.path(), small_job_config(), "reference",
                kBackgroundLike + " --set run.save_final_weights=true --set steps=" + std::to_string(stopped_at + 2));
  RunOutput resumed =
      run_zhost(dir.path(), small_job_config(), "resumed",
                kBackgroundLike + " --set run.save_final_weights=true --set steps=" + std::to_string(stopped_at + 2) +
                    " --set checkpoint.dir=" + ckpt.string() + " --resume latest");
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(weights_mismatch(resumed, reference, 0, 0), "");
}

}  // namespace
