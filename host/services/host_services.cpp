// host/services/host_services.cpp: the C callbacks behind zhost_host_services, and their state.
#include "host/services/host_services.hpp"

#include <spdlog/spdlog.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "host/core/error.hpp"
#include "host/services/plugin_struct.hpp"

struct zhost_status {
  zhost_status_code code;
  std::string message;
};

namespace zhost {

struct Buffer {
  zhost_memory_kind kind;
  uint64_t size_bytes;
  void* data;
  bool locked;
  std::string label;
  std::shared_ptr<void> pinned;  // owns `data` when it came from the pinned allocator
};

}  // namespace zhost

struct zhost_host_context {
  zhost::HostServices::State* state;
  zhost::PluginContextSpec spec;
  std::set<zhost_buffer_handle> buffers;
};

namespace zhost {

// A span between trace_begin and trace_end; closed, its time joins its name's SpanTotal.
struct TraceSpan {
  std::string name;
  std::string owner;  // plugin name
  uint64_t begin_ns = 0;
  uint64_t end_ns = 0;
};

struct HostServices::State {
  zhost_host_services table{};
  mutable std::mutex mutex;
  std::set<zhost_host_context*> contexts;
  std::map<zhost_buffer_handle, Buffer> buffers;
  zhost_buffer_handle next_handle = 1;
  std::shared_ptr<KvStore> kv = std::make_shared<LocalKvStore>();
  std::chrono::milliseconds default_timeout{300000};
  std::atomic<bool> abort_flag{false};
  std::string abort_reason;
  std::map<zhost_tier_role, TierRef> tiers;
  std::map<const zhost_plugin_instance*, uint64_t> storage_bytes_seen;  // tier_storage_bytes()'s last answers
  std::set<std::string> tier_names;  // every name tier_for() handed out: zhost_tier_ref.name lives for the job
  HostServices::PinnedAllocator pinned_allocator;
  std::map<uint64_t, TraceSpan> open_spans;
  std::map<std::string, SpanTotal> span_totals;  // "plugin/name" -> time, for the wall-clock breakdown
  uint64_t next_span = 1;
  HostServices::SpanSink span_sink;  // also receives every closed span (the job's trace)
  std::array<std::atomic<void*>, static_cast<size_t>(JobService::kCount)> job_states{};
};

namespace {

zhost_status* status_create(zhost_status_code code, const char* message) {
  return new (std::nothrow) zhost_status{code, message ? message : ""};
}
zhost_status_code status_code(const zhost_status* status) { return status ? status->code : ZHOST_OK; }
const char* status_message(const zhost_status* status) { return status ? status->message.c_str() : ""; }
void status_destroy(zhost_status* status) { delete status; }

spdlog::level::level_enum to_spdlog(zhost_log_level level) {
  switch (level) {
    case ZHOST_LOG_TRACE:
      return spdlog::level::trace;
    case ZHOST_LOG_DEBUG:
      return spdlog::level::debug;
    case ZHOST_LOG_INFO:
      return spdlog::level::info;
    case ZHOST_LOG_WARN:
      return spdlog::level::warn;
    default:
      return spdlog::level::err;
  }
}

void log(zhost_host_context* ctx, const zhost_log_args* args) {
  if (!args) return;
  spdlog::log(to_spdlog(args->level), "[{}] {}", ctx ? ctx->spec.plugin_name : "?", args->message ? args->message : "");
}
void log_enabled(zhost_host_context*, zhost_log_enabled_args* args) {
  if (args) args->enabled = spdlog::should_log(to_spdlog(args->level)) ? 1 : 0;
}

const char* type_name(const ConfigValue& value) {
  static const char* names[] = {"bool", "int", "float", "string"};
  return names[value.index()];
}

// Looks up a declared key of the instance's plugin with the expected alternative type.
template <typename T>
zhost_status* config_get(zhost_host_context* ctx, const char* key, const char* wanted, const T** out) {
  if (!ctx || !key) return status_create(ZHOST_ERR_INVALID_ARGUMENT, "config lookup without context or key");
  auto it = ctx->spec.config.find(key);
  if (it == ctx->spec.config.end())
    return status_create(ZHOST_ERR_CONFIG, fmt::format("plugin '{}' asked for config key '{}', which it did not "
                                                       "declare in its descriptor",
                                                       ctx->spec.plugin_name, key)
                                               .c_str());
  if (!std::holds_alternative<T>(it->second))
    return status_create(ZHOST_ERR_CONFIG,
                         fmt::format("config key '{}' is a {}, not a {}", key, type_name(it->second), wanted).c_str());
  *out = &std::get<T>(it->second);
  return nullptr;
}

// config_get: the declared key's value in the field of the asked type (an int serves a float).
zhost_status* config_get_value(zhost_host_context* ctx, zhost_config_get_args* args) {
  if (zhost_status* refused =
          check_plugin_struct(args, ZHOST_CONFIG_GET_ARGS_MIN_SIZE, "zhost_config_get_args", "config_get"))
    return refused;
  const char* key = args->key;
  switch (args->type) {
    case ZHOST_CONFIG_BOOL: {
      const bool* value = nullptr;
      if (zhost_status* s = config_get(ctx, key, "bool", &value)) return s;
      args->bool_value = *value ? 1 : 0;
      return nullptr;
    }
    case ZHOST_CONFIG_INT: {
      const int64_t* value = nullptr;
      if (zhost_status* s = config_get(ctx, key, "int", &value)) return s;
      args->int_value = *value;
      return nullptr;
    }
    case ZHOST_CONFIG_FLOAT: {
      auto it = ctx && key ? ctx->spec.config.find(key) : decltype(ctx->spec.config.end()){};
      if (ctx && key && it != ctx->spec.config.end() && std::holds_alternative<int64_t>(it->second)) {
        args->float_value = static_cast<double>(std::get<int64_t>(it->second));
        return nullptr;
      }
      const double* value = nullptr;
      if (zhost_status* s = config_get(ctx, key, "float", &value)) return s;
      args->float_value = *value;
      return nullptr;
    }
    case ZHOST_CONFIG_STRING: {
      const std::string* value = nullptr;
      if (zhost_status* s = config_get(ctx, key, "string", &value)) return s;
      args->string_value = value->c_str();  // stable: the context's map is not modified after creation
      return nullptr;
    }
  }
  return status_create(ZHOST_ERR_INVALID_ARGUMENT, "config_get: unknown zhost_config_type");
}

zhost_status* buffer_alloc(zhost_host_context* ctx, zhost_buffer_alloc_args* args) {
  if (!ctx) return status_create(ZHOST_ERR_INVALID_ARGUMENT, "buffer_alloc without context");
  if (zhost_status* refused =
          check_plugin_struct(args, ZHOST_BUFFER_ALLOC_ARGS_MIN_SIZE, "zhost_buffer_alloc_args", "buffer_alloc"))
    return refused;
  if (args->memory == ZHOST_MEMORY_DEVICE)
    return status_create(ZHOST_ERR_UNSUPPORTED,
                         "buffer_alloc: device memory is served by the training engine's "
                         "allocator, which is not available in this process");
  if (args->memory != ZHOST_MEMORY_HOST && args->memory != ZHOST_MEMORY_PINNED)
    return status_create(ZHOST_ERR_INVALID_ARGUMENT, "buffer_alloc: unknown memory kind");
  uint64_t alignment = args->alignment ? args->alignment : (args->memory == ZHOST_MEMORY_PINNED ? 4096 : 64);
  if (alignment & (alignment - 1))
    return status_create(ZHOST_ERR_INVALID_ARGUMENT, "buffer_alloc: alignment must be a power of two");
  uint64_t rounded = (args->size_bytes + alignment - 1) / alignment * alignment;
  auto* state = ctx->state;
  HostServices::PinnedAllocator pinned_allocator;
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    pinned_allocator = state->pinned_allocator;
  }
  // Pinned with a device: the device's allocator registers the pages (page-aligned, 4096).
  std::shared_ptr<void> pinned;
  if (args->memory == ZHOST_MEMORY_PINNED && pinned_allocator && alignment <= 4096) {
    try {
      pinned = pinned_allocator(rounded ? rounded : alignment);
    } catch (const std::exception& e) {
      return status_create(ZHOST_ERR_OUT_OF_MEMORY, fmt::format("buffer_alloc: could not allocate {} bytes of pinned "
                                                                "host memory: {}",
                                                                args->size_bytes, e.what())
                                                        .c_str());
    }
  }
  void* data = pinned ? pinned.get() : std::aligned_alloc(alignment, rounded ? rounded : alignment);
  if (!data)
    return status_create(
        ZHOST_ERR_OUT_OF_MEMORY,
        fmt::format("buffer_alloc: could not allocate {} bytes of host memory", args->size_bytes).c_str());
  // Pinned without a device: page-locked through mlock when the limit allows (best effort, logged once).
  bool locked = false;
  if (args->memory == ZHOST_MEMORY_PINNED && !pinned) {
    locked = mlock(data, rounded) == 0;
    static std::once_flag warned;
    if (!locked)
      std::call_once(warned,
                     [] { spdlog::debug("pinned buffers are not page-locked: mlock failed (RLIMIT_MEMLOCK)"); });
  }
  std::lock_guard<std::mutex> lock(state->mutex);
  zhost_buffer_handle handle = state->next_handle++;
  state->buffers[handle] =
      Buffer{args->memory, args->size_bytes, data, locked, args->label ? args->label : "", std::move(pinned)};
  ctx->buffers.insert(handle);
  args->handle = handle;
  args->data = data;
  return nullptr;
}

void free_buffer(Buffer& buffer) {
  if (buffer.pinned) {
    buffer.pinned.reset();
    return;
  }
  if (buffer.locked) munlock(buffer.data, buffer.size_bytes);
  std::free(buffer.data);
}

zhost_status* buffer_release(zhost_host_context* ctx, zhost_buffer_release_args* args) {
  if (!ctx) return status_create(ZHOST_ERR_INVALID_ARGUMENT, "buffer_release without context");
  if (zhost_status* refused =
          check_plugin_struct(args, ZHOST_BUFFER_RELEASE_ARGS_MIN_SIZE, "zhost_buffer_release_args", "buffer_release"))
    return refused;
  const zhost_buffer_handle handle = args->handle;
  if (handle == 0) return nullptr;
  auto* state = ctx->state;
  std::lock_guard<std::mutex> lock(state->mutex);
  auto it = state->buffers.find(handle);
  if (it == state->buffers.end() || !ctx->buffers.count(handle))
    return status_create(ZHOST_ERR_INVALID_ARGUMENT,
                         fmt::format("buffer_release: handle {} is not a live buffer of this plugin", handle).c_str());
  free_buffer(it->second);
  state->buffers.erase(it);
  ctx->buffers.erase(handle);
  return nullptr;
}

// Note [Lifetimes] (docs/abi.md): each plugin's keys live under its own prefix in the job's store, so that
// plugins (and the host's own keys) never collide; uniqueness within a plugin is the plugin's.
std::string plugin_kv_key(const zhost_host_context* ctx, const char* key) {
  return "plugin/" + ctx->spec.plugin_name + "/" + key;
}

zhost_status* kv_set(zhost_host_context* ctx, zhost_kv_set_args* args) {
  if (zhost_status* refused = check_plugin_struct(args, ZHOST_KV_SET_ARGS_MIN_SIZE, "zhost_kv_set_args", "kv_set"))
    return refused;
  const char* key = args->key;
  const void* value = args->value;
  const size_t len = args->len;
  if (!ctx || !key || (!value && len)) return status_create(ZHOST_ERR_INVALID_ARGUMENT, "kv_set: bad arguments");
  const auto* bytes = static_cast<const uint8_t*>(value);
  try {
    ctx->state->kv->set(plugin_kv_key(ctx, key), std::vector<uint8_t>(bytes, bytes + len));
  } catch (const std::exception& e) {
    return status_create(ZHOST_ERR_COMM, fmt::format("kv_set('{}'): {}", key, e.what()).c_str());
  }
  return nullptr;
}

zhost_status* kv_get(zhost_host_context* ctx, zhost_kv_get_args* args) {
  if (zhost_status* refused = check_plugin_struct(args, ZHOST_KV_GET_ARGS_MIN_SIZE, "zhost_kv_get_args", "kv_get"))
    return refused;
  const char* key = args->key;
  const size_t capacity = args->capacity;
  const int64_t timeout_ms = args->timeout_ms;
  size_t* len = &args->len;
  if (!ctx || !key) return status_create(ZHOST_ERR_INVALID_ARGUMENT, "kv_get: bad arguments");
  auto timeout = timeout_ms < 0 ? ctx->state->default_timeout : std::chrono::milliseconds(timeout_ms);
  std::optional<std::vector<uint8_t>> value;
  try {
    value = ctx->state->kv->get(plugin_kv_key(ctx, key), timeout);
  } catch (const std::exception& e) {
    return status_create(ZHOST_ERR_COMM, fmt::format("kv_get('{}'): {}", key, e.what()).c_str());
  }
  if (!value)
    return status_create(ZHOST_ERR_TIMEOUT,
                         fmt::format("kv_get('{}'): no rank set it within {} ms", key, timeout.count()).c_str());
  *len = value->size();
  if (value->size() > capacity)
    return status_create(
        ZHOST_ERR_INVALID_ARGUMENT,
        fmt::format("kv_get('{}'): value has {} bytes, buffer {}", key, value->size(), capacity).c_str());
  if (!value->empty()) std::memcpy(args->out, value->data(), value->size());
  return nullptr;
}

uint64_t clock_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

void trace_begin(zhost_host_context* ctx, zhost_trace_args* args) {
  if (!ctx || !args) return;
  auto* state = ctx->state;
  std::lock_guard<std::mutex> lock(state->mutex);
  uint64_t id = state->next_span++;
  state->open_spans[id] = TraceSpan{args->name ? args->name : "", ctx->spec.plugin_name, clock_ns(), 0};
  args->span = id;
}

void trace_end(zhost_host_context* ctx, zhost_trace_args* args) {
  if (!ctx || !args) return;
  const uint64_t span = args->span;
  auto* state = ctx->state;
  std::lock_guard<std::mutex> lock(state->mutex);
  auto it = state->open_spans.find(span);
  if (it == state->open_spans.end()) return;
  it->second.end_ns = clock_ns();
  SpanTotal& total = state->span_totals[it->second.owner + "/" + it->second.name];
  total.ns += it->second.end_ns - it->second.begin_ns;
  ++total.count;
  if (state->span_sink) {  // the sink may not throw across the ABI
    try {
      state->span_sink(it->second.owner, it->second.name, it->second.begin_ns, it->second.end_ns);
    } catch (const std::exception&) {
    }
  }
  state->open_spans.erase(it);
}

int32_t abort_requested_cb(zhost_host_context* ctx) { return ctx && ctx->state->abort_flag.load() ? 1 : 0; }

void request_abort_cb(zhost_host_context* ctx, const zhost_abort_args* args) {
  if (!ctx) return;
  const char* reason = args ? args->reason : nullptr;
  std::lock_guard<std::mutex> lock(ctx->state->mutex);
  if (!ctx->state->abort_flag.exchange(true))
    ctx->state->abort_reason =
        fmt::format("plugin '{}' aborted the job: {}", ctx->spec.plugin_name, reason ? reason : "");
}

zhost_status* tier_for(zhost_host_context* ctx, zhost_tier_ref* out) {
  if (!ctx) return status_create(ZHOST_ERR_INVALID_ARGUMENT, "tier_for without context");
  if (zhost_status* refused = check_plugin_struct(out, ZHOST_TIER_REF_MIN_SIZE, "zhost_tier_ref", "tier_for"))
    return refused;
  out->instance = nullptr;
  out->storage = nullptr;
  out->optimizer = nullptr;
  out->name = nullptr;
  std::lock_guard<std::mutex> lock(ctx->state->mutex);
  auto it = ctx->state->tiers.find(out->role);
  if (it == ctx->state->tiers.end()) return nullptr;  // the config names no tier for this role
  out->instance = it->second.instance;
  out->storage = it->second.storage();
  out->optimizer = it->second.optimizer();
  out->name = ctx->state->tier_names.insert(it->second.name).first->c_str();  // valid for the job, even after a swap
  return nullptr;
}

// The table of callbacks for a host presenting `abi_minor`; the per-job members (collectives, params,
// copies) start NULL.
zhost_host_services make_table(uint32_t abi_minor) {
  zhost_host_services t{};
  t.struct_size = sizeof(zhost_host_services);
  t.abi_major = ZHOST_ABI_MAJOR;
  t.abi_minor = abi_minor;
  t.host_version = "0.1.0";
  t.status_create = status_create;
  t.status_code = status_code;
  t.status_message = status_message;
  t.status_destroy = status_destroy;
  t.log = log;
  t.log_enabled = log_enabled;
  t.config_get = config_get_value;
  t.buffer_alloc = buffer_alloc;
  t.buffer_release = buffer_release;
  t.kv_set = kv_set;
  t.kv_get = kv_get;
  t.clock_ns = clock_ns;
  t.trace_begin = trace_begin;
  t.trace_end = trace_end;
  t.abort_requested = abort_requested_cb;
  t.request_abort = request_abort_cb;
  t.collectives = nullptr;
  t.tier_for = tier_for;
  t.params = nullptr;
  t.copies = nullptr;
  return t;
}

}  // namespace

