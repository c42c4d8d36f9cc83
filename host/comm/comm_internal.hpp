// host/comm/comm_internal.hpp: private to host/comm (comm.hpp does not include it, and nothing outside host/comm
// does: Layout.CommPrivateHeadersStayInComm). The state the two halves of Comm share: rendezvous.cpp makes the
// job and its groups (store, backends, node layout); collectives.cpp runs the collectives on them (Work::State,
// one collective in flight, and the job's first failure).
#pragma once

#include <ATen/Context.h>
#include <ATen/core/Tensor.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "host/comm/c10d_compat.hpp"
#include "host/comm/comm.hpp"
#include "host/comm/progress.hpp"
#include "host/comm/traffic.hpp"
#include "host/core/error.hpp"
#include "host/core/text.hpp"

namespace zhost::comm {

using Clock = std::chrono::steady_clock;

namespace detail {

inline std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

[[noreturn]] inline void fail_rank(const std::string& message) { throw Error(message, ExitCode::kRankFailed); }

inline std::string join_ints(const std::vector<int>& values, std::string_view separator = ", ") {
  std::vector<std::string> items;
  for (int value : values) items.push_back(std::to_string(value));
  return text::join(items, separator);
}

inline bool cuda_usable() {
#ifdef ZHOST_WITH_CUDA
  return at::hasCUDA();
#else
  return false;
#endif
}

// What the world group and all its sub-groups share: the store, the progress tracker, the step, the
// first failure. Destroyed after the last group.
struct Job {
  int global_rank = 0;
  int global_size = 1;
  CommOptions options;
  std::chrono::milliseconds timeout{0};
  std::string store_address;  // "host:port", for messages
  compat::StorePtr store;
  std::unique_ptr<ProgressTracker> tracker;
  std::shared_ptr<::gloo::transport::Device> gloo_device;
  bool use_gloo = true;
  bool use_nccl = false;
  std::atomic<int64_t> step{-1};
  bool joined = false;  // every rank came to the rendezvous

  // By global rank, nodes numbered from 0 (Comm::node_of_rank, Note [Node layout]).
  std::vector<int> node_of_rank;
  int num_nodes = 1;

  // Every group's counters together (Comm::job_counters), kept here so that a sub-group destroyed during a
  // step still counts in it.
  mutable std::mutex counters_mutex;
  CommCounters totals;
  CommCounters at_step_start;

  std::mutex mutex;  // guards groups, failure, group_names
  std::vector<std::weak_ptr<Comm::Group>> groups;
  std::string failure;
  std::map<std::string, int> group_names;  // how often each sub-group name was created
  std::atomic<bool> failed{false};

  ~Job();  // say_goodbye()

  // Leaving the rendezvous store (rendezvous.cpp).
  void say_goodbye();

  // The job's first failure is kept: every later collective fails at once with it (collectives.cpp).
  [[noreturn]] void record_failure_and_throw(const std::string& message);
  void throw_if_failed();
};

}  // namespace detail

// One group's backends and bookkeeping; made by make_group() in rendezvous.cpp, its collectives run in
// collectives.cpp.
struct Comm::Group : std::enable_shared_from_this<Comm::Group> {
  std::shared_ptr<detail::Job> job;
  std::string name;
  std::vector<int> global_ranks;
  int rank = 0;
  int size = 1;
  compat::StorePtr store;  // prefixed "zhost/g/<name>/"
  compat::BackendPtr gloo;
  compat::BackendPtr nccl;
  std::shared_ptr<detail::GroupProgress> progress;
  RemotePeers remote;      // by group rank: on another node than this rank (Note [Inter-node traffic])
  std::mutex issue_mutex;  // sequence numbers follow the order collectives reach the backend

  mutable std::mutex counters_mutex;
  CommCounters totals;
  CommCounters at_step_start;

  // After a failure the backends are left behind, not destroyed (rendezvous.cpp).
  ~Group();

  std::unique_ptr<Work::State> start(CollectiveKind kind, const Traffic& traffic, bool on_cuda);
  // Starts the backend's work with `call`, which gets the collective's state (to stage tensors into).
  Work issue(std::unique_ptr<Work::State> state, const std::function<compat::WorkPtr(Work::State&)>& call);
  // Note [One-rank groups]: runs what the collective amounts to on one rank, completed on return.
  Work complete_locally(std::unique_ptr<Work::State> state, const std::function<void()>& local);
  const compat::BackendPtr& backend_for(const at::Tensor& tensor, CollectiveKind kind) const;
  const compat::BackendPtr& barrier_backend() const { return gloo ? gloo : nccl; }
  // Note [One-rank groups]; with CommOptions::one_rank_groups_use_nccl, NCCL's own path instead.
  bool completes_locally() const { return size == 1 && !(job->options.one_rank_groups_use_nccl && nccl); }
  // Note [Gloo and CUDA tensors]: what `backend` is handed for `tensor`: the tensor itself, or a copy where the
  // backend moves the other kind of memory - for Gloo a host copy of a CUDA tensor, for NCCL a device copy of a
  // host tensor (kIn: with the tensor's values; kOut: copied back into the tensor when the work completes;
  // kInOut: both).
  enum class Staging { kIn, kOut, kInOut };
  at::Tensor staged(Work::State& state, const compat::BackendPtr& backend, const at::Tensor& tensor, Staging how) const;
  [[noreturn]] void fail_collective(const Work::State& state, const std::string& cause);
  void warn_waiting(const Work::State& state);
  // Who did not arrive at collective `seq` and who stopped responding, in words.
  std::string describe_peers(uint64_t seq) const;
};

// One collective in flight (collectives.cpp).
struct Work::State {
  std::shared_ptr<Comm::Group> group;
  CollectiveKind kind = CollectiveKind::kBarrier;
  uint64_t seq = 0;
  int64_t step = -1;
  Clock::time_point started;
  Clock::time_point warn_at;  // a wait still going on then is logged as a warning, naming the stragglers
  Clock::time_point deadline;
  bool poll = false;  // CUDA work: poll completion (NCCL's wait() does not block the CPU)
  std::vector<compat::WorkPtr> works;
  // Note [Gloo and CUDA tensors]: (the caller's tensor, the copy the backend wrote into), copied back before finish.
  std::vector<std::pair<at::Tensor, at::Tensor>> staged_outputs;
  std::function<void()> finish;  // local step after the network part (reduction, division)
  bool done = false;
};

}  // namespace zhost::comm
