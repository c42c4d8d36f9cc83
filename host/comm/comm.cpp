// host/comm/comm.cpp: Comm and Work over c10d: rendezvous, backend choice, the collectives (with Gloo's
// missing pieces built from all-to-all), deadlines and failure reports, sub-groups and byte counters.
#include "host/comm/comm.hpp"

#include <ATen/ATen.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <thread>

#include "host/comm/c10d_compat.hpp"
#include "host/comm/progress.hpp"
#include "host/comm/store_listener.hpp"
#include "host/core/error.hpp"
#include "host/core/text.hpp"

namespace zhost::comm {

using Clock = std::chrono::steady_clock;

namespace {

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

[[noreturn]] void fail_rank(const std::string& message) { throw Error(message, ExitCode::kRankFailed); }

std::string join_ints(const std::vector<int>& values, std::string_view separator = ", ") {
  std::vector<std::string> items;
  for (int value : values) items.push_back(std::to_string(value));
  return text::join(items, separator);
}

bool is_loopback(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

bool cuda_usable() {
#ifdef ZHOST_WITH_CUDA
  return at::hasCUDA();
#else
  return false;
#endif
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return c10d::ReduceOp::SUM;
    case ReduceOp::kAvg:
      return c10d::ReduceOp::AVG;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
  }
  ZHOST_ASSERT(false);
}

// The local IPv4 address the kernel routes to `master_addr` from (a UDP socket connected to it sends nothing),
// or "" when there is no route or the name does not resolve.
std::string local_address_towards(const std::string& master_addr) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(master_addr.c_str(), "9", &hints, &found) != 0 || !found) return "";
  std::string address;
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t length = sizeof local;
    char text[INET_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, text, sizeof text))
      address = text;
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  return address;
}

// Where Gloo listens: comm.gloo_interface / GLOO_SOCKET_IFNAME when given; loopback for a loopback master;
// else the address this host reaches the master from (so that nodes whose host name resolves to a loopback
// address, Debian's 127.0.1.1, or to another network still connect); else Gloo's default.
std::shared_ptr<::gloo::transport::Device> choose_gloo_device(const CommOptions& options,
                                                              const std::string& master_addr) {
  std::string interface = options.gloo_interface;
  if (interface.empty()) {
    const char* from_env = std::getenv("GLOO_SOCKET_IFNAME");
    interface = from_env ? std::string(from_env).substr(0, std::string(from_env).find(',')) : "";
  }
  if (!interface.empty()) return compat::gloo_device_for_interface(interface);
  if (is_loopback(master_addr)) return compat::gloo_device_for_hostname("127.0.0.1");
  const std::string towards_master = local_address_towards(master_addr);
  if (!towards_master.empty()) return compat::gloo_device_for_hostname(towards_master);
  return compat::gloo_default_device();
}

// Note [One summation order]: every SUM (and AVG) a reduce-scatter computes adds the ranks'
// contributions one at a time in rank order, ((x_0 + x_1) + x_2) + ..., elementwise; 16-bit tensors are
// summed in fp32 and rounded once. The result of an element therefore depends only on the values the ranks
// contributed, not on the backend's algorithm, on how the elements were split into buckets or partitions,
// or on which rank owns them. The ZeRO stages (stage 0 included) reduce every gradient through
// reduce-scatter, which is what makes them bitwise equal to one another (docs/architecture.md, "One
// summation order"). all_reduce keeps the backend's own order (Gloo's ring, NCCL's): use it for values
// whose bits do not matter or that are exact (integer sums, max, min).
void reduce_chunks(const at::Tensor& chunks, const at::Tensor& output, ReduceOp op) {
  at::Tensor out = output;
  const int64_t ranks = chunks.size(0);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: {
      const bool widen = out.scalar_type() == at::kBFloat16 || out.scalar_type() == at::kHalf;
      at::Tensor sum = widen ? chunks[0].to(at::kFloat) : out.copy_(chunks[0]);
      for (int64_t rank = 1; rank < ranks; ++rank) sum.add_(chunks[rank]);
      if (op == ReduceOp::kAvg) sum.div_(static_cast<double>(ranks));
      if (widen) out.copy_(sum);
      break;
    }
    case ReduceOp::kMax: {
      const int64_t rank_dim[] = {0};
      at::amax_out(out, chunks, at::IntArrayRef(rank_dim));
      break;
    }
    case ReduceOp::kMin: {
      const int64_t rank_dim[] = {0};
      at::amin_out(out, chunks, at::IntArrayRef(rank_dim));
      break;
    }
  }
}

// Gloo (LibTorch 1.13) moves no bfloat16. Collectives that only move data send bf16 as fp16 bits (same
// bytes); reductions of bf16 run in fp32 (see all_reduce_async) or reduce locally after an all-to-all.
at::Tensor on_the_wire(const at::Tensor& tensor, bool gloo) {
  return gloo && tensor.scalar_type() == at::kBFloat16 ? tensor.view(at::kHalf) : tensor;
}

}  // namespace

Backend parse_backend(const std::string& name) {
  if (name == "auto") return Backend::kAuto;
  if (name == "gloo") return Backend::kGloo;
  if (name == "nccl") return Backend::kNccl;
  fail_usage("unknown comm.backend '{}': use auto, gloo or nccl{}", name,
             text::did_you_mean(name, {"auto", "gloo", "nccl"}));
}

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::kAuto:
      return "auto";
    case Backend::kGloo:
      return "gloo";
    case Backend::kNccl:
      return "nccl";
  }
  return "?";
}

// ---- job-wide state ----------------------------------------------------------------------------------

namespace {

constexpr std::chrono::milliseconds kLingerAtExit{10000};
constexpr std::chrono::milliseconds kLingerAfterFailure{1500};
// A collective still waiting after a quarter of comm.timeout_s, or after this long, warns.
constexpr std::chrono::seconds kStragglerWarningAfter{30};

// What the world group and all its sub-groups share: the store, the progress tracker, the step, the
// first failure. Destroyed after the last group.
struct Job {
  int global_rank = 0;
  int global_size = 1;
  CommOptions options;
  std::chrono::milliseconds timeout{0};
  std::string store_address;  // "host:port", for messages
  compat::StorePtr store;
  std::unique_ptr<detail::ProgressTracker> tracker;
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

  ~Job() { say_goodbye(); }

