// host/comm/comm.hpp: the host's process group. Collectives on flat tensors over c10d (Gloo for CPU
// tensors, NCCL for CUDA tensors), with a deadline on every collective, a report of the ranks that did not
// arrive when one fails, sub-groups, and per-kind byte counters (traffic.hpp defines the bytes).
//
// This header stays light on purpose (no c10d, no ATen): at::Tensor is only forward-declared; include
// <ATen/core/Tensor.h> (or more) where you call these functions.
//
// Semantics shared by every collective:
//  - Tensors are contiguous; they are treated as flat (numel elements), whatever their shape.
//  - Every rank of the group calls the same collectives in the same order.
//  - `x_async(...)` starts the collective and returns a Work; `x(...)` is `x_async(...).wait()`. The
//    result (and the input, for operations that read it late) must stay untouched until wait() returns.
//    Dropping a Work without wait() leaves its output unspecified.
//  - Failures (deadline passed, a peer died, a backend error) throw zhost::Error with
//    ExitCode::kRankFailed, naming the collective, its sequence number, the step and the ranks that did
//    not arrive or stopped responding. After a failure every later collective of the job fails at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "host/comm/traffic.hpp"

namespace at {
class Tensor;
}

namespace zhost::comm {

enum class Backend {
  kAuto,  // NCCL for CUDA tensors (when LibTorch has CUDA and a device is visible), Gloo for CPU tensors
  kGloo,  // Gloo for everything
  kNccl   // NCCL for everything: needs CUDA; CPU tensors are an error
};
// "auto", "gloo", "nccl" (UsageError otherwise).
Backend parse_backend(const std::string& name);
const char* to_string(Backend backend);

enum class ReduceOp { kSum, kAvg, kMax, kMin };

// Where the ranks meet: rank 0 hosts a c10d TCPStore at master_addr:master_port.
struct Rendezvous {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  double timeout_s = 300;  // how long to wait for every rank to join
  // Which node this rank runs on (launch::RankEnv::node): ranks with the same string share a node. Every
  // rank's string is exchanged when the ranks meet (Comm::node_of_rank).
  std::string node = "0";
  // How many ranks the launcher says run on this node (LOCAL_WORLD_SIZE); when positive, every node's count
  // of ranks must match what its ranks were told, or Comm::create fails naming both figures. 0: unchecked.
  int local_world_size = 0;
  std::string launcher = "the launcher";                   // who started the ranks, for that message ("torchrun", ...)
  std::string local_world_size_from = "LOCAL_WORLD_SIZE";  // the variable it came from, for that message
};

struct CommOptions {
  Backend backend = Backend::kAuto;
  double timeout_s = 300;  // comm.timeout_s: the deadline of every collective, from its start
  // Network interface for Gloo; empty: $GLOO_SOCKET_IFNAME, else loopback when master_addr is loopback,
  // else the local address that routes to master_addr, else the address this host's name resolves to.
  std::string gloo_interface;
  // Tests only (debug.share_cuda_device): collectives of CUDA tensors go over Gloo through host copies, for
  // several ranks sharing one GPU (Note [Gloo and CUDA tensors]).
  bool cuda_over_gloo = false;
  // Tests only (debug.nccl_single_rank): a one-rank group runs its collectives through NCCL instead of
  // completing them locally (Note [One-rank groups]), so that one GPU exercises the NCCL path.
  bool one_rank_groups_use_nccl = false;
};

class Comm;

// An in-flight asynchronous collective. Move-only; wait() completes it (idempotent).
class Work {
 public:
  Work();  // an already-completed Work
  Work(Work&&) noexcept;
  Work& operator=(Work&&) noexcept;
  ~Work();

  // Blocks until the collective is complete and its output is in place. Throws zhost::Error (kRankFailed)
  // when the collective's deadline passes or a peer fails.
  void wait();
  // True once wait() would return without blocking on the network.
  bool is_completed() const;

  struct State;  // defined in comm_internal.hpp; only Comm makes one
  explicit Work(std::unique_ptr<State> state);

 private:
  std::unique_ptr<State> state_;
};

class Comm {
 public:
  // Joins the rendezvous (all ranks must call it) and connects the backends. Throws zhost::Error
  // (kRankFailed) naming the ranks that did not join in time, UsageError for bad arguments or a backend
  // this build cannot provide.
  static std::unique_ptr<Comm> create(const Rendezvous& rendezvous, const CommOptions& options = {});
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const;                              // rank within this group
  int world_size() const;                        // size of this group
  const std::vector<int>& global_ranks() const;  // the job-wide rank of each member, by group rank
  const std::string& name() const;               // "world" or the sub-group's name

