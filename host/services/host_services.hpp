// host/services/host_services.hpp: the host's implementation of zhost_host_services.
//
// One HostServices object per job owns the C table handed to plugins and one context per plugin instance.
// A context knows the plugin's name (log attribution), the config values the plugin declared (validated,
// defaults applied), the buffers the instance allocated (released with the context), and its job: the
// services the engine installs for the job (collectives, parameter storage, copies) find their state
// through the context a plugin passes in, never through process globals, so that two jobs (two
// HostServices) in one process share nothing. The engine also installs a job-wide key-value store once a
// process group exists.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "host/services/kv_store.hpp"
#include "zhost/host.h"
#include "zhost/optimizer.h"
#include "zhost/plugin.h"
#include "zhost/storage.h"

namespace zhost {

using ConfigValue = std::variant<bool, int64_t, double, std::string>;

struct PluginContextSpec {
  std::string plugin_name;
  std::map<std::string, ConfigValue> config;  // dotted key -> value, for the keys the plugin declared
};

// Time spent in closed spans of one name, summed.
struct SpanTotal {
  uint64_t ns = 0;
  uint64_t count = 0;
};

// An offload tier's instance as tier_for() hands it to other plugins.
struct TierRef {
  zhost_plugin_instance* instance = nullptr;
  const zhost_plugin_api* api = nullptr;  // the tier plugin's lifecycle table, whose storage/optimizer tables serve
  std::string name;
  const zhost_storage_api* storage() const { return api ? api->storage : nullptr; }
  const zhost_optimizer_tier_api* optimizer() const { return api ? api->optimizer : nullptr; }
};

// The services whose C callbacks the engine serves from per-job state (see job_state()).
enum class JobService { kCollectives, kParams, kCopies, kCount };

class HostServices {
 public:
  // `abi_minor` is the minor this host presents to plugins; tests use an older one to act as an old host.
  explicit HostServices(uint32_t abi_minor = ZHOST_ABI_MINOR);
  ~HostServices();
  HostServices(const HostServices&) = delete;
  HostServices& operator=(const HostServices&) = delete;

  const zhost_host_services* table() const;
  // The table negotiation hands a plugin (zhost_negotiation.host): the same callbacks, no job's services,
  // valid until the process ends, since a plugin may keep it for as long as it is loaded (Note [Lifetimes]).
  static const zhost_host_services* negotiation_table(uint32_t abi_minor);
  uint32_t abi_minor() const;

  zhost_host_context* create_context(PluginContextSpec spec);
  void destroy_context(zhost_host_context* ctx);  // releases the buffers the instance still holds

  // The state behind `service`'s callbacks in this job (owned by the engine object that serves it), or
  // nullptr once it stops; a callback finds it from its context with job_state().
  void set_job_state(JobService service, void* state);
  // The state set for `service` in the job `ctx` belongs to; nullptr without a context or a state.
  static void* job_state(zhost_host_context* ctx, JobService service);

  void set_collectives(const zhost_collectives* collectives);
  // Parameter storage for a partition plugin that partitions parameters (the trainer's), or nullptr.
  void set_param_services(const zhost_param_services* params);
  // Copies between host memory and the training device (the trainer's), or nullptr.
  void set_copy_services(const zhost_copy_services* copies);
  // Where ZHOST_MEMORY_PINNED buffers come from once a device needs them registered (CUDA: LibTorch's
  // pinned allocator, page-aligned); nullptr: aligned host memory, mlock'd when the limit allows.
  using PinnedAllocator = std::function<std::shared_ptr<void>(size_t bytes)>;
  void set_pinned_allocator(PinnedAllocator allocate);
  // The tier that serves `role` (tier_for), or none.
  void set_tier(zhost_tier_role role, std::optional<TierRef> tier);
  // What the installed storing tiers (no optimizer_setup) keep in storage of their own
  // (zhost_tier_memory.storage_bytes, e.g. the NVMe tier's files), summed over distinct instances; a
  // computing tier's storage_bytes are counted by the tier holding them. Call it from the training thread.
  // `optimizer_storage_busy`: the computing tier may be using its storing tier right now (a delayed step in
  // flight), and a tier takes one call at a time (docs/abi.md §3), so that tier's last answer is used.
  uint64_t tier_storage_bytes(bool optimizer_storage_busy = false) const;
  void set_kv_store(std::shared_ptr<KvStore> store);
  void set_default_timeout(std::chrono::milliseconds timeout);

  bool abort_requested() const;
  std::string abort_reason() const;
  void request_abort(const std::string& reason);

  // Per "plugin/span name": total time and count of the spans closed since the last call.
  std::map<std::string, SpanTotal> take_span_totals();
  // Called (under the services' lock, on the thread that closes the span) for every span closed from now
  // on, with steady_clock (CLOCK_MONOTONIC) nanoseconds; empty: none. The engine feeds the trace with it.
  using SpanSink =
      std::function<void(const std::string& plugin, const std::string& name, uint64_t begin_ns, uint64_t end_ns)>;
  void set_span_sink(SpanSink sink);
  uint64_t live_buffer_bytes(zhost_memory_kind kind) const;

  // For host code calling into plugins: turns a status into a zhost::Error (and releases it).
  static void throw_if_error(zhost_status* status, const std::string& context);
  static zhost_status* make_status(zhost_status_code code, const std::string& message);

  struct State;  // shared with the C callbacks

 private:
  std::unique_ptr<State> state_;
};

}  // namespace zhost
