// tests/training/cpu_setup_test.cpp: what a rank runs on (docs/architecture.md, "CPU training"): the BLAS
// and malloc named at start, threads per rank divided or overridden, ranks pinned to their own CPUs, and
// the reference BLAS warned about.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <thread>

#include "tests/support/scratch_dir.hpp"
#include "tests/training/training_test_support.hpp"

namespace zhost::testing {
namespace {

int usable_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  return sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : 1;
}

const std::string kOneStep = " --set steps=1 --set run.save_final_weights=false";

TEST(CpuSetup, FirstLinesNameBlasMallocAndThreadsPerRank) {
  ScratchDir dir;
  const RunOutput r =
      run_zhost(dir.path(), small_job_config(), "named", "--nproc 2" + kOneStep, "unset OMP_NUM_THREADS; ");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string expected_threads = std::to_string(std::max(1, usable_cpus() / 2)) +
                                       " intra-op thread(s) per rank (CPUs / local ranks) x 2 local rank(s)";
  EXPECT_NE(r.err.find("CPU: BLAS "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("malloc " ZHOST_MALLOC_NAME), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(expected_threads), std::string::npos) << r.err;
}

TEST(CpuSetup, ConfigKeyAndOmpNumThreadsOverrideTheDivision) {
  ScratchDir dir;
  RunOutput r = run_zhost(dir.path(), small_job_config(), "env", kOneStep, "OMP_NUM_THREADS=1 ");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("1 intra-op thread(s) per rank (OMP_NUM_THREADS)"), std::string::npos) << r.err;
  r = run_zhost(dir.path(), small_job_config(), "key", "--set run.intra_op_threads=3" + kOneStep, "OMP_NUM_THREADS=1 ");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("3 intra-op thread(s) per rank (run.intra_op_threads)"), std::string::npos) << r.err;
  if (usable_cpus() < 3) {
    EXPECT_NE(r.err.find("threads will wait on each other"), std::string::npos) << r.err;
  }
}

// Each rank reads its binding back from the kernel: the slices are disjoint and cover the usable CPUs.
TEST(CpuSetup, PinnedRanksRunOnTheirOwnCpus) {
  if (usable_cpus() < 2) GTEST_SKIP() << "needs 2 usable CPUs";
  ScratchDir dir;
  const RunOutput r =
      run_zhost(dir.path(), small_job_config(), "pinned", "--nproc 2 --set run.pin_ranks=true" + kOneStep);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> cpus;
  for (const char* rank : {"rank 0 (local 0) runs ", "rank 1 (local 1) runs "}) {
    const size_t at = r.err.find(rank);
    ASSERT_NE(at, std::string::npos) << rank << "\n" << r.err;
    const size_t on = r.err.find("on CPUs ", at) + 8;
    cpus.insert(r.err.substr(on, r.err.find('\n', on) - on));
  }
  EXPECT_EQ(cpus.size(), 2u) << r.err;
}

TEST(CpuSetup, PinningMoreRanksThanCpusIsRefusedBeforeAnyRankStarts) {
  ScratchDir dir;
  const RunOutput r =
      run_zhost(dir.path(), small_job_config(), "crowded",
                "--nproc " + std::to_string(usable_cpus() + 1) + " --set run.pin_ranks=true" + kOneStep);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("run.pin_ranks = true needs a CPU per local rank"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("[rank "), std::string::npos) << "a rank started:\n" << r.err;
}

// Debian's reference BLAS preloaded comes first in the lookup order, as if libblas.so.3 pointed at it.
TEST(CpuSetup, TheReferenceBlasIsWarnedAbout) {
  const std::string reference = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3";
  if (!std::filesystem::exists(reference)) GTEST_SKIP() << reference << " is not installed (package libblas3)";
  ScratchDir dir;
  const RunOutput r = run_zhost(dir.path(), small_job_config(), "reference", kOneStep, "LD_PRELOAD=" + reference + " ");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("CPU: BLAS reference BLAS"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("run on the reference BLAS"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace zhost::testing