  // Rank 0 hosts the store: it waits (bounded) for the others to finish with it before taking it down, so
  // that their last store operations, and after a failure their report of who did not arrive, still work.
  // The others say goodbye on the tracker's connection (replies bounded), unless the store stopped answering.
  void say_goodbye() {
    if (!tracker) return;
    const compat::StorePtr last_words = tracker->store();
    const bool store_answers = tracker->store_error().empty();
    tracker.reset();
    if (global_size == 1 || !joined || !store_answers) return;
    try {
      last_words->add("zhost/exit", 1);
      if (global_rank != 0) return;
      const auto linger = failed ? kLingerAfterFailure : std::min(timeout, kLingerAtExit);
      const auto deadline = Clock::now() + linger;
      while (last_words->add("zhost/exit", 0) < global_size && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    } catch (const std::exception& e) {
      spdlog::debug("comm: leaving the rendezvous store: {}", compat::describe_exception(e));
    }
  }

  [[noreturn]] void record_failure_and_throw(const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (failure.empty()) failure = message;
    }
    failed = true;
    fail_rank(message);
  }

  void throw_if_failed() {
    if (!failed) return;
    std::lock_guard<std::mutex> lock(mutex);
    fail_rank(fmt::format("an earlier collective failed, the process group is unusable: {}", failure));
  }
};

}  // namespace

// ---- groups ------------------------------------------------------------------------------------------

struct Comm::Group : std::enable_shared_from_this<Comm::Group> {
  std::shared_ptr<Job> job;
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