HostServices::HostServices(uint32_t abi_minor) : state_(std::make_unique<State>()) {
  state_->table = make_table(abi_minor);
}

const zhost_host_services* HostServices::negotiation_table(uint32_t abi_minor) {
  // Never freed: plugins keep the table they negotiated with (Note [Lifetimes] in docs/abi.md).
  static std::mutex mutex;
  static std::map<uint32_t, std::unique_ptr<zhost_host_services>> tables;
  std::lock_guard<std::mutex> lock(mutex);
  auto& table = tables[abi_minor];
  if (!table) table = std::make_unique<zhost_host_services>(make_table(abi_minor));
  return table.get();
}

HostServices::~HostServices() {
  for (auto* ctx : std::set<zhost_host_context*>(state_->contexts)) destroy_context(ctx);
}

const zhost_host_services* HostServices::table() const { return &state_->table; }
uint32_t HostServices::abi_minor() const { return state_->table.abi_minor; }

zhost_host_context* HostServices::create_context(PluginContextSpec spec) {
  auto* ctx = new zhost_host_context{state_.get(), std::move(spec), {}};
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->contexts.insert(ctx);
  return ctx;
}

void HostServices::destroy_context(zhost_host_context* ctx) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (!state_->contexts.erase(ctx)) return;
  for (auto handle : ctx->buffers) {
    auto it = state_->buffers.find(handle);
    if (it == state_->buffers.end()) continue;
    spdlog::debug("[{}] buffer '{}' ({} bytes) released with its plugin instance", ctx->spec.plugin_name,
                  it->second.label, it->second.size_bytes);
    free_buffer(it->second);
    state_->buffers.erase(it);
  }
  delete ctx;
}