  // The node of every rank of the job, by global rank (not group rank): nodes are numbered 0, 1, ... in the
  // order of their smallest rank, from the Rendezvous::node strings the ranks brought. Job-wide: every group
  // of the job returns the same vector.
  const std::vector<int>& node_of_rank() const;
  int num_nodes() const;  // of the job
  // By group rank: whether that member is on another node than this rank, the `remote` argument of
  // traffic.hpp's functions for this group's collectives.
  const RemotePeers& remote_peers() const;

  // In place on `tensor`. AVG is computed as SUM followed by a division where the backend lacks it
  // (floating-point tensors only).
  Work all_reduce_async(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  // input: world_size * n elements, chunk j for rank j; output: n elements.
  Work reduce_scatter_async(const at::Tensor& input, const at::Tensor& output, ReduceOp op = ReduceOp::kSum);
  // Uneven partitions: counts[j] elements for rank j; input holds sum(counts), output counts[rank()].
  Work reduce_scatter_v_async(const at::Tensor& input, const at::Tensor& output, const std::vector<int64_t>& counts,
                              ReduceOp op = ReduceOp::kSum);
  // input: n elements; output: world_size * n, rank j's input at [j*n, (j+1)*n).
  Work all_gather_async(const at::Tensor& input, const at::Tensor& output);
  // input: counts[rank()] elements; output: sum(counts), rank j's input at offset sum(counts[0..j)).
  Work all_gather_v_async(const at::Tensor& input, const at::Tensor& output, const std::vector<int64_t>& counts);
  // In place on `tensor`; `root` is a rank of this group.
  Work broadcast_async(const at::Tensor& tensor, int root);
  // send_counts[j] elements of input go to rank j, recv_counts[j] elements of output come from rank j, in
  // rank order. Empty counts: equal splits (numel divisible by world_size).
  Work all_to_all_async(const at::Tensor& input, const at::Tensor& output, const std::vector<int64_t>& send_counts = {},
                        const std::vector<int64_t>& recv_counts = {});
  Work barrier_async();

  void all_reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  void reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op = ReduceOp::kSum);
  void reduce_scatter_v(const at::Tensor& input, const at::Tensor& output, const std::vector<int64_t>& counts,
                        ReduceOp op = ReduceOp::kSum);
  void all_gather(const at::Tensor& input, const at::Tensor& output);
  void all_gather_v(const at::Tensor& input, const at::Tensor& output, const std::vector<int64_t>& counts);
  void broadcast(const at::Tensor& tensor, int root);
  void all_to_all(const at::Tensor& input, const at::Tensor& output, const std::vector<int64_t>& send_counts = {},
                  const std::vector<int64_t>& recv_counts = {});
  void barrier();

  // A sub-group of this group's ranks (ranks of *this* group; member i of the result is ranks[i]). Only
  // members call it, all with the same list in the same order, and in the same order relative to other
  // new_group calls. The sub-group shares the job's store, step and failure state.
  std::unique_ptr<Comm> new_group(const std::vector<int>& ranks);

  // Steps, for error messages and per-step counters. begin_step() on any group applies to the whole job
  // (every group's per-step counters restart); end_step() ends it and returns the job's counters for the
  // step: the sum over the world and every sub-group, those destroyed during the step included.
  void begin_step(int64_t step);
  CommCounters end_step();
  int64_t current_step() const;  // -1 outside a step

  // The job's key-value store (rank 0's rendezvous store, keys under "zhost/kv/"), shared by all ranks:
  // the host-services kv_set/kv_get of plugins. get() waits up to timeout_s for the key; nullopt if it
  // never appears. Throws zhost::Error (kRankFailed) when the store cannot be reached.
  void store_set(const std::string& key, const std::vector<uint8_t>& value);
  std::optional<std::vector<uint8_t>> store_get(const std::string& key, double timeout_s);

  CommCounters counters() const;           // this group's, since creation
  CommCounters step_counters() const;      // this group's, since the last begin_step()
  CommCounters job_counters() const;       // every group's of the job together, since creation
  CommCounters job_step_counters() const;  // every group's of the job together, since the last begin_step()

  struct Group;  // defined in comm_internal.hpp

 private:
  explicit Comm(std::shared_ptr<Group> group);
  std::shared_ptr<Group> group_;
};

}  // namespace zhost::comm
