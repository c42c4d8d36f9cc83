// host/comm/collectives.cpp: the collectives on a group that rendezvous.cpp made: each one checked, counted
// (traffic.hpp) and issued to its backend, with tensors staged between host and device memory where the
// backend needs the other kind; Gloo's missing pieces built from all-to-all, and reduce-scatter's one
// summation order; one-rank groups completed locally; Work with its deadline, its warning about stragglers
// and its failure report naming the ranks that did not arrive; the job's first failure; steps and counters.
#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>

#include "host/comm/comm_internal.hpp"

namespace zhost::comm {

using detail::cuda_usable;
using detail::fail_rank;
using detail::Job;
using detail::seconds_since;

namespace {

// A collective still waiting after a quarter of comm.timeout_s, or after this long, warns.
constexpr std::chrono::seconds kStragglerWarningAfter{30};

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

// Note [One summation order]: every SUM (and AVG) a reduce-scatter computes adds the ranks'
// contributions one at a time in rank order, ((x_0 + x_1) + x_2) + ..., elementwise; 16-bit tensors are
// summed in fp32 and rounded once. The result of an element therefore depends only on the values the ranks
// contributed, not on the backend's algorithm, on how the elements were split into buckets or partitions,
// or on which rank owns them. The ZeRO stages (stage 0 included) reduce every gradient through
// reduce-scatter, which is what makes them bitwise equal to one another (docs/architecture.md, "One
// summation order"). all_reduce keeps the backend's own order (Gloo's ring, NCCL's): use it for values
// whose bits do not matter or that are exact (integer sums, max, min).
// The ranks' contributions to this rank's shard, in rank order, reduced into `output`.
void reduce_pieces(const std::vector<at::Tensor>& pieces, const at::Tensor& output, ReduceOp op) {
  at::Tensor out = output;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: {
      const bool widen = out.scalar_type() == at::kBFloat16 || out.scalar_type() == at::kHalf;
      at::Tensor sum = widen ? pieces[0].to(at::kFloat) : out.copy_(pieces[0]);
      for (size_t rank = 1; rank < pieces.size(); ++rank) sum.add_(pieces[rank]);
      if (op == ReduceOp::kAvg) sum.div_(static_cast<double>(pieces.size()));
      if (widen) out.copy_(sum);
      break;
    }
    case ReduceOp::kMax:
      out.copy_(pieces[0]);
      for (size_t rank = 1; rank < pieces.size(); ++rank) at::maximum_out(out, out, pieces[rank]);
      break;
    case ReduceOp::kMin:
      out.copy_(pieces[0]);
      for (size_t rank = 1; rank < pieces.size(); ++rank) at::minimum_out(out, out, pieces[rank]);
      break;
  }
}

// Gloo (LibTorch 1.13) moves no bfloat16. Collectives that only move data send bf16 as fp16 bits (same
// bytes); reductions of bf16 run in fp32 (see all_reduce_async) or reduce locally after an all-to-all.
at::Tensor on_the_wire(const at::Tensor& tensor, bool gloo) {
  return gloo && tensor.scalar_type() == at::kBFloat16 ? tensor.view(at::kHalf) : tensor;
}

// Note [Gloo's all-gather in place]: Gloo's all-gather (and c10d's flat _allgather_base over it) receives into
// a flat tensor of the whole output that it allocates, then copies into the caller's output: a transient copy of
// every gathered byte, as large as the model for a stage's parameter or gradient gather, which the job's
// malloc keeps as peak memory. zhost gathers on Gloo in place instead: the own piece is copied into the
// output, then w - 1 exchanges, in round k each rank sending its input to rank + k and receiving rank - k's
// piece straight into its place in the output (an all-to-all with one non-zero count each way). Each rank
// sends and receives (w - 1) pieces, as in a ring all-gather; nothing else is allocated. NCCL's all-gather
// writes the output in place itself and keeps it.
// Where rank `rank`'s piece begins in a buffer of every rank's piece, in rank order.
int64_t offset_of(const std::vector<int64_t>& counts, int rank) {
  return std::accumulate(counts.begin(), counts.begin() + rank, int64_t{0});
}

compat::WorkPtr gather_in_place(const compat::BackendPtr& backend, const at::Tensor& in, const at::Tensor& out,
                                const std::vector<int64_t>& counts, int rank, const c10d::AllToAllOptions& options,
                                std::vector<compat::WorkPtr>& earlier) {
  const int size = static_cast<int>(counts.size());
  out.narrow(0, offset_of(counts, rank), counts[rank]).copy_(in);
  compat::WorkPtr last;
  for (int k = 1; k < size; ++k) {
    const int to = (rank + k) % size, from = (rank - k + size) % size;
    std::vector<int64_t> send_counts(size, 0), receive_counts(size, 0);
    send_counts[to] = counts[rank];
    receive_counts[from] = counts[from];
    at::Tensor receive = out.narrow(0, offset_of(counts, from), counts[from]);
    at::Tensor send = in;
    if (last) earlier.push_back(std::move(last));
    last = backend->alltoall_base(receive, send, receive_counts, send_counts, options);
  }
  return last;
}

}  // namespace

// ---- the job's first failure -------------------------------------------------------------------------

void detail::Job::record_failure_and_throw(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (failure.empty()) failure = message;
  }
  failed = true;
  fail_rank(message);
}

void detail::Job::throw_if_failed() {
  if (!failed) return;
  std::lock_guard<std::mutex> lock(mutex);
  fail_rank(fmt::format("an earlier collective failed, the process group is unusable: {}", failure));
}

