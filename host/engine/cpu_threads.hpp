// host/engine/cpu_threads.hpp: how many intra-op threads each rank runs and which CPUs it may use.
//
// Note [CPU threads per rank]: every local rank is a process with its own LibTorch (OpenMP) and BLAS
// thread pools. Left alone, each pool starts one thread per core, so N ranks on N cores run N*N threads
// that spin in each other's barriers (torchrun sets OMP_NUM_THREADS=1 for this reason). zhost divides
// this node's CPUs among its local ranks instead: threads per rank = usable CPUs / local ranks (at least
// 1), where usable CPUs = the process's affinity mask, capped by a cgroup CPU quota. OMP_NUM_THREADS, when
// set, overrides the division (as under torchrun), and `run.intra_op_threads` overrides both. With
// `run.pin_ranks`, each local rank is bound to its own contiguous slice of the usable CPUs and runs one
// thread per CPU of its slice. The same count goes to OpenBLAS (openblas_set_num_threads), whose pthread
// build keeps a pool of its own; its OpenMP build follows LibTorch's setting.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace zhost::engine {

struct CpuBudget {
  std::vector<int> usable_cpus;      // ids from the affinity mask, ascending
  std::optional<double> quota_cpus;  // a cgroup's cpu.max quota / period, when one limits the process
};

struct ThreadRequest {
  int requested_threads = 0;           // run.intra_op_threads; 0 = decide
  std::optional<int> omp_num_threads;  // OMP_NUM_THREADS, when set to a positive integer
  bool pin = false;                    // run.pin_ranks
  int local_rank = 0;
  int local_world_size = 1;
};

// The request of local rank `local_rank` of `local_world_size`, with OMP_NUM_THREADS read from the environment.
ThreadRequest thread_request(int requested_threads, bool pin, int local_rank, int local_world_size);

struct ThreadPlan {
  int threads = 1;
  std::vector<int> cpus;        // the CPUs to bind this rank to; empty = leave the affinity alone
  std::string origin;           // why this many: "run.intra_op_threads", "OMP_NUM_THREADS" or "CPUs / local ranks"
  bool oversubscribed = false;  // more threads than this rank's share of the usable CPUs
};

// This process's CPUs: sched_getaffinity and, where the process sits in a cgroup v2 with a quota, cpu.max.
CpuBudget read_cpu_budget();

// A pure function of its inputs (see the note above); throws UsageError for a request it cannot honour.
ThreadPlan plan_threads(const CpuBudget& budget, const ThreadRequest& request);

// OMP_NUM_THREADS as the threads of the outermost level ("4" or "4,2" -> 4); unset or not a positive
// integer -> nothing.
std::optional<int> omp_num_threads();

// Binds the calling process to plan.cpus (when any) and sets LibTorch's and OpenBLAS's thread counts.
void apply_thread_plan(const ThreadPlan& plan);

// What this process runs with now, read back from LibTorch and the kernel: "2 intra-op thread(s) on CPUs 0-1".
std::string threads_in_effect();

// "0-3,8" for the CPU list [0, 1, 2, 3, 8].
std::string cpu_list_text(const std::vector<int>& cpus);

}  // namespace zhost::engine