  // After a failure the backends are left behind, not destroyed: destroying one waits for every collective
  // still queued in it, and with a stopped peer each of those runs into comm.timeout_s in turn. The process
  // is on its way out; leaving now lets the launcher see the failure at once.
  ~Group() {
    if (!job || !job->failed) return;
    for (compat::BackendPtr* backend : {&gloo, &nccl}) {
      if (*backend) static_cast<void>(backend->release());  // deliberately leaked
    }
  }

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

std::unique_ptr<Work::State> Comm::Group::start(CollectiveKind kind, const Traffic& traffic, bool on_cuda) {
  job->throw_if_failed();
  auto state = std::make_unique<Work::State>();
  state->group = shared_from_this();
  state->kind = kind;
  state->seq = progress->entered.load() + 1;
  state->step = job->step.load();
  state->started = Clock::now();
  state->deadline = state->started + job->timeout;
  state->warn_at = state->started + std::min<Clock::duration>(job->timeout / 4, kStragglerWarningAfter);
  state->poll = on_cuda;
  progress->last_kind = static_cast<int>(kind);
  progress->entered = state->seq;
  {
    std::lock_guard<std::mutex> lock(counters_mutex);
    totals[kind].add(traffic);
  }
  std::lock_guard<std::mutex> job_lock(job->counters_mutex);
  job->totals[kind].add(traffic);
  return state;
}

Work Comm::Group::issue(std::unique_ptr<Work::State> state, const std::function<compat::WorkPtr(Work::State&)>& call) {
  try {
    state->works.push_back(call(*state));
  } catch (const std::exception& e) {
    fail_collective(*state, "backend error: " + compat::describe_exception(e));
  }
  return Work(std::move(state));
}

// Note [One-rank groups]: a group of one rank has nothing to exchange. Its collectives skip the backend
// (whose worker thread would wake, copy single-threaded and signal back) and run as what they amount to
// there - nothing for an all-reduce, a broadcast or a barrier, a copy of input into output for an
// all-gather, reduce-scatter or all-to-all - in the caller's thread (on the current stream for CUDA
// tensors), complete when they return. The same bits as the backend's result: a sum, average, max or min
// over one rank is the rank's own value. Sequence numbers and traffic (zero bytes) count as for any
// collective.
// Note [Gloo and CUDA tensors]: Gloo moves host memory. CUDA tensors reach it only where several ranks share one
// GPU (CommOptions::cuda_over_gloo, set by tests: debug.share_cuda_device), or where comm.backend = "gloo" is
// asked for on GPUs; each collective then hands Gloo host copies of its CUDA tensors, made in the caller's
// thread before the collective is issued (which waits for the tensor's stream), and copies what Gloo wrote
// back to the device when the work completes, before the collective's own finishing step. Slow (two copies
// through pageable memory), and meant for correctness tests on one GPU, not for training.
// The other way round, comm.backend = "nccl" has no Gloo: host tensors (the engine's agreements between ranks:
// the model's identity, a failed rank's error, a checkpoint's outcome) travel as device copies the same way.
// They are a few bytes each, once per run or per save.
at::Tensor Comm::Group::staged(Work::State& state, const compat::BackendPtr& backend, const at::Tensor& tensor,
                               Staging how) const {
  const bool on_nccl = backend == nccl;
  if (on_nccl) state.poll = true;  // NCCL's work is on a CUDA stream, its wait() does not block the CPU
  if (on_nccl == tensor.is_cuda()) return tensor;
  // kCUDA without an index: the current device, the one NCCL's communicator was made on.
  const at::TensorOptions wire_options = tensor.options().device(on_nccl ? at::Device(at::kCUDA) : at::kCPU);
  at::Tensor wire = how == Staging::kOut ? at::empty_like(tensor, wire_options)
                                         : tensor.to(wire_options, /*non_blocking=*/false, /*copy=*/true);
  if (how != Staging::kIn) state.staged_outputs.emplace_back(tensor, wire);
  return wire;
}

Work Comm::Group::complete_locally(std::unique_ptr<Work::State> state, const std::function<void()>& local) {
  try {
    local();
  } catch (const std::exception& e) {
    fail_collective(*state, "local copy failed: " + compat::describe_exception(e));
  }
  state->done = true;
  return Work(std::move(state));
}

const compat::BackendPtr& Comm::Group::backend_for(const at::Tensor& tensor, CollectiveKind kind) const {
  if (tensor.is_cuda()) {
    if (nccl) return nccl;
    if (job->options.backend == Backend::kGloo || job->options.cuda_over_gloo) return gloo;
    fail_usage("{}: the tensor is on CUDA but NCCL is not available ({}); move it to the CPU or use a CUDA build",
               to_string(kind), cuda_usable() ? "comm.backend excludes it" : "this zhost has no CUDA");
  }
  if (!tensor.device().is_cpu()) fail("{}: tensors on {} are not supported", to_string(kind), tensor.device().str());
  return gloo ? gloo : nccl;  // comm.backend = "nccl": through the GPU (Note [Gloo and CUDA tensors])
}

std::string Comm::Group::describe_peers(uint64_t seq) const {
  if (size == 1) return "single-rank group";
  const detail::PeerReport report = job->tracker->diagnose(*progress, global_ranks);
  if (!report.store_error.empty()) {
    return fmt::format(
        "rank 0 does not answer: the rendezvous store it hosts at {} failed ({}); rank 0 is stopped, "
        "frozen or gone",
        job->store_address, report.store_error);
  }
  std::vector<std::string> problems;
  for (size_t member = 0; member < report.members.size(); ++member) {
    const detail::MemberProgress& peer = report.members[member];
    if (static_cast<int>(member) == rank) continue;
    if (!peer.responding) {
      problems.push_back(
          fmt::format("rank {} stopped responding (its process is gone or frozen)", global_ranks[member]));
    } else if (peer.last_seq < seq) {
      problems.push_back(
          fmt::format("rank {} did not arrive (its last collective in this group: {})", global_ranks[member],
                      peer.last_seq == 0 ? std::string("none") : fmt::format("#{} {}", peer.last_seq, peer.last_kind)));
    }
  }
  return problems.empty() ? "every rank arrived" : text::join(problems, "; ");
}

void Comm::Group::fail_collective(const Work::State& state, const std::string& cause) {
  const double elapsed = seconds_since(state.started);
  const std::string peers = describe_peers(state.seq);
  const std::string step = state.step >= 0 ? fmt::format(", step {}", state.step) : "";
  job->record_failure_and_throw(fmt::format("{} #{} (group {}{}) failed on rank {} after {:.1f} s: {}; {}",
                                            to_string(state.kind), state.seq, name, step, job->global_rank, elapsed,
                                            peers, cause));
}

void Comm::Group::warn_waiting(const Work::State& state) {
  const double waited = seconds_since(state.started);
  const std::string step = state.step >= 0 ? fmt::format(", step {}", state.step) : "";
  spdlog::warn("{} #{} (group {}{}) has waited {:.1f} s on rank {} (comm.timeout_s = {:g}): {}", to_string(state.kind),
               state.seq, name, step, waited, job->global_rank, job->options.timeout_s, describe_peers(state.seq));
}

// ---- Work --------------------------------------------------------------------------------------------

namespace {

// Waits for one backend work until `deadline`; false when the deadline passed first.
bool wait_until(const compat::WorkPtr& work, Clock::time_point deadline, bool poll) {
  if (poll) {
    while (!work->isCompleted()) {
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    work->wait();  // rethrows the backend's error, orders the current CUDA stream after the collective
    return true;
  }
  // A backend's timed wait can end a little before `deadline` on our clock (its timeout is whole
  // milliseconds, its timer not ours): a work that is not completed then has only timed out, and is waited
  // for again until the deadline has passed. A completed work that throws failed.
  for (;;) {
    const auto remaining = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    try {
      work->wait(std::max(remaining, std::chrono::milliseconds(1)));
      return true;
    } catch (const std::exception&) {
      if (work->isCompleted()) throw;
      if (Clock::now() >= deadline) return false;
    }
  }
}

}  // namespace

Work::Work() = default;
Work::Work(std::unique_ptr<State> state) : state_(std::move(state)) {}
Work::Work(Work&&) noexcept = default;
Work& Work::operator=(Work&&) noexcept = default;
Work::~Work() = default;

void Work::wait() {
  if (!state_ || state_->done) return;
  State& state = *state_;
  for (const compat::WorkPtr& work : state.works) {
    bool in_time = false;
    try {
      if (Clock::now() < state.warn_at && !wait_until(work, state.warn_at, state.poll)) {
        state.group->warn_waiting(state);
      }
      in_time = wait_until(work, state.deadline, state.poll);
    } catch (const std::exception& e) {
      state.group->fail_collective(state, "backend error: " + compat::describe_exception(e));
    }
    if (!in_time) {
      state.group->fail_collective(
          state, fmt::format("its deadline of {:.1f} s (comm.timeout_s) passed", state.group->job->options.timeout_s));
    }
  }
  for (auto& [caller, wire] : state.staged_outputs) caller.copy_(wire);
  if (state.finish) state.finish();
  state.done = true;
}

bool Work::is_completed() const {
  if (!state_ || state_->done) return true;
  return std::all_of(state_->works.begin(), state_->works.end(),
                     [](const compat::WorkPtr& work) { return work->isCompleted(); });
}

// ---- creation ----------------------------------------------------------------------------------------

namespace {

std::shared_ptr<Comm::Group> make_group(const std::shared_ptr<Job>& job, const std::string& name,
                                        std::vector<int> global_ranks, int rank) {
  auto group = std::make_shared<Comm::Group>();
  group->job = job;
  group->name = name;
  group->size = static_cast<int>(global_ranks.size());
  group->global_ranks = std::move(global_ranks);
  group->rank = rank;
  for (int member : group->global_ranks)
    group->remote.push_back(job->node_of_rank[member] != job->node_of_rank[job->global_rank]);
  const std::string prefix = fmt::format("zhost/g/{}/", name);
  group->store = compat::make_prefix_store(prefix, job->store);
  group->progress = std::make_shared<detail::GroupProgress>(prefix, rank);
  const auto started = Clock::now();
  try {
    if (job->use_gloo) {
      group->gloo = compat::make_gloo(compat::make_prefix_store("gloo/", group->store), rank, group->size, job->timeout,
                                      job->gloo_device);
    }
#ifdef ZHOST_WITH_CUDA
    if (job->use_nccl) {
      group->nccl =
          compat::make_nccl(compat::make_prefix_store("nccl/", group->store), rank, group->size, job->timeout);
    }
#endif
  } catch (const std::exception& e) {
    fail_rank(
        fmt::format("could not connect the ranks of group {} ({}), gave up after {:.1f} s "
                    "(comm.timeout_s = {:g}): {}",
                    name, join_ints(group->global_ranks), seconds_since(started), job->options.timeout_s,
                    compat::describe_exception(e)));
  }
  job->tracker->add(group->progress);
  std::lock_guard<std::mutex> lock(job->mutex);
  job->groups.push_back(group);
  return group;
}

void choose_backends(Job& job) {
  switch (job.options.backend) {
    case Backend::kAuto:
      job.use_nccl = cuda_usable() && !job.options.cuda_over_gloo;  // NCCL refuses two ranks on one GPU
      break;
    case Backend::kGloo:
      break;
    case Backend::kNccl:
#ifndef ZHOST_WITH_CUDA
      fail_usage(
          "comm.backend = \"nccl\" needs CUDA, but this zhost was built against a LibTorch without CUDA; "
          "use \"gloo\" or \"auto\"");
#endif
      if (!cuda_usable()) {
        fail_usage(
            "comm.backend = \"nccl\" needs a CUDA device, but none is visible (check CUDA_VISIBLE_DEVICES); "
            "use \"gloo\" or \"auto\"");
      }
      if (job.options.cuda_over_gloo)
        fail_usage(
            "debug.share_cuda_device puts several ranks on one GPU, which NCCL refuses: use comm.backend = "
            "\"gloo\" or \"auto\"");
      job.use_gloo = false;
      job.use_nccl = true;
      break;
  }
  if (job.options.one_rank_groups_use_nccl && !job.use_nccl)
    fail_usage(
        "debug.nccl_single_rank needs NCCL: a CUDA build, a visible GPU and comm.backend = \"auto\" or "
        "\"nccl\"");
}

void validate(const Rendezvous& rendezvous, const CommOptions& options) {
  if (rendezvous.world_size < 1) fail_usage("world size must be at least 1, got {}", rendezvous.world_size);
  if (rendezvous.rank < 0 || rendezvous.rank >= rendezvous.world_size) {
    fail_usage("rank {} is outside the world of {} ranks", rendezvous.rank, rendezvous.world_size);
  }
  if (rendezvous.world_size > 1 && (rendezvous.master_port < 1 || rendezvous.master_port > 65535)) {
    fail_usage("master port {} is not a valid TCP port (1-65535)", rendezvous.master_port);
  }
  if (rendezvous.timeout_s <= 0) fail_usage("the rendezvous timeout must be positive, got {} s", rendezvous.timeout_s);
  if (options.timeout_s <= 0) fail_usage("comm.timeout_s must be positive, got {}", options.timeout_s);
}

// Note [Node layout]: each rank publishes what it knows of its node under zhost/node/<rank> when it joins:
// "<local world size>\n<launcher>\n<the variable it came from>\n<node>". After the join every rank reads all of them,
// numbers the nodes in the order of their smallest rank, and checks each rank's local world size against the ranks that
// share its node string. Every rank reads the same values, so every rank reaches the same verdict: a wrong
// LOCAL_WORLD_SIZE stops all of them with the same message instead of leaving some waiting for the others.
std::string node_key(int rank) { return fmt::format("zhost/node/{}", rank); }

std::vector<uint8_t> encode_node(const Rendezvous& rendezvous) {
  const std::string text = fmt::format("{}\n{}\n{}\n{}", rendezvous.local_world_size, rendezvous.launcher,
                                       rendezvous.local_world_size_from, rendezvous.node);
  return std::vector<uint8_t>(text.begin(), text.end());
}

struct NodeOfRank {
  int local_world_size = 0;
  std::string launcher;
  std::string variable;  // where the launcher's local world size came from
  std::string node;
};

NodeOfRank decode_node(const std::vector<uint8_t>& value, int rank) {
  const std::string text(value.begin(), value.end());
  const size_t first = text.find('\n');
  const size_t second = first == std::string::npos ? first : text.find('\n', first + 1);
  const size_t third = second == std::string::npos ? second : text.find('\n', second + 1);
  NodeOfRank decoded;
  try {
    if (third == std::string::npos) throw std::invalid_argument("no separator");
    decoded.local_world_size = std::stoi(text.substr(0, first));
  } catch (const std::exception&) {
    fail_rank(
        fmt::format("rendezvous: rank {} published a malformed node record '{}' (another zhost version?)", rank, text));
  }
  decoded.launcher = text.substr(first + 1, second - first - 1);
  decoded.variable = text.substr(second + 1, third - second - 1);
  decoded.node = text.substr(third + 1);
  return decoded;
}

void exchange_nodes(Job& job, const Rendezvous& rendezvous) {
  std::vector<NodeOfRank> ranks;
  std::vector<std::string> keys;
  for (int rank = 0; rank < rendezvous.world_size; ++rank) keys.push_back(node_key(rank));
  try {
    job.store->wait(keys, to_ms(rendezvous.timeout_s));  // present already (Note [Node layout]): bounded anyway
    for (int rank = 0; rank < rendezvous.world_size; ++rank)
      ranks.push_back(decode_node(job.store->get(keys[rank]), rank));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail_rank(fmt::format("rendezvous at {}: rank {} could not read the ranks' nodes within {:.1f} s: {}",
                          job.store_address, rendezvous.rank, rendezvous.timeout_s, compat::describe_exception(e)));
  }
  std::map<std::string, int> number;
  std::vector<std::vector<int>> members;
  for (int rank = 0; rank < rendezvous.world_size; ++rank) {
    const auto [it, added] = number.emplace(ranks[rank].node, static_cast<int>(members.size()));
    if (added) members.emplace_back();
    members[it->second].push_back(rank);
    job.node_of_rank.push_back(it->second);
  }
  job.num_nodes = static_cast<int>(members.size());
  for (int rank = 0; rank < rendezvous.world_size; ++rank) {
    const NodeOfRank& told = ranks[rank];
    const std::vector<int>& same_node = members[job.node_of_rank[rank]];
    if (told.local_world_size <= 0 || told.local_world_size == static_cast<int>(same_node.size())) continue;
    fail_usage(
        "the ranks do not agree on the nodes: {} told rank {} that {} rank{} run on its node ({}), but {} rank{} "
        "({}) name its node '{}'; give the ranks of a node the same node identity (--node-rank, GROUP_RANK, "
        "SLURM_NODEID, else the host name) and their number as {}",
        told.launcher, rank, told.local_world_size, told.local_world_size == 1 ? "" : "s", told.variable,
        same_node.size(), same_node.size() == 1 ? "" : "s", join_ints(same_node), told.node, told.variable);
  }
}

// Every rank registers under its rank; waiting for all of them names the ranks that never came.
void join(Job& job, const Rendezvous& rendezvous) {
  const auto join_key = [](int rank) { return fmt::format("zhost/join/{}", rank); };
  int64_t joined_as = 0;
  try {
    // Before the join key, on the same connection: once a rank has joined, its node is in the store.
    job.store->set(node_key(rendezvous.rank), encode_node(rendezvous));
    joined_as = job.store->add(join_key(rendezvous.rank), 1);
  } catch (const std::exception& e) {
    fail_rank(
        fmt::format("rendezvous at {}: the store did not answer rank {}'s join ({}); rank 0 hosts it: is it "
                    "stopped or gone?",
                    job.store_address, rendezvous.rank, compat::describe_exception(e)));
  }
  if (joined_as > 1) {
    fail_usage("two processes joined the rendezvous at {} as rank {}: check RANK in each process's environment",
               job.store_address, rendezvous.rank);
  }
  std::vector<std::string> keys;
  for (int rank = 0; rank < rendezvous.world_size; ++rank) keys.push_back(join_key(rank));
  try {
    job.store->wait(keys, to_ms(rendezvous.timeout_s));
  } catch (const std::exception& e) {
    std::vector<int> missing;
    try {
      for (int rank = 0; rank < rendezvous.world_size; ++rank) {
        if (!job.store->check({keys[rank]})) missing.push_back(rank);
      }
    } catch (const std::exception&) {
      fail_rank(fmt::format("rendezvous at {} failed: {}", job.store_address, compat::describe_exception(e)));
    }
    fail_rank(fmt::format("rendezvous at {} timed out after {:.1f} s: {} of {} ranks joined; missing: rank{} {}",
                          job.store_address, rendezvous.timeout_s, rendezvous.world_size - missing.size(),
                          rendezvous.world_size, missing.size() == 1 ? "" : "s", join_ints(missing)));
  }
}

compat::StorePtr connect_store(const Rendezvous& rendezvous, bool host_it) {
  // The client's own retries would wait the whole timeout again after this one (store_listener.hpp).
  if (!host_it &&
      !detail::wait_until_listening(rendezvous.master_addr, rendezvous.master_port,
                                    Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                       std::chrono::duration<double>(rendezvous.timeout_s)))) {
    throw std::runtime_error(
        "nothing accepted a connection there; rank 0 hosts the store: check that it started and that MASTER_ADDR "
        "and MASTER_PORT name its host and port");
  }
  return compat::make_tcp_store(rendezvous.master_addr, rendezvous.master_port, host_it, rendezvous.world_size,
                                to_ms(rendezvous.timeout_s));
}

}  // namespace

std::unique_ptr<Comm> Comm::create(const Rendezvous& rendezvous, const CommOptions& options) {
  validate(rendezvous, options);
  auto job = std::make_shared<Job>();
  job->global_rank = rendezvous.rank;
  job->global_size = rendezvous.world_size;
  job->options = options;
  job->timeout = to_ms(options.timeout_s);
  job->store_address = fmt::format("{}:{}", rendezvous.master_addr, rendezvous.master_port);
  choose_backends(*job);

  compat::StorePtr publish_store, ask_store;
  const auto started = Clock::now();
  if (rendezvous.world_size == 1) {
    job->store = c10::make_intrusive<c10d::HashStore>();
    publish_store = ask_store = job->store;
  } else {
    try {
      job->store = connect_store(rendezvous, rendezvous.rank == 0);
      // Every reply, from the first (join's), within the rendezvous timeout: rank 0 may be stopped.
      compat::bound_replies(job->store, to_ms(rendezvous.timeout_s));
      publish_store = connect_store(rendezvous, false);  // the tracker's own: never queued behind a wait
      ask_store = connect_store(rendezvous, false);
    } catch (const std::exception& e) {
      fail_rank(
          fmt::format("rendezvous: rank {} could not {} the store at {}, gave up after {:.1f} s "
                      "(comm.timeout_s = {:g}): {}",
                      rendezvous.rank, rendezvous.rank == 0 ? "host" : "reach", job->store_address,
                      seconds_since(started), rendezvous.timeout_s, compat::describe_exception(e)));
    }
  }
  join(*job, rendezvous);
  job->joined = true;
  job->tracker = std::make_unique<detail::ProgressTracker>(publish_store, ask_store, rendezvous.rank);
  exchange_nodes(*job, rendezvous);  // after the tracker: rank 0 keeps the store up until all have read
  if (job->use_gloo) job->gloo_device = choose_gloo_device(options, rendezvous.master_addr);

  std::vector<int> everyone(rendezvous.world_size);
  std::iota(everyone.begin(), everyone.end(), 0);
  auto group = make_group(job, "world", std::move(everyone), rendezvous.rank);
  spdlog::debug("comm: rank {} of {} joined at {} (node {} of {}; gloo: {}, nccl: {}, timeout {} s)", rendezvous.rank,
                rendezvous.world_size, job->store_address, job->node_of_rank[rendezvous.rank], job->num_nodes,
                job->use_gloo, job->use_nccl, options.timeout_s);
  return std::unique_ptr<Comm>(new Comm(std::move(group)));
}

Comm::Comm(std::shared_ptr<Group> group) : group_(std::move(group)) {}
Comm::~Comm() = default;

int Comm::rank() const { return group_->rank; }
int Comm::world_size() const { return group_->size; }
const std::vector<int>& Comm::global_ranks() const { return group_->global_ranks; }
const std::string& Comm::name() const { return group_->name; }
const std::vector<int>& Comm::node_of_rank() const { return group_->job->node_of_rank; }
int Comm::num_nodes() const { return group_->job->num_nodes; }
const RemotePeers& Comm::remote_peers() const { return group_->remote; }

std::unique_ptr<Comm> Comm::new_group(const std::vector<int>& ranks) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  if (ranks.empty()) fail("new_group: the rank list is empty");
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    fail("new_group: rank list [{}] has duplicates", join_ints(ranks));
  }
  if (sorted.front() < 0 || sorted.back() >= group_->size) {
    fail("new_group: rank list [{}] has ranks outside group {} of {} ranks", join_ints(ranks), group_->name,
         group_->size);
  }
  const auto me = std::find(ranks.begin(), ranks.end(), group_->rank);
  if (me == ranks.end()) {
    fail("new_group: rank {} is not in [{}]; only members create a group", group_->rank, join_ints(ranks));
  }
  std::vector<int> members;
  for (int rank : ranks) members.push_back(group_->global_ranks[rank]);
  std::string name = fmt::format("{}/{}", group_->name, join_ints(members, "-"));
  {
    std::lock_guard<std::mutex> lock(group_->job->mutex);
    const int earlier = group_->job->group_names[name]++;
    if (earlier > 0) name += fmt::format("#{}", earlier);
  }
  std::lock_guard<std::mutex> issue_lock(group_->issue_mutex);
  return std::unique_ptr<Comm>(
      new Comm(make_group(group_->job, name, std::move(members), static_cast<int>(me - ranks.begin()))));
}