void HostServices::set_job_state(JobService service, void* state) {
  state_->job_states[static_cast<size_t>(service)].store(state);
}

void* HostServices::job_state(zhost_host_context* ctx, JobService service) {
  return ctx ? ctx->state->job_states[static_cast<size_t>(service)].load() : nullptr;
}

void HostServices::set_collectives(const zhost_collectives* collectives) {
  if (state_->table.struct_size >= ZHOST_STRUCT_SIZE(zhost_host_services, collectives))
    state_->table.collectives = collectives;
}
void HostServices::set_param_services(const zhost_param_services* params) {
  if (state_->table.struct_size >= ZHOST_STRUCT_SIZE(zhost_host_services, params)) state_->table.params = params;
}
void HostServices::set_copy_services(const zhost_copy_services* copies) {
  if (state_->table.struct_size >= ZHOST_STRUCT_SIZE(zhost_host_services, copies)) state_->table.copies = copies;
}
void HostServices::set_pinned_allocator(PinnedAllocator allocate) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->pinned_allocator = std::move(allocate);
}
void HostServices::set_tier(zhost_tier_role role, std::optional<TierRef> tier) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (tier)
    state_->tiers[role] = std::move(*tier);
  else
    state_->tiers.erase(role);
}
uint64_t HostServices::tier_storage_bytes(bool optimizer_storage_busy) const {
  std::vector<std::pair<zhost_tier_role, TierRef>> tiers;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    for (const auto& [role, tier] : state_->tiers) {
      const bool seen = std::any_of(tiers.begin(), tiers.end(), [&tier = tier](const auto& other) {
        return other.second.instance == tier.instance;
      });
      if (!seen) tiers.emplace_back(role, tier);
    }
  }
  uint64_t bytes = 0;
  for (const auto& [role, tier] : tiers) {  // outside the lock: a tier may call back into the services
    if (!tier.storage()) continue;
    // A computing tier's storage_bytes are what it placed in a storing tier, which reports them itself.
    if (tier.optimizer()) continue;
    if (optimizer_storage_busy && role == ZHOST_TIER_FOR_OPTIMIZER_STORAGE) {
      std::lock_guard<std::mutex> lock(state_->mutex);
      bytes += state_->storage_bytes_seen[tier.instance];
      continue;
    }
    zhost_tier_memory memory{};
    memory.struct_size = sizeof(memory);
    throw_if_error(tier.storage()->memory(tier.instance, &memory), "offload tier '" + tier.name + "' memory");
    bytes += memory.storage_bytes;
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->storage_bytes_seen[tier.instance] = memory.storage_bytes;
  }
  return bytes;
}

