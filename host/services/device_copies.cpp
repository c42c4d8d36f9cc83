// host/services/device_copies.cpp: zhost_copy_services for the training job (see the header).
#include "host/services/device_copies.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <utility>

#include "host/core/error.hpp"
#include "host/services/host_services.hpp"
#include "host/services/plugin_struct.hpp"
#include "host/services/service_call.hpp"
#include "host/telemetry/trace.hpp"
#include "zhost/kit/dlpack_views.hpp"

#if ZHOST_WITH_CUDA
#include "host/services/device_copies_cuda.hpp"
#endif

namespace zhost {

enum class CopyMode { kImmediate, kDeferred, kCuda };

struct DeviceCopies::State {
  CopyMode mode = CopyMode::kImmediate;
  at::Device device = at::kCPU;
  std::atomic<int64_t> pending{0};  // started and not yet waited for
  zhost_copy_services table{};
  engine::TraceWriter* trace = nullptr;  // set_trace: copies become "copy" events (Note [Trace file])
};

}  // namespace zhost

struct zhost_copy {
  at::Tensor src, dst;  // borrowed views
  bool done = false;
  uint64_t started_ns = 0;  // traced CUDA copies: start() to wait()
#if ZHOST_WITH_CUDA
  zhost::cuda_copies::TransferPtr transfer;
#endif
};