// ---- steps and counters ------------------------------------------------------------------------------

void Comm::begin_step(int64_t step) {
  Job& job = *group_->job;
  job.step = step;
  {
    std::lock_guard<std::mutex> counters_lock(job.counters_mutex);
    job.at_step_start = job.totals;
  }
  std::lock_guard<std::mutex> lock(job.mutex);
  for (const std::weak_ptr<Group>& weak : job.groups) {
    if (auto group = weak.lock()) {
      std::lock_guard<std::mutex> counters_lock(group->counters_mutex);
      group->at_step_start = group->totals;
    }
  }
}

CommCounters Comm::end_step() {
  CommCounters step = job_step_counters();
  group_->job->step = -1;
  return step;
}

int64_t Comm::current_step() const { return group_->job->step; }

void Comm::store_set(const std::string& key, const std::vector<uint8_t>& value) {
  try {
    group_->job->store->set("zhost/kv/" + key, value);
  } catch (const std::exception& e) {
    throw Error(fmt::format("key-value store at {}: set('{}') failed: {}", group_->job->store_address, key,
                            compat::describe_exception(e)),
                ExitCode::kRankFailed);
  }
}

std::optional<std::vector<uint8_t>> Comm::store_get(const std::string& key, double timeout_s) {
  const std::string full = "zhost/kv/" + key;
  auto deadline = std::chrono::steady_clock::now() + to_ms(timeout_s);
  try {
    // Poll rather than wait(): a c10d wait that times out throws, which cannot be told from a dead store.
    while (!group_->job->store->check({full})) {
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return group_->job->store->get(full);
  } catch (const std::exception& e) {
    throw Error(fmt::format("key-value store at {}: get('{}') failed: {}", group_->job->store_address, key,
                            compat::describe_exception(e)),
                ExitCode::kRankFailed);
  }
}

CommCounters Comm::counters() const {
  std::lock_guard<std::mutex> lock(group_->counters_mutex);
  return group_->totals;
}

CommCounters Comm::step_counters() const {
  std::lock_guard<std::mutex> lock(group_->counters_mutex);
  return group_->totals - group_->at_step_start;
}

CommCounters Comm::job_counters() const {
  std::lock_guard<std::mutex> lock(group_->job->counters_mutex);
  return group_->job->totals;
}

CommCounters Comm::job_step_counters() const {
  std::lock_guard<std::mutex> lock(group_->job->counters_mutex);
  return group_->job->totals - group_->job->at_step_start;
}

// ---- collectives -------------------------------------------------------------------------------------

namespace {

at::Tensor flat(const at::Tensor& tensor, CollectiveKind kind, const char* role) {
  if (!tensor.defined()) fail("{}: the {} tensor is undefined", to_string(kind), role);
  if (!tensor.is_contiguous()) fail("{}: the {} tensor must be contiguous", to_string(kind), role);
  return tensor.view({-1});
}

void expect_numel(const at::Tensor& tensor, int64_t expected, CollectiveKind kind, const char* role,
                  const std::string& why) {
  if (tensor.numel() != expected) {
    fail("{}: the {} tensor has {} elements but needs {} ({})", to_string(kind), role, tensor.numel(), expected, why);
  }
}

void expect_same_kind(const at::Tensor& input, const at::Tensor& output, CollectiveKind kind) {
  if (input.scalar_type() != output.scalar_type() || input.device() != output.device()) {
    fail("{}: input ({} on {}) and output ({} on {}) must have the same dtype and device", to_string(kind),
         c10::toString(input.scalar_type()), input.device().str(), c10::toString(output.scalar_type()),
         output.device().str());
  }
}

void expect_counts(const std::vector<int64_t>& counts, int size, CollectiveKind kind, const char* role) {
  if (static_cast<int>(counts.size()) != size) {
    fail("{}: {} has {} entries but the group has {} ranks", to_string(kind), role, counts.size(), size);
  }
  if (std::any_of(counts.begin(), counts.end(), [](int64_t count) { return count < 0; })) {
    fail("{}: {} has a negative count", to_string(kind), role);
  }
}

void expect_reducible(const at::Tensor& tensor, ReduceOp op, CollectiveKind kind) {
  if (op == ReduceOp::kAvg && !at::isFloatingType(tensor.scalar_type())) {
    fail("{}: AVG needs a floating-point tensor, got {}; reduce with SUM and divide", to_string(kind),
         c10::toString(tensor.scalar_type()));
  }
}

int64_t total(const std::vector<int64_t>& counts) { return std::accumulate(counts.begin(), counts.end(), int64_t{0}); }

std::vector<uint64_t> to_bytes(const std::vector<int64_t>& counts, const at::Tensor& tensor) {
  std::vector<uint64_t> bytes;
  for (int64_t count : counts) bytes.push_back(static_cast<uint64_t>(count) * tensor.element_size());
  return bytes;
}

uint64_t bytes_of(const at::Tensor& tensor) { return static_cast<uint64_t>(tensor.numel()) * tensor.element_size(); }

}  // namespace

Work Comm::all_reduce_async(const at::Tensor& tensor, ReduceOp op) {
  constexpr auto kind = CollectiveKind::kAllReduce;
  at::Tensor data = flat(tensor, kind, "reduced");
  expect_reducible(data, op, kind);
  const compat::BackendPtr& backend = group_->backend_for(data, kind);
  const bool gloo = backend != group_->nccl;
  const bool emulate_avg = op == ReduceOp::kAvg && gloo;
  c10d::AllreduceOptions options;
  options.reduceOp = to_c10d(emulate_avg ? ReduceOp::kSum : op);
  options.timeout = group_->job->timeout;

  std::lock_guard<std::mutex> lock(group_->issue_mutex);
  auto state = group_->start(kind, all_reduce_traffic(bytes_of(data), group_->size, group_->remote), data.is_cuda());
  if (group_->completes_locally()) return group_->complete_locally(std::move(state), [] {});
  // Gloo cannot reduce bf16: reduce an fp32 copy (counted as the bf16 bytes the caller asked to move).
  // A Gloo copy of a CUDA tensor is made in host memory (Note [Gloo and CUDA tensors]); finish copies it back.
  const at::Tensor wire = gloo && data.scalar_type() == at::kBFloat16
                              ? data.to(data.options().dtype(at::kFloat).device(at::kCPU))
                              : group_->staged(*state, backend, data, Group::Staging::kIn);
  if (emulate_avg || !wire.is_same(data))
    state->finish = [data, wire, emulate_avg, size = group_->size] {
      if (emulate_avg) wire.div_(size);
      if (!wire.is_same(data)) data.copy_(wire);
    };
  return group_->issue(std::move(state), [&](Work::State&) {
    std::vector<at::Tensor> tensors{wire};
    return backend->allreduce(tensors, options);
  });
}

Work Comm::reduce_scatter_async(const at::Tensor& input, const at::Tensor& output, ReduceOp op) {
  constexpr auto kind = CollectiveKind::kReduceScatter;
  at::Tensor in = flat(input, kind, "input");
  at::Tensor out = flat(output, kind, "output");
  expect_same_kind(in, out, kind);
  expect_numel(in, out.numel() * group_->size, kind, "input", "world size x output");
  // NCCL's own reduce-scatter sums in its ring's order: both backends go through the all-to-all, so that
  // the result is the same (Note [One summation order]).
  return reduce_scatter_v_async(in, out, std::vector<int64_t>(group_->size, out.numel()), op);
}

// An all-to-all sends each rank the pieces of its shard (the same bytes a ring reduce-scatter moves), then
// every rank reduces its w pieces locally in rank order (Note [One summation order]). Gloo has no
// reduce-scatter, NCCL none with uneven counts, and neither sums in a fixed order.
Work Comm::reduce_scatter_v_async(const at::Tensor& input, const at::Tensor& output, const std::vector<int64_t>& counts,
                                  ReduceOp op) {
  constexpr auto kind = CollectiveKind::kReduceScatter;
  at::Tensor in = flat(input, kind, "input");
  at::Tensor out = flat(output, kind, "output");
  expect_same_kind(in, out, kind);
  expect_counts(counts, group_->size, kind, "counts");
  expect_numel(in, total(counts), kind, "input", "sum of counts");
  expect_numel(out, counts[group_->rank], kind, "output", "this rank's count");
  expect_reducible(in, op, kind);
  const compat::BackendPtr& backend = group_->backend_for(in, kind);
  const int64_t shard = counts[group_->rank];
  c10d::AllToAllOptions options;
  options.timeout = group_->job->timeout;

  std::lock_guard<std::mutex> lock(group_->issue_mutex);
  auto state =
      group_->start(kind, reduce_scatter_traffic(to_bytes(counts, in), group_->rank, group_->remote), in.is_cuda());
  if (group_->completes_locally()) return group_->complete_locally(std::move(state), [&] { out.copy_(in); });
  at::Tensor pieces = at::empty({group_->size * shard}, in.options());
  state->finish = [pieces, out, op, size = group_->size, shard] { reduce_chunks(pieces.view({size, shard}), out, op); };
  return group_->issue(std::move(state), [&](Work::State& issued) {
    std::vector<int64_t> receive_counts(group_->size, shard);
    std::vector<int64_t> send_counts = counts;
    const bool gloo = backend != group_->nccl;
    at::Tensor wire_pieces = on_the_wire(group_->staged(issued, backend, pieces, Group::Staging::kOut), gloo);
    at::Tensor wire_in = on_the_wire(group_->staged(issued, backend, in, Group::Staging::kIn), gloo);
    return backend->alltoall_base(wire_pieces, wire_in, receive_counts, send_counts, options);
  });
}

Work Comm::all_gather_async(const at::Tensor& input, const at::Tensor& output) {
  constexpr auto kind = CollectiveKind::kAllGather;
  at::Tensor in = flat(input, kind, "input");
  at::Tensor out = flat(output, kind, "output");
  expect_same_kind(in, out, kind);
  expect_numel(out, in.numel() * group_->size, kind, "output", "world size x input");
  const compat::BackendPtr& backend = group_->backend_for(in, kind);
  c10d::AllgatherOptions options;
  options.timeout = group_->job->timeout;

  std::lock_guard<std::mutex> lock(group_->issue_mutex);
  auto state = group_->start(
      kind, all_gather_traffic(std::vector<uint64_t>(group_->size, bytes_of(in)), group_->rank, group_->remote),
      in.is_cuda());
  if (group_->completes_locally()) return group_->complete_locally(std::move(state), [&] { out.copy_(in); });
  return group_->issue(std::move(state), [&](Work::State& issued) {
    if (backend == group_->nccl) {
      at::Tensor wire_out = group_->staged(issued, backend, out, Group::Staging::kOut);
      at::Tensor wire_in = group_->staged(issued, backend, in, Group::Staging::kIn);
      return backend->_allgather_base(wire_out, wire_in, options);
    }
    // Gloo has no flat all-gather for every dtype: gather into views of the flat output.
    const at::Tensor wire_out = on_the_wire(group_->staged(issued, backend, out, Group::Staging::kOut), true);
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int rank = 0; rank < group_->size; ++rank)
      outputs[0].push_back(wire_out.narrow(0, rank * in.numel(), in.numel()));
    std::vector<at::Tensor> inputs{on_the_wire(group_->staged(issued, backend, in, Group::Staging::kIn), true)};
    return backend->allgather(outputs, inputs, options);
  });
}

