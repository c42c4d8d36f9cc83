// tests/engine/cpu_threads_test.cpp: threads and CPU slices per rank (Note [CPU threads per rank]), the
// plan as a pure function and its application to this process.
#include "host/engine/cpu_threads.hpp"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <numeric>

#include "host/core/error.hpp"
#include "tests/support/scoped_env.hpp"

namespace zhost::engine {
namespace {

CpuBudget cpus(int count, std::optional<double> quota = std::nullopt) {
  CpuBudget budget;
  budget.usable_cpus.resize(static_cast<size_t>(count));
  std::iota(budget.usable_cpus.begin(), budget.usable_cpus.end(), 0);
  budget.quota_cpus = quota;
  return budget;
}

ThreadRequest ranks(int local_rank, int local_world_size) {
  ThreadRequest request;
  request.local_rank = local_rank;
  request.local_world_size = local_world_size;
  return request;
}

TEST(CpuThreads, TheNodesCpusAreDividedAmongLocalRanks) {
  EXPECT_EQ(plan_threads(cpus(8), ranks(0, 1)).threads, 8);
  EXPECT_EQ(plan_threads(cpus(8), ranks(3, 4)).threads, 2);
  EXPECT_EQ(plan_threads(cpus(8), ranks(0, 3)).threads, 2);  // 8 / 3, rounded down
  const ThreadPlan crowded = plan_threads(cpus(2), ranks(3, 4));
  EXPECT_EQ(crowded.threads, 1);         // never fewer than one
  EXPECT_FALSE(crowded.oversubscribed);  // and one thread per rank is not worth a warning
  EXPECT_TRUE(crowded.cpus.empty());     // no binding unless asked
  EXPECT_EQ(crowded.origin, "CPUs / local ranks");
}

TEST(CpuThreads, ACgroupQuotaCapsTheUsableCpus) {
  EXPECT_EQ(plan_threads(cpus(16, 4.0), ranks(0, 2)).threads, 2);
  EXPECT_EQ(plan_threads(cpus(16, 2.5), ranks(0, 1)).threads, 3);  // 2.5 CPUs keep 3 threads busy
  EXPECT_EQ(plan_threads(cpus(16, 0.5), ranks(0, 1)).threads, 1);
  EXPECT_EQ(plan_threads(cpus(2, 64.0), ranks(0, 1)).threads, 2);  // a quota above the mask changes nothing
}

TEST(CpuThreads, ConfigKeyOverridesOmpNumThreadsWhichOverridesTheDivision) {
  ThreadRequest request = ranks(0, 2);
  request.omp_num_threads = 3;
  ThreadPlan plan = plan_threads(cpus(8), request);
  EXPECT_EQ(plan.threads, 3);
  EXPECT_EQ(plan.origin, "OMP_NUM_THREADS");
  EXPECT_FALSE(plan.oversubscribed);  // 3 x 2 ranks on 8 CPUs
  request.requested_threads = 6;
  plan = plan_threads(cpus(8), request);
  EXPECT_EQ(plan.threads, 6);
  EXPECT_EQ(plan.origin, "run.intra_op_threads");
  EXPECT_TRUE(plan.oversubscribed);  // 6 x 2 ranks on 8 CPUs
}

TEST(CpuThreads, PinnedRanksGetContiguousSlicesCoveringEveryCpu) {
  std::vector<int> covered;
  for (int local = 0; local < 3; ++local) {
    ThreadRequest request = ranks(local, 3);
    request.pin = true;
    const ThreadPlan plan = plan_threads(cpus(8), request);
    EXPECT_EQ(plan.threads, static_cast<int>(plan.cpus.size())) << "rank " << local;
    covered.insert(covered.end(), plan.cpus.begin(), plan.cpus.end());
  }
  EXPECT_EQ(covered, cpus(8).usable_cpus);  // 0-1 | 2-4 | 5-7: disjoint, in order, nothing left out

  CpuBudget sparse;  // an affinity mask with holes: slices follow the listed CPUs
  sparse.usable_cpus = {2, 3, 8, 9};
  ThreadRequest second = ranks(1, 2);
  second.pin = true;
  EXPECT_EQ(plan_threads(sparse, second).cpus, (std::vector<int>{8, 9}));

  ThreadRequest too_many = ranks(0, 3);
  too_many.pin = true;
  EXPECT_THROW(plan_threads(cpus(2), too_many), UsageError);
}

TEST(CpuThreads, OmpNumThreadsIsReadLikeOpenMpReadsItsFirstLevel) {
  const std::vector<std::pair<const char*, std::optional<int>>> cases = {
      {"4", 4}, {"4,2", 4}, {"0", std::nullopt}, {"-1", std::nullopt}, {"four", std::nullopt}, {"4x", std::nullopt}};
  for (const auto& [value, expected] : cases) {
    testing::ScopedEnv env("OMP_NUM_THREADS", value);
    EXPECT_EQ(omp_num_threads(), expected) << value;
  }
  testing::ScopedEnv unset("OMP_NUM_THREADS", nullptr);
  EXPECT_EQ(omp_num_threads(), std::nullopt);
}

TEST(CpuThreads, CpuListsAreWrittenAsRanges) {
  EXPECT_EQ(cpu_list_text({0, 1, 2, 3, 8}), "0-3,8");
  EXPECT_EQ(cpu_list_text({5}), "5");
  EXPECT_EQ(cpu_list_text({0, 2, 3}), "0,2-3");
}

TEST(CpuThreads, ApplyingAPlanBindsThisProcessAndSetsLibTorchsThreads) {
  const CpuBudget budget = read_cpu_budget();
  ASSERT_FALSE(budget.usable_cpus.empty());
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  const int threads_before = at::get_num_threads();

  ThreadPlan plan;
  plan.threads = 1;
  plan.cpus = {budget.usable_cpus.back()};
  apply_thread_plan(plan);
  cpu_set_t after;
  ASSERT_EQ(sched_getaffinity(0, sizeof after, &after), 0);
  EXPECT_EQ(CPU_COUNT(&after), 1);
  EXPECT_TRUE(CPU_ISSET(budget.usable_cpus.back(), &after));
  EXPECT_EQ(at::get_num_threads(), 1);
  // OpenBLAS (whichever build serves LibTorch here) runs as many threads: no second pool oversubscribes.
  using GetThreads = int (*)();
  if (auto blas_threads = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"))) {
    EXPECT_EQ(blas_threads(), 1);
  }

  ASSERT_EQ(sched_setaffinity(0, sizeof before, &before), 0);
  at::set_num_threads(threads_before);
}

}  // namespace
}  // namespace zhost::engine
