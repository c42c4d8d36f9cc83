// host/services/collectives_adapter.cpp: the zhost_collectives callbacks over comm::Comm.
#include "host/services/collectives_adapter.hpp"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "host/core/error.hpp"
#include "host/services/host_services.hpp"
#include "host/services/plugin_struct.hpp"
#include "host/telemetry/comm_observer.hpp"
#include "zhost/kit/dlpack_views.hpp"

struct zhost_work {
  zhost::comm::Work work;
  zhost::engine::CommObserver* observer = nullptr;  // reports `record` when the work completes
  zhost::engine::CollectiveRecord record;
};

namespace zhost {

struct CollectivesAdapter::State {
  comm::Comm* world = nullptr;
  std::mutex mutex;
  std::vector<std::unique_ptr<comm::Comm>> groups;  // sub-groups live until the job ends
  engine::CommObserver* observer = nullptr;
  zhost_plugin_instance* transform = nullptr;  // Note [Collective transforms]
  const zhost_collective_api* transform_api = nullptr;
  std::vector<int32_t> node_of_rank;  // zhost_topology's, by job-wide rank
  int32_t num_nodes = 1;
};

namespace {

// The job's state for a call from `ctx`; throws when the context belongs to no job with a process group.
CollectivesAdapter::State& state_of(zhost_host_context* ctx) {
  auto* state = static_cast<CollectivesAdapter::State*>(HostServices::job_state(ctx, JobService::kCollectives));
  if (!state)
    throw Error(ctx ? "collectives used before the job's process group exists"
                    : "collectives called without a host context (pass the one the host gave the plugin)",
                ExitCode::kUsage);
  return *state;
}

comm::Comm& group_of(zhost_host_context* ctx, zhost_group* group) {
  if (group) return *reinterpret_cast<comm::Comm*>(group);
  return *state_of(ctx).world;
}

comm::ReduceOp reduce_op(zhost_reduce_op op) {
  switch (op) {
    case ZHOST_REDUCE_SUM:
      return comm::ReduceOp::kSum;
    case ZHOST_REDUCE_AVG:
      return comm::ReduceOp::kAvg;
    case ZHOST_REDUCE_MAX:
      return comm::ReduceOp::kMax;
    case ZHOST_REDUCE_MIN:
      return comm::ReduceOp::kMin;
  }
  fail("unknown reduce op {}", static_cast<int>(op));
}

at::Tensor required(const DLTensor* view, const char* what) {
  if (!view) throw Error(fmt::format("collective called without its {} tensor", what), ExitCode::kUsage);
  return kit::tensor_view(*view);
}

std::vector<int64_t> counts(const int64_t* values, comm::Comm& group) {
  return values ? std::vector<int64_t>(values, values + group.world_size()) : std::vector<int64_t>{};
}

// What a collective of `kind` moves, for the observer (Note [Collective figures]): its message size and this
// rank's traffic (traffic.hpp). `send`/`recv` are the views the plugin passed; counts may be null.
struct Shape {
  comm::CollectiveKind kind;
  const DLTensor* send = nullptr;
  const DLTensor* recv = nullptr;
  const int64_t* send_counts = nullptr;
  const int64_t* recv_counts = nullptr;
  int root = 0;
};

uint64_t bytes_of(const DLTensor* view) {
  if (!view) return 0;
  uint64_t n = (view->dtype.bits * view->dtype.lanes + 7) / 8;
  for (int32_t d = 0; d < view->ndim; ++d) n *= static_cast<uint64_t>(view->shape[d]);
  return n;
}

std::vector<uint64_t> chunk_bytes(const int64_t* counts, const DLTensor* view, int n, uint64_t even_chunk) {
  std::vector<uint64_t> chunks(static_cast<size_t>(n), even_chunk);
  if (counts && view) {
    const uint64_t element = (view->dtype.bits * view->dtype.lanes + 7) / 8;
    for (int j = 0; j < n; ++j) chunks[j] = static_cast<uint64_t>(counts[j]) * element;
  }
  return chunks;
}

engine::CollectiveRecord observe_start(engine::CommObserver& observer, const Shape& s, comm::Comm& g) {
  const int n = g.world_size(), me = g.rank();
  uint64_t message = 0;
  comm::Traffic traffic;
  switch (s.kind) {
    case comm::CollectiveKind::kAllReduce:
      message = bytes_of(s.recv);
      traffic = comm::all_reduce_traffic(message, n, g.remote_peers());
      break;
    case comm::CollectiveKind::kReduceScatter:
      message = bytes_of(s.send);
      traffic =
          comm::reduce_scatter_traffic(chunk_bytes(s.recv_counts, s.recv, n, bytes_of(s.recv)), me, g.remote_peers());
      break;
    case comm::CollectiveKind::kAllGather:
      message = bytes_of(s.recv);
      traffic = comm::all_gather_traffic(chunk_bytes(s.send_counts, s.send, n, bytes_of(s.send)), me, g.remote_peers());
      break;
    case comm::CollectiveKind::kBroadcast:
      message = bytes_of(s.recv);
      traffic = comm::broadcast_traffic(message, n, me, s.root, g.remote_peers());
      break;
    case comm::CollectiveKind::kAllToAll: {
      message = bytes_of(s.send);
      const uint64_t even_send = message / static_cast<uint64_t>(n),
                     even_recv = bytes_of(s.recv) / static_cast<uint64_t>(n);
      traffic = comm::all_to_all_traffic(chunk_bytes(s.send_counts, s.send, n, even_send),
                                         chunk_bytes(s.recv_counts, s.recv, n, even_recv), me, g.remote_peers());
      break;
    }
    case comm::CollectiveKind::kBarrier:
      break;
  }
  return observer.begin(s.kind, message, traffic, n);
}

// How deep this thread is inside the transform's interpose(): collectives it starts there go to the wire.
thread_local int g_inside_transform = 0;

zhost_collective_op op_of(comm::CollectiveKind kind) {
  switch (kind) {
    case comm::CollectiveKind::kAllReduce:
      return ZHOST_OP_ALL_REDUCE;
    case comm::CollectiveKind::kReduceScatter:
      return ZHOST_OP_REDUCE_SCATTER;
    case comm::CollectiveKind::kAllGather:
      return ZHOST_OP_ALL_GATHER;
    case comm::CollectiveKind::kBroadcast:
      return ZHOST_OP_BROADCAST;
    case comm::CollectiveKind::kAllToAll:
    case comm::CollectiveKind::kBarrier:
      break;
  }
  return ZHOST_OP_ALL_TO_ALL;
}

// Offers the collective to the job's transform (Note [Collective transforms]); true when it served it, with
// its status in *status.
bool offered_to_transform(CollectivesAdapter::State& state, comm::CollectiveKind kind, zhost_collective_args* args,
                          zhost_status** status) {
  if (!state.transform || g_inside_transform > 0 || kind == comm::CollectiveKind::kBarrier) return false;
  zhost_interpose_args offer{};
  offer.struct_size = sizeof(offer);
  offer.op = op_of(kind);
  offer.collective = args;
  ++g_inside_transform;
  *status = state.transform_api->interpose(state.transform, &offer);
  --g_inside_transform;
  if (*status) return true;  // a transform's failure is the collective's
  if (offer.handled) args->work = nullptr;
  return offer.handled != 0;
}

// Runs `start` (which returns a comm::Work) and either waits or hands the work back, as args->flags say.
template <typename Start>
zhost_status* run(const char* call, zhost_host_context* ctx, zhost_collective_args* args, const Shape& shape,
                  Start&& start) {
  try {
    if (zhost_status* refused =
            check_plugin_struct(args, ZHOST_COLLECTIVE_ARGS_MIN_SIZE, "zhost_collective_args", call))
      return refused;
    zhost_status* transformed = nullptr;
    if (offered_to_transform(state_of(ctx), shape.kind, args, &transformed)) return transformed;
    comm::Comm& group = group_of(ctx, args->group);
    engine::CommObserver* observer = state_of(ctx).observer;
    engine::CollectiveRecord record;
    if (observer) record = observe_start(*observer, shape, group);
    comm::Work work = start(group);
    if (args->flags & ZHOST_COLLECTIVE_ASYNC) {
      args->work = new zhost_work{std::move(work), observer, record};
    } else {
      work.wait();
      if (observer) observer->end(record);
      args->work = nullptr;
    }
    return nullptr;
  } catch (const Error& e) {
    return HostServices::make_status(e.code() == ExitCode::kRankFailed ? ZHOST_ERR_COMM : ZHOST_ERR_INVALID_ARGUMENT,
                                     e.what());
  } catch (const std::exception& e) {
    return HostServices::make_status(ZHOST_ERR_INTERNAL, e.what());
  }
}

// A status when the context belongs to no job with a process group (nothing may throw across the ABI).
zhost_status* group_info(zhost_host_context* ctx, zhost_group_info_args* args) {
  if (zhost_status* refused =
          check_plugin_struct(args, ZHOST_GROUP_INFO_ARGS_MIN_SIZE, "zhost_group_info_args", "collectives->group_info"))
    return refused;
  try {
    const comm::Comm& group = group_of(ctx, args->group);
    args->rank = group.rank();
    args->size = group.world_size();
    return nullptr;
  } catch (const Error& e) {
    return HostServices::make_status(ZHOST_ERR_INVALID_ARGUMENT, e.what());
  }
}

zhost_status* all_reduce(zhost_host_context* ctx, zhost_collective_args* a) {
  return run("collectives->all_reduce", ctx, a, Shape{comm::CollectiveKind::kAllReduce, a->send, a->recv},
             [&](comm::Comm& g) { return g.all_reduce_async(required(a->recv, "recv"), reduce_op(a->op)); });
}
zhost_status* reduce_scatter(zhost_host_context* ctx, zhost_collective_args* a) {
  return run("collectives->reduce_scatter", ctx, a,
             Shape{comm::CollectiveKind::kReduceScatter, a->send, a->recv, nullptr, a->recv_counts},
             [&](comm::Comm& g) {
               at::Tensor send = required(a->send, "send"), recv = required(a->recv, "recv");
               if (a->recv_counts)
                 return g.reduce_scatter_v_async(send, recv, counts(a->recv_counts, g), reduce_op(a->op));
               return g.reduce_scatter_async(send, recv, reduce_op(a->op));
             });
}
zhost_status* all_gather(zhost_host_context* ctx, zhost_collective_args* a) {
  return run("collectives->all_gather", ctx, a,
             Shape{comm::CollectiveKind::kAllGather, a->send, a->recv, a->send_counts}, [&](comm::Comm& g) {
               at::Tensor send = required(a->send, "send"), recv = required(a->recv, "recv");
               if (a->send_counts) return g.all_gather_v_async(send, recv, counts(a->send_counts, g));
               return g.all_gather_async(send, recv);
             });
}
zhost_status* broadcast(zhost_host_context* ctx, zhost_collective_args* a) {
  return run("collectives->broadcast", ctx, a,
             Shape{comm::CollectiveKind::kBroadcast, a->send, a->recv, nullptr, nullptr, a->root},
             [&](comm::Comm& g) { return g.broadcast_async(required(a->recv, "recv"), a->root); });
}
zhost_status* all_to_all(zhost_host_context* ctx, zhost_collective_args* a) {
  return run("collectives->all_to_all", ctx, a,
             Shape{comm::CollectiveKind::kAllToAll, a->send, a->recv, a->send_counts, a->recv_counts},
             [&](comm::Comm& g) {
               return g.all_to_all_async(required(a->send, "send"), required(a->recv, "recv"),
                                         counts(a->send_counts, g), counts(a->recv_counts, g));
             });
}
zhost_status* barrier(zhost_host_context* ctx, zhost_barrier_args* barrier_args) {
  if (zhost_status* refused =
          check_plugin_struct(barrier_args, ZHOST_BARRIER_ARGS_MIN_SIZE, "zhost_barrier_args", "collectives->barrier"))
    return refused;
  zhost_collective_args args{};
  args.struct_size = sizeof(args);
  args.group = barrier_args->group;
  return run("collectives->barrier", ctx, &args, Shape{comm::CollectiveKind::kBarrier},
             [](comm::Comm& g) { return g.barrier_async(); });
}
zhost_status* wait(zhost_host_context*, zhost_work_wait_args* args) {
  if (zhost_status* refused =
          check_plugin_struct(args, ZHOST_WORK_WAIT_ARGS_MIN_SIZE, "zhost_work_wait_args", "collectives->wait"))
    return refused;
  std::unique_ptr<zhost_work> owned(args->work);
  if (!owned) return nullptr;
  try {
    owned->work.wait();
    if (owned->observer) owned->observer->end(owned->record);
    return nullptr;
  } catch (const Error& e) {
    return HostServices::make_status(ZHOST_ERR_COMM, e.what());
  }
}
zhost_status* new_group(zhost_host_context* ctx, zhost_new_group_args* args) {
  if (zhost_status* refused =
          check_plugin_struct(args, ZHOST_NEW_GROUP_ARGS_MIN_SIZE, "zhost_new_group_args", "collectives->new_group"))
    return refused;
  try {
    CollectivesAdapter::State& state = state_of(ctx);
    auto group = state.world->new_group(std::vector<int>(args->ranks, args->ranks + args->num_ranks));
    std::lock_guard<std::mutex> lock(state.mutex);
    args->group = reinterpret_cast<zhost_group*>(group.get());
    state.groups.push_back(std::move(group));
    return nullptr;
  } catch (const Error& e) {
    return HostServices::make_status(ZHOST_ERR_COMM, e.what());
  }
}

zhost_status* topology(zhost_host_context* ctx, zhost_topology* out) {
  try {
    if (zhost_status* refused =
            check_plugin_struct(out, ZHOST_TOPOLOGY_MIN_SIZE, "zhost_topology", "collectives->topology"))
      return refused;
    CollectivesAdapter::State& state = state_of(ctx);
    out->num_nodes = state.num_nodes;
    out->node = state.node_of_rank.at(static_cast<size_t>(state.world->rank()));
    out->node_of_rank = state.node_of_rank.data();
    return nullptr;
  } catch (const std::exception& e) {
    return HostServices::make_status(ZHOST_ERR_INVALID_ARGUMENT, e.what());
  }
}

const zhost_collectives kTable = {sizeof(zhost_collectives),
                                  nullptr,
                                  group_info,
                                  all_reduce,
                                  reduce_scatter,
                                  all_gather,
                                  broadcast,
                                  all_to_all,
                                  barrier,
                                  wait,
                                  new_group,
                                  topology};

}  // namespace

CollectivesAdapter::CollectivesAdapter(comm::Comm& world, HostServices& services)
    : state_(std::make_unique<State>()), services_(services) {
  state_->world = &world;
  state_->node_of_rank.assign(static_cast<size_t>(world.world_size()), 0);
  services_.set_job_state(JobService::kCollectives, state_.get());
  services_.set_collectives(&kTable);
}

void CollectivesAdapter::set_observer(engine::CommObserver* observer) { state_->observer = observer; }

void CollectivesAdapter::set_topology(std::vector<int32_t> node_of_rank) {
  ZHOST_ASSERT(node_of_rank.size() == state_->node_of_rank.size());
  state_->num_nodes = node_of_rank.empty() ? 1 : *std::max_element(node_of_rank.begin(), node_of_rank.end()) + 1;
  state_->node_of_rank = std::move(node_of_rank);
}

void CollectivesAdapter::set_transform(zhost_plugin_instance* instance, const zhost_collective_api* api) {
  state_->transform = api ? instance : nullptr;
  state_->transform_api = instance ? api : nullptr;
}

CollectivesAdapter::~CollectivesAdapter() {
  services_.set_collectives(nullptr);
  services_.set_job_state(JobService::kCollectives, nullptr);
}

}  // namespace zhost