// Uneven all-gather as an all-to-all: every rank sends its whole input to every rank.
Work Comm::all_gather_v_async(const at::Tensor& input, const at::Tensor& output, const std::vector<int64_t>& counts) {
  constexpr auto kind = CollectiveKind::kAllGather;
  at::Tensor in = flat(input, kind, "input");
  at::Tensor out = flat(output, kind, "output");
  expect_same_kind(in, out, kind);
  expect_counts(counts, group_->size, kind, "counts");
  expect_numel(in, counts[group_->rank], kind, "input", "this rank's count");
  expect_numel(out, total(counts), kind, "output", "sum of counts");
  const compat::BackendPtr& backend = group_->backend_for(in, kind);
  c10d::AllToAllOptions options;
  options.timeout = group_->job->timeout;

  std::lock_guard<std::mutex> lock(group_->issue_mutex);
  auto state =
      group_->start(kind, all_gather_traffic(to_bytes(counts, in), group_->rank, group_->remote), in.is_cuda());
  if (group_->completes_locally()) return group_->complete_locally(std::move(state), [&] { out.copy_(in); });
  at::Tensor copies = in.repeat({group_->size});
  return group_->issue(std::move(state), [&](Work::State& issued) {
    std::vector<int64_t> receive_counts = counts;
    std::vector<int64_t> send_counts(group_->size, in.numel());
    const bool gloo = backend != group_->nccl;
    at::Tensor wire_out = on_the_wire(group_->staged(issued, backend, out, Group::Staging::kOut), gloo);
    at::Tensor wire_copies = on_the_wire(group_->staged(issued, backend, copies, Group::Staging::kIn), gloo);
    return backend->alltoall_base(wire_out, wire_copies, receive_counts, send_counts, options);
  });
}