// ---- groups ------------------------------------------------------------------------------------------

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

// Note [Reduce-scatter keeps its own piece]: Gloo has no reduce-scatter, NCCL none with uneven counts, and
// neither sums in a fixed order, so a reduce-scatter is an all-to-all that sends each rank the pieces of its
// shard (the bytes a ring reduce-scatter moves), after which every rank reduces the w pieces locally in rank
// order (Note [One summation order]). A rank's own piece is not sent to itself: it is read where it lies in
// the input, and only the other w - 1 pieces are received, so the transient receive buffer is (w - 1) / w of
// the input (half at two ranks) and the own piece is not copied. An all-to-all's send and receive buffers are
// one contiguous run each, which the input without the own piece is only where that piece is first or last:
// with two ranks one all-to-all carries everything; with more, two do - the pieces for lower ranks, then
// those for higher ones (each rank receiving, in turn, from the higher and the lower ranks).
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
  const int size = group_->size, rank = group_->rank;
  const int64_t shard = counts[rank];
  const int64_t own_offset = offset_of(counts, rank);
  c10d::AllToAllOptions options;
  options.timeout = group_->job->timeout;

  std::lock_guard<std::mutex> lock(group_->issue_mutex);
  auto state = group_->start(kind, reduce_scatter_traffic(to_bytes(counts, in), rank, group_->remote), in.is_cuda());
  if (group_->completes_locally()) return group_->complete_locally(std::move(state), [&] { out.copy_(in); });
  // [w - 1, shard]: the pieces of the other ranks, in rank order.
  at::Tensor others = at::empty({(size - 1) * shard}, in.options());
  state->finish = [in, others, out, op, size, rank, shard, own_offset] {
    at::Tensor own = in.narrow(0, own_offset, shard);
    if (own.is_alias_of(out)) own = own.clone();  // written in place: read it before the sum overwrites it
    std::vector<at::Tensor> pieces;
    for (int from = 0; from < size; ++from)
      pieces.push_back(from == rank ? own : others.narrow(0, (from < rank ? from : from - 1) * shard, shard));
    reduce_pieces(pieces, out, op);
  };
  return group_->issue(std::move(state), [&](Work::State& issued) {
    const bool gloo = backend != group_->nccl;
    const at::Tensor wire_others = on_the_wire(group_->staged(issued, backend, others, Group::Staging::kOut), gloo);
    const at::Tensor wire_in = on_the_wire(group_->staged(issued, backend, in, Group::Staging::kIn), gloo);
    // One exchange: send each rank in [low, high) its piece of the input, and receive the pieces of the ranks in
    // [receive_low, receive_high) into `others` (the own piece neither sent nor received).
    const auto index_in_others = [&](int from) { return from < rank ? from : from - 1; };
    auto exchange = [&](int low, int high, int receive_low, int receive_high) {
      std::vector<int64_t> send_counts(size, 0), receive_counts(size, 0);
      for (int to = low; to < high; ++to)
        if (to != rank) send_counts[to] = counts[to];
      for (int from = receive_low; from < receive_high; ++from)
        if (from != rank) receive_counts[from] = shard;
      const int64_t send_begin = offset_of(counts, low) + (low == rank ? shard : 0);
      const int64_t receive_begin = index_in_others(receive_low == rank ? rank + 1 : receive_low) * shard;
      at::Tensor send = wire_in.narrow(0, send_begin, total(send_counts));
      at::Tensor receive = wire_others.narrow(0, receive_begin, total(receive_counts));
      return backend->alltoall_base(receive, send, receive_counts, send_counts, options);
    };
    if (size <= 2) return exchange(0, size, 0, size);           // the own piece is first or last
    issued.works.push_back(exchange(0, rank, rank + 1, size));  // to the lower ranks, from the higher
    return exchange(rank + 1, size, 0, rank);                   // to the higher ranks, from the lower
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
  c10d::AllToAllOptions exchange_options;
  exchange_options.timeout = group_->job->timeout;

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
    const at::Tensor wire_out = on_the_wire(group_->staged(issued, backend, out, Group::Staging::kOut), true);
    const at::Tensor wire_in = on_the_wire(group_->staged(issued, backend, in, Group::Staging::kIn), true);
    return gather_in_place(backend, wire_in, wire_out, std::vector<int64_t>(group_->size, in.numel()), group_->rank,
                           exchange_options, issued.works);  // Note [Gloo's all-gather in place]
  });
}

// Uneven all-gather: on Gloo in place (Note [Gloo's all-gather in place]); on NCCL as one all-to-all of the input
// repeated for every rank.
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
  return group_->issue(std::move(state), [&](Work::State& issued) {
    if (backend != group_->nccl) {
      const at::Tensor wire_out = on_the_wire(group_->staged(issued, backend, out, Group::Staging::kOut), true);
      const at::Tensor wire_in = on_the_wire(group_->staged(issued, backend, in, Group::Staging::kIn), true);
      return gather_in_place(backend, wire_in, wire_out, counts, group_->rank, options, issued.works);
    }
    std::vector<int64_t> receive_counts = counts;
    std::vector<int64_t> send_counts(group_->size, in.numel());
    at::Tensor wire_out = group_->staged(issued, backend, out, Group::Staging::kOut);
    at::Tensor wire_copies = group_->staged(issued, backend, in.repeat({group_->size}), Group::Staging::kIn);
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