void HostServices::set_kv_store(std::shared_ptr<KvStore> store) { state_->kv = std::move(store); }
void HostServices::set_default_timeout(std::chrono::milliseconds timeout) { state_->default_timeout = timeout; }

bool HostServices::abort_requested() const { return state_->abort_flag.load(); }
std::string HostServices::abort_reason() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->abort_reason;
}
void HostServices::request_abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (!state_->abort_flag.exchange(true)) state_->abort_reason = reason;
}

void HostServices::set_span_sink(SpanSink sink) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->span_sink = std::move(sink);
}

std::map<std::string, SpanTotal> HostServices::take_span_totals() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return std::exchange(state_->span_totals, {});
}

uint64_t HostServices::live_buffer_bytes(zhost_memory_kind kind) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  uint64_t total = 0;
  for (const auto& [handle, buffer] : state_->buffers)
    if (buffer.kind == kind) total += buffer.size_bytes;
  return total;
}

void HostServices::throw_if_error(zhost_status* status, const std::string& context) {
  if (!status) return;
  std::string message = context + ": " + status->message;
  zhost_status_code code = status->code;
  delete status;
  if (code == ZHOST_ERR_CONFIG || code == ZHOST_ERR_INVALID_ARGUMENT) throw UsageError(message);
  if (code == ZHOST_ERR_OUT_OF_MEMORY) throw OutOfMemoryError(message);
  throw Error(message,
              code == ZHOST_ERR_COMM || code == ZHOST_ERR_TIMEOUT ? ExitCode::kRankFailed : ExitCode::kRuntime);
}

zhost_status* HostServices::make_status(zhost_status_code code, const std::string& message) {
  return status_create(code, message.c_str());
}

}  // namespace zhost
