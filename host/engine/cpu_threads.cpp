// host/engine/cpu_threads.cpp: intra-op threads and CPU binding per rank (Note [CPU threads per rank]).
#include "host/engine/cpu_threads.hpp"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "host/core/error.hpp"
#include "host/core/text.hpp"

namespace zhost::engine {
namespace {

// The quota of one cgroup v2 folder's cpu.max ("max 100000" or "200000 100000"), in CPUs.
std::optional<double> folder_quota(const std::filesystem::path& folder) {
  std::ifstream file(folder / "cpu.max");
  std::string quota;
  double period = 0;
  if (!(file >> quota >> period) || quota == "max" || period <= 0) return std::nullopt;
  try {
    return std::stod(quota) / period;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The tightest cpu.max from the process's cgroup up to the root of the cgroup v2 hierarchy.
std::optional<double> cgroup_quota() {
  std::ifstream file("/proc/self/cgroup");
  std::string line;
  while (std::getline(file, line)) {
    if (line.rfind("0::", 0) != 0) continue;  // the v2 entry
    std::optional<double> tightest;
    std::filesystem::path folder = std::filesystem::path("/sys/fs/cgroup") / line.substr(4);
    for (;; folder = folder.parent_path()) {
      if (const auto quota = folder_quota(folder)) tightest = std::min(tightest.value_or(*quota), *quota);
      if (folder == "/sys/fs/cgroup" || !folder.has_parent_path() || folder == folder.parent_path()) break;
    }
    return tightest;
  }
  return std::nullopt;
}

}  // namespace

CpuBudget read_cpu_budget() {
  CpuBudget budget;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (::sched_getaffinity(0, sizeof mask, &mask) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &mask)) budget.usable_cpus.push_back(cpu);
  }
  if (budget.usable_cpus.empty()) budget.usable_cpus.push_back(0);
  budget.quota_cpus = cgroup_quota();
  return budget;
}

ThreadRequest thread_request(int requested_threads, bool pin, int local_rank, int local_world_size) {
  return ThreadRequest{requested_threads, omp_num_threads(), pin, local_rank, local_world_size};
}

ThreadPlan plan_threads(const CpuBudget& budget, const ThreadRequest& request) {
  ZHOST_ASSERT(!budget.usable_cpus.empty() && request.local_world_size >= 1 && request.local_rank >= 0 &&
               request.local_rank < request.local_world_size);
  const int listed = static_cast<int>(budget.usable_cpus.size());
  // A quota of 1.5 CPUs lets 2 threads make progress; below one CPU, one thread.
  const int usable =
      budget.quota_cpus ? std::clamp(static_cast<int>(std::ceil(*budget.quota_cpus - 1e-9)), 1, listed) : listed;
  const int ranks = request.local_world_size;
  ThreadPlan plan;
  if (request.pin) {
    if (ranks > usable)
      fail_usage(
          "run.pin_ranks = true needs a CPU per local rank, but {} local ranks share {} usable CPUs; run "
          "fewer ranks per node or set run.pin_ranks = false",
          ranks, usable);
    // Rank r takes CPUs [r * usable / ranks, (r + 1) * usable / ranks) of the first `usable` listed ones.
    const int first = request.local_rank * usable / ranks, last = (request.local_rank + 1) * usable / ranks;
    plan.cpus.assign(budget.usable_cpus.begin() + first, budget.usable_cpus.begin() + last);
  }
  const int share = request.pin ? static_cast<int>(plan.cpus.size()) : std::max(1, usable / ranks);
  if (request.requested_threads > 0) {
    plan.threads = request.requested_threads;
    plan.origin = "run.intra_op_threads";
  } else if (request.omp_num_threads) {
    plan.threads = *request.omp_num_threads;
    plan.origin = "OMP_NUM_THREADS";
  } else {
    plan.threads = share;
    plan.origin = request.pin ? "CPUs of this rank's slice" : "CPUs / local ranks";
  }
  plan.oversubscribed = plan.threads > share;
  return plan;
}

std::optional<int> omp_num_threads() {
  const char* value = std::getenv("OMP_NUM_THREADS");
  if (!value) return std::nullopt;
  char* end = nullptr;
  const long threads = std::strtol(value, &end, 10);
  if (end == value || (*end != '\0' && *end != ',') || threads < 1 || threads > 4096) return std::nullopt;
  return static_cast<int>(threads);
}

void apply_thread_plan(const ThreadPlan& plan) {
  if (!plan.cpus.empty()) {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    for (const int cpu : plan.cpus) CPU_SET(cpu, &mask);
    if (::sched_setaffinity(0, sizeof mask, &mask) != 0)
      fail("cannot bind this rank to CPUs {}: {}", cpu_list_text(plan.cpus), std::strerror(errno));
  }
  at::set_num_threads(plan.threads);
  // OpenBLAS's pthread build keeps a pool of its own that LibTorch's setting does not reach.
  using SetThreads = void (*)(int);
  if (auto set_blas_threads = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    set_blas_threads(plan.threads);
}

std::string threads_in_effect() {
  return std::to_string(at::get_num_threads()) + " intra-op thread(s) on CPUs " +
         cpu_list_text(read_cpu_budget().usable_cpus);
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::vector<std::string> ranges;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    ranges.push_back(j == i ? std::to_string(cpus[i]) : std::to_string(cpus[i]) + "-" + std::to_string(cpus[j]));
    i = j + 1;
  }
  return text::join(ranges, ",");
}

}  // namespace zhost::engine
