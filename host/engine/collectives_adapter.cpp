// host/engine/collectives_adapter.cpp: the zhost_collectives callbacks over comm::Comm.
#include "host/engine/collectives_adapter.hpp"

#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>
#include <vector>

#include "host/core/error.hpp"
#include "host/services/host_services.hpp"
#include "host/services/plugin_struct.hpp"
#include "zhost/kit/dlpack_views.hpp"

struct zhost_work {
  zhost::comm::Work work;
};

namespace zhost::engine {

struct CollectivesAdapter::State {
  comm::Comm* world = nullptr;
  std::mutex mutex;
  std::vector<std::unique_ptr<comm::Comm>> groups;  // sub-groups live until the job ends
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

// Runs `start` (which returns a comm::Work) and either waits or hands the work back, as args->flags say.
template <typename Start>
zhost_status* run(const char* call, zhost_host_context* ctx, zhost_collective_args* args, Start&& start) {
  try {
    if (zhost_status* refused =
            check_plugin_struct(args, ZHOST_COLLECTIVE_ARGS_MIN_SIZE, "zhost_collective_args", call))
      return refused;
    comm::Work work = start(group_of(ctx, args->group));
    if (args->flags & ZHOST_COLLECTIVE_ASYNC) {
      args->work = new zhost_work{std::move(work)};
    } else {
      work.wait();
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

// -1 when the context belongs to no job with a process group (nothing may throw across the ABI).
int32_t rank(zhost_host_context* ctx, zhost_group* group) {
  try {
    return group_of(ctx, group).rank();
  } catch (const Error&) {
    return -1;
  }
}
int32_t world_size(zhost_host_context* ctx, zhost_group* group) {
  try {
    return group_of(ctx, group).world_size();
  } catch (const Error&) {
    return -1;
  }
}

zhost_status* all_reduce(zhost_host_context* ctx, zhost_collective_args* a) {
  return run("collectives->all_reduce", ctx, a,
             [&](comm::Comm& g) { return g.all_reduce_async(required(a->recv, "recv"), reduce_op(a->op)); });
}
zhost_status* reduce_scatter(zhost_host_context* ctx, zhost_collective_args* a) {
  return run("collectives->reduce_scatter", ctx, a, [&](comm::Comm& g) {
    at::Tensor send = required(a->send, "send"), recv = required(a->recv, "recv");
    if (a->recv_counts) return g.reduce_scatter_v_async(send, recv, counts(a->recv_counts, g), reduce_op(a->op));
    return g.reduce_scatter_async(send, recv, reduce_op(a->op));
  });
}
zhost_status* all_gather(zhost_host_context* ctx, zhost_collective_args* a) {
  return run("collectives->all_gather", ctx, a, [&](comm::Comm& g) {
    at::Tensor send = required(a->send, "send"), recv = required(a->recv, "recv");
    if (a->send_counts) return g.all_gather_v_async(send, recv, counts(a->send_counts, g));
    return g.all_gather_async(send, recv);
  });
}
zhost_status* broadcast(zhost_host_context* ctx, zhost_collective_args* a) {
  return run("collectives->broadcast", ctx, a,
             [&](comm::Comm& g) { return g.broadcast_async(required(a->recv, "recv"), a->root); });
}
zhost_status* all_to_all(zhost_host_context* ctx, zhost_collective_args* a) {
  return run("collectives->all_to_all", ctx, a, [&](comm::Comm& g) {
    return g.all_to_all_async(required(a->send, "send"), required(a->recv, "recv"), counts(a->send_counts, g),
                              counts(a->recv_counts, g));
  });
}
zhost_status* barrier(zhost_host_context* ctx, zhost_group* group) {
  zhost_collective_args args{};
  args.struct_size = sizeof(args);
  args.group = group;
  return run("collectives->barrier", ctx, &args, [](comm::Comm& g) { return g.barrier_async(); });
}
zhost_status* wait(zhost_host_context*, zhost_work* work) {
  std::unique_ptr<zhost_work> owned(work);
  if (!owned) return nullptr;
  try {
    owned->work.wait();
    return nullptr;
  } catch (const Error& e) {
    return HostServices::make_status(ZHOST_ERR_COMM, e.what());
  }
}
zhost_status* new_group(zhost_host_context* ctx, const int32_t* ranks, size_t num_ranks, zhost_group** out) {
  try {
    CollectivesAdapter::State& state = state_of(ctx);
    auto group = state.world->new_group(std::vector<int>(ranks, ranks + num_ranks));
    std::lock_guard<std::mutex> lock(state.mutex);
    *out = reinterpret_cast<zhost_group*>(group.get());
    state.groups.push_back(std::move(group));
    return nullptr;
  } catch (const Error& e) {
    return HostServices::make_status(ZHOST_ERR_COMM, e.what());
  }
}

const zhost_collectives kTable = {sizeof(zhost_collectives),
                                  nullptr,
                                  rank,
                                  world_size,
                                  all_reduce,
                                  reduce_scatter,
                                  all_gather,
                                  broadcast,
                                  all_to_all,
                                  barrier,
                                  wait,
                                  new_group};

}  // namespace

CollectivesAdapter::CollectivesAdapter(comm::Comm& world, HostServices& services)
    : state_(std::make_unique<State>()), services_(services) {
  state_->world = &world;
  services_.set_job_state(JobService::kCollectives, state_.get());
  services_.set_collectives(&kTable);
}

CollectivesAdapter::~CollectivesAdapter() {
  services_.set_collectives(nullptr);
  services_.set_job_state(JobService::kCollectives, nullptr);
}

}  // namespace zhost::engine