Work Comm::broadcast_async(const at::Tensor& tensor, int root) {
  constexpr auto kind = CollectiveKind::kBroadcast;
  at::Tensor data = flat(tensor, kind, "broadcast");
  if (root < 0 || root >= group_->size) fail("broadcast: root {} is not a rank of group {}", root, group_->name);
  const compat::BackendPtr& backend = group_->backend_for(data, kind);
  c10d::BroadcastOptions options;
  options.rootRank = root;
  options.timeout = group_->job->timeout;

  std::lock_guard<std::mutex> lock(group_->issue_mutex);
  auto state = group_->start(kind, broadcast_traffic(bytes_of(data), group_->size, group_->rank, root, group_->remote),
                             data.is_cuda());
  if (group_->completes_locally()) return group_->complete_locally(std::move(state), [] {});
  return group_->issue(std::move(state), [&](Work::State& issued) {
    std::vector<at::Tensor> tensors{
        on_the_wire(group_->staged(issued, backend, data, Group::Staging::kInOut), backend != group_->nccl)};
    return backend->broadcast(tensors, options);
  });
}

Work Comm::all_to_all_async(const at::Tensor& input, const at::Tensor& output, const std::vector<int64_t>& send_counts,
                            const std::vector<int64_t>& recv_counts) {
  constexpr auto kind = CollectiveKind::kAllToAll;
  at::Tensor in = flat(input, kind, "input");
  at::Tensor out = flat(output, kind, "output");
  expect_same_kind(in, out, kind);
  const bool even = send_counts.empty() && recv_counts.empty();
  if (even) {
    if (in.numel() % group_->size != 0) {
      fail("all_to_all: {} elements do not split evenly over {} ranks; pass counts", in.numel(), group_->size);
    }
    expect_numel(out, in.numel(), kind, "output", "as many as the input with even splits");
  } else {
    expect_counts(send_counts, group_->size, kind, "send_counts");
    expect_counts(recv_counts, group_->size, kind, "recv_counts");
    expect_numel(in, total(send_counts), kind, "input", "sum of send_counts");
    expect_numel(out, total(recv_counts), kind, "output", "sum of recv_counts");
  }
  const std::vector<int64_t> equal(group_->size, in.numel() / group_->size);
  const Traffic traffic = all_to_all_traffic(to_bytes(even ? equal : send_counts, in),
                                             to_bytes(even ? equal : recv_counts, in), group_->rank, group_->remote);
  const compat::BackendPtr& backend = group_->backend_for(in, kind);
  c10d::AllToAllOptions options;
  options.timeout = group_->job->timeout;

  std::lock_guard<std::mutex> lock(group_->issue_mutex);
  auto state = group_->start(kind, traffic, in.is_cuda());
  if (group_->completes_locally()) return group_->complete_locally(std::move(state), [&] { out.copy_(in); });
  return group_->issue(std::move(state), [&](Work::State& issued) {
    std::vector<int64_t> output_splits = recv_counts;
    std::vector<int64_t> input_splits = send_counts;
    const bool gloo = backend != group_->nccl;
    at::Tensor wire_out = on_the_wire(group_->staged(issued, backend, out, Group::Staging::kOut), gloo);
    at::Tensor wire_in = on_the_wire(group_->staged(issued, backend, in, Group::Staging::kIn), gloo);
    return backend->alltoall_base(wire_out, wire_in, output_splits, input_splits, options);
  });
}