namespace zhost {
namespace {

template <typename Body>
zhost_status* serve(zhost_host_context* ctx, const char* what, Body&& body) {
  return serve_call<DeviceCopies::State>(ctx, JobService::kCopies, "copies", what, std::forward<Body>(body));
}

// Host memory, or the training device's: what a copy may read and write.
bool reachable(const DeviceCopies::State& s, const at::Tensor& t) { return t.is_cpu() || t.device() == s.device; }

const char* copy_name(const zhost_copy& copy) {
  if (copy.src.is_cpu() == copy.dst.is_cpu()) return "Memcpy";  // deferred mode: both sides in host memory
  return copy.src.is_cpu() ? "Memcpy HtoD" : "Memcpy DtoH";
}

void trace_copy(const DeviceCopies::State& s, const zhost_copy& copy, uint64_t begin_ns) {
  if (!s.trace) return;
  s.trace->complete("copy", copy_name(copy), begin_ns, engine::TraceWriter::now_ns(),
                    fmt::format(R"({{"bytes": {}}})", copy.src.nbytes()));
}

void run_on_host(const DeviceCopies::State& s, zhost_copy& copy) {
  if (copy.done) return;
  const uint64_t begin = s.trace ? engine::TraceWriter::now_ns() : 0;
  copy.dst.copy_(copy.src);
  copy.done = true;
  trace_copy(s, copy, begin);
}

int32_t device_memory_is_separate(zhost_host_context* ctx) {
  const auto* state = static_cast<const DeviceCopies::State*>(HostServices::job_state(ctx, JobService::kCopies));
  return state && state->mode != CopyMode::kImmediate ? 1 : 0;
}

zhost_status* start(zhost_host_context* ctx, zhost_copy_start_args* args) {
  return serve(ctx, "start", [&](DeviceCopies::State& s) -> zhost_status* {
    if (zhost_status* refused =
            check_plugin_struct(args, ZHOST_COPY_START_ARGS_MIN_SIZE, "zhost_copy_start_args", "copies->start"))
      return refused;
    const DLTensor* src = args->src;
    DLTensor* dst = args->dst;
    zhost_copy** out = &args->copy;
    if (!src || !dst) return service_error(ZHOST_ERR_INVALID_ARGUMENT, "copies->start: needs src and dst");
    *out = nullptr;
    auto copy = std::make_unique<zhost_copy>();
    copy->src = kit::tensor_view(*src);
    copy->dst = kit::tensor_view(*dst);
    if (copy->src.scalar_type() != copy->dst.scalar_type() || copy->src.numel() != copy->dst.numel())
      return service_error(ZHOST_ERR_INVALID_ARGUMENT,
                           fmt::format("copies->start: source ({} elements of {}) and destination ({} of {}) differ",
                                       copy->src.numel(), c10::toString(copy->src.scalar_type()), copy->dst.numel(),
                                       c10::toString(copy->dst.scalar_type())));
    if (!copy->src.is_contiguous() || !copy->dst.is_contiguous())
      return service_error(ZHOST_ERR_INVALID_ARGUMENT, "copies->start: source and destination must be contiguous");
    if (!reachable(s, copy->src) || !reachable(s, copy->dst))
      return service_error(
          ZHOST_ERR_INVALID_ARGUMENT,
          fmt::format("copies->start: copies run between host memory and the training device ({}), not {} "
                      "to {}",
                      s.device.str(), copy->src.device().str(), copy->dst.device().str()));
    switch (s.mode) {
      case CopyMode::kImmediate:
        run_on_host(s, *copy);
        return nullptr;
      case CopyMode::kDeferred:
        break;
      case CopyMode::kCuda:
#if ZHOST_WITH_CUDA
        if (copy->src.is_cpu() && copy->dst.is_cpu()) {
          run_on_host(s, *copy);
          return nullptr;
        }
        if (s.trace) copy->started_ns = engine::TraceWriter::now_ns();
        copy->transfer = cuda_copies::start(copy->src, copy->dst);
#endif
        break;
    }
    ++s.pending;
    *out = copy.release();
    return nullptr;
  });
}

zhost_status* order_compute_after(zhost_host_context* ctx, zhost_copy_args* args) {
  zhost_copy* copy = args && args->struct_size >= ZHOST_COPY_ARGS_MIN_SIZE ? args->copy : nullptr;
  return serve(ctx, "order_compute_after", [&](DeviceCopies::State& s) -> zhost_status* {
    if (!copy) return service_error(ZHOST_ERR_INVALID_ARGUMENT, "copies->order_compute_after: no copy");
#if ZHOST_WITH_CUDA
    if (copy->transfer) {
      cuda_copies::order_compute_after(*copy->transfer);
      return nullptr;
    }
#endif
    run_on_host(s, *copy);  // host compute waits by the copy running now
    return nullptr;
  });
}

zhost_status* wait(zhost_host_context* ctx, zhost_copy_args* args) {
  zhost_copy* copy = args && args->struct_size >= ZHOST_COPY_ARGS_MIN_SIZE ? args->copy : nullptr;
  return serve(ctx, "wait", [&](DeviceCopies::State& s) -> zhost_status* {
    if (!copy) return service_error(ZHOST_ERR_INVALID_ARGUMENT, "copies->wait: no copy");
    std::unique_ptr<zhost_copy> owned(copy);
    --s.pending;
#if ZHOST_WITH_CUDA
    if (owned->transfer) {
      cuda_copies::wait(*owned->transfer);
      trace_copy(s, *owned, owned->started_ns);
      return nullptr;
    }
#endif
    run_on_host(s, *owned);
    return nullptr;
  });
}

CopyMode choose_mode(const at::Device& device, bool deferred) {
  if (device.is_cuda()) {
    if (deferred)
      fail_usage("debug.deferred_device_copies = true is a test mode for CPU jobs; remove it to train on {}",
                 device.str());
    return CopyMode::kCuda;
  }
  return deferred ? CopyMode::kDeferred : CopyMode::kImmediate;
}

}  // namespace

DeviceCopies::DeviceCopies(const at::Device& device, HostServices& services, bool deferred)
    : state_(std::make_unique<State>()), services_(services) {
  state_->device = device;
  state_->mode = choose_mode(device, deferred);
#if !ZHOST_WITH_CUDA
  if (state_->mode == CopyMode::kCuda) fail("this zhost build has no CUDA copies (ZHOST_WITH_CUDA is off)");
#endif
  zhost_copy_services& t = state_->table;
  t.struct_size = sizeof(t);
  t.device_memory_is_separate = device_memory_is_separate;
  t.start = start;
  t.order_compute_after = order_compute_after;
  t.wait = wait;
  services_.set_job_state(JobService::kCopies, state_.get());
  services_.set_copy_services(&state_->table);
#if ZHOST_WITH_CUDA
  if (state_->mode == CopyMode::kCuda) services_.set_pinned_allocator(cuda_copies::pinned_allocate);
#endif
  if (state_->mode == CopyMode::kDeferred)
    spdlog::warn(
        "debug.deferred_device_copies: host-device copies are staged and run as late as allowed (a test "
        "mode: slower, same results)");
}

void DeviceCopies::set_trace(engine::TraceWriter* trace) { state_->trace = trace; }

DeviceCopies::~DeviceCopies() {
  if (state_->pending > 0)
    spdlog::error("{} host-device cop{} started by plugins never completed (a plugin did not wait for them)",
                  state_->pending.load(), state_->pending == 1 ? "y was" : "ies were");
  services_.set_copy_services(nullptr);
  services_.set_pinned_allocator(nullptr);
  services_.set_job_state(JobService::kCopies, nullptr);
}

}  // namespace zhost