Work Comm::barrier_async() {
  const compat::BackendPtr& backend = group_->barrier_backend();
  c10d::BarrierOptions options;
  options.timeout = group_->job->timeout;
  std::lock_guard<std::mutex> lock(group_->issue_mutex);
  auto state = group_->start(CollectiveKind::kBarrier, Traffic{}, backend == group_->nccl);
  if (group_->completes_locally()) return group_->complete_locally(std::move(state), [] {});
  return group_->issue(std::move(state), [&](Work::State&) { return backend->barrier(options); });
}

void Comm::all_reduce(const at::Tensor& tensor, ReduceOp op) { all_reduce_async(tensor, op).wait(); }
void Comm::reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op) {
  reduce_scatter_async(input, output, op).wait();
}
void Comm::reduce_scatter_v(const at::Tensor& input, const at::Tensor& output, const std::vector<int64_t>& counts,
                            ReduceOp op) {
  reduce_scatter_v_async(input, output, counts, op).wait();
}
void Comm::all_gather(const at::Tensor& input, const at::Tensor& output) { all_gather_async(input, output).wait(); }
void Comm::all_gather_v(const at::Tensor& input, const at::Tensor& output, const std::vector<int64_t>& counts) {
  all_gather_v_async(input, output, counts).wait();
}
void Comm::broadcast(const at::Tensor& tensor, int root) { broadcast_async(tensor, root).wait(); }
void Comm::all_to_all(const at::Tensor& input, const at::Tensor& output, const std::vector<int64_t>& send_counts,
                      const std::vector<int64_t>& recv_counts) {
  all_to_all_async(input, output, send_counts, recv_counts).wait();
}
void Comm::barrier() { barrier_async().wait(); }

}  // namespace zhost::comm
