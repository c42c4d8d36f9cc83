// sdk/conformance/kit_host.cpp: the conformance kit's host-services table (see the header).
#include "kit_host.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

struct zhost_status {
  zhost_status_code code;
  std::string message;
};

namespace zhost::conformance {
namespace {

zhost_status* status_create(zhost_status_code code, const char* message) {
  return KitHost::make_status(code, message ? message : "");
}
zhost_status_code status_code(const zhost_status* s) { return s ? s->code : ZHOST_OK; }
const char* status_message(const zhost_status* s) { return s ? s->message.c_str() : ""; }
void status_destroy(zhost_status* s) { delete s; }

void log(zhost_host_context* ctx, const zhost_log_args* args);
void log_enabled(zhost_host_context*, zhost_log_enabled_args* args) { args->enabled = 1; }

uint64_t clock_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}
void trace_begin(zhost_host_context*, zhost_trace_args* args) { args->span = 1; }
void trace_end(zhost_host_context*, zhost_trace_args*) {}

std::string unquoted(const std::string& literal) {
  if (literal.size() >= 2 && literal.front() == '"' && literal.back() == '"')
    return literal.substr(1, literal.size() - 2);
  return literal;
}

}  // namespace

zhost_status* KitHost::make_status(zhost_status_code code, const std::string& message) {
  return new zhost_status{code, message};
}

KitHost::KitHost(const zhost_plugin_descriptor* descriptor, std::map<std::string, std::string> overrides, bool verbose)
    : verbose_(verbose) {
  if (verbose_) setenv("ZHOST_CONFORMANCE_VERBOSE", "1", 1);
  for (size_t i = 0; descriptor && i < descriptor->num_config_keys; ++i) {
    const zhost_config_key& k = descriptor->config_keys[i];
    config_[k.key] = Key{k.type, k.default_value ? k.default_value : ""};
  }
  // Keys the plugin reads but another declares (the host, another plugin): the kit knows neither their type nor
  // their default, so each takes its value from --set, in the type the plugin asks for.
  if (ZHOST_HAS_FIELD(descriptor, zhost_plugin_descriptor, reads_keys) && descriptor->reads_keys)
    for (const char* const* key = descriptor->reads_keys; *key; ++key) config_.emplace(*key, Key{kReadKey, ""});
  for (auto& [key, value] : overrides) {
    auto it = config_.find(key);
    if (it == config_.end())
      throw std::runtime_error("--set " + key + ": the plugin declares no such config key, nor reads one");
    if (it->second.type == kReadKey) {
      it->second.literal = value;
      continue;
    }
    // A bare word for a string key is its value; quotes are optional.
    it->second.literal = it->second.type == ZHOST_CONFIG_STRING && value.front() != '"' ? "\"" + value + "\"" : value;
  }
  table_.struct_size = sizeof(table_);
  table_.abi_major = ZHOST_ABI_MAJOR;
  table_.abi_minor = ZHOST_ABI_MINOR;
  table_.host_version = "zhost-conformance";
  table_.status_create = status_create;
  table_.status_code = status_code;
  table_.status_message = status_message;
  table_.status_destroy = status_destroy;
  table_.log = log;
  table_.log_enabled = log_enabled;
  table_.config_get = config_get;
  table_.buffer_alloc = buffer_alloc;
  table_.buffer_release = buffer_release;
  table_.kv_set = kv_set;
  table_.kv_get = kv_get;
  table_.clock_ns = clock_ns;
  table_.trace_begin = trace_begin;
  table_.trace_end = trace_end;
  table_.abort_requested = [](zhost_host_context* ctx) { return of(ctx).aborted_; };
  table_.request_abort = [](zhost_host_context* ctx, const zhost_abort_args*) { of(ctx).aborted_ = 1; };
  table_.collectives = nullptr;  // no process group: partition hooks are not driven
  table_.tier_for = tier_for;
  table_.params = nullptr;
  table_.copies = nullptr;  // training "in host memory": tiers copy host tensors themselves
}

KitHost::~KitHost() {
  for (auto& [handle, buffer] : buffers_) std::free(buffer.data);
}

uint64_t KitHost::live_buffer_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t bytes = 0;
  for (const auto& [handle, buffer] : buffers_) bytes += buffer.bytes;
  return bytes;
}

std::string KitHost::take_message(zhost_status* status, zhost_status_code* code) const {
  if (code) *code = status ? status->code : ZHOST_OK;
  std::string message = status ? status->message : "";
  delete status;
  return message;
}

namespace {
void log(zhost_host_context* ctx, const zhost_log_args* args) {
  (void)ctx;
  const zhost_log_level level = args->level;
  const char* message = args->message;
  static const char* names[] = {"trace", "debug", "info", "warn", "error"};
  if (std::getenv("ZHOST_CONFORMANCE_VERBOSE") || level >= ZHOST_LOG_WARN)
    std::fprintf(stderr, "  [plugin %s] %s\n", names[level >= 0 && level <= 4 ? level : 2], message ? message : "");
}
}  // namespace

const std::string* KitHost::config_literal(const char* key, zhost_config_type type, zhost_status** error) const {
  auto it = key ? config_.find(key) : config_.end();
  if (it == config_.end()) {
    *error = make_status(ZHOST_ERR_CONFIG, std::string("config key '") + (key ? key : "(null)") + "' is not declared");
    return nullptr;
  }
  if (it->second.type == kReadKey && it->second.literal.empty()) {
    *error = make_status(ZHOST_ERR_CONFIG, std::string("config key '") + key +
                                               "' is read by the plugin but declared by the host or another plugin, "
                                               "so the kit has no default for it: pass --set " +
                                               key + "=...");
    return nullptr;
  }
  if (it->second.type != type && it->second.type != kReadKey) {
    *error = make_status(ZHOST_ERR_CONFIG, std::string("config key '") + key + "' asked for with the wrong type");
    return nullptr;
  }
  if (it->second.literal.empty()) {
    *error =
        make_status(ZHOST_ERR_CONFIG, std::string("config key '") + key + "' is required: pass --set " + key + "=...");
    return nullptr;
  }
  return &it->second.literal;
}

zhost_status* KitHost::config_get(zhost_host_context* ctx, zhost_config_get_args* args) {
  if (!args || args->struct_size < ZHOST_CONFIG_GET_ARGS_MIN_SIZE)
    return make_status(ZHOST_ERR_INVALID_ARGUMENT, "config_get: args missing or too small");
  zhost_status* error = nullptr;
  KitHost& host = of(ctx);
  const char* key = args->key;
  const std::string* literal = host.config_literal(key, args->type, &error);
  if (!literal) return error;
  switch (args->type) {
    case ZHOST_CONFIG_BOOL:
      args->bool_value = *literal == "true" ? 1 : 0;
      break;
    case ZHOST_CONFIG_INT:
      args->int_value = static_cast<int64_t>(std::strtod(literal->c_str(), nullptr));  // "5e8" is an int too
      break;
    case ZHOST_CONFIG_FLOAT:
      args->float_value = std::strtod(literal->c_str(), nullptr);
      break;
    case ZHOST_CONFIG_STRING:
      args->string_value = (host.strings_[key] = unquoted(*literal)).c_str();
      break;
  }
  return nullptr;
}

zhost_status* KitHost::buffer_alloc(zhost_host_context* ctx, zhost_buffer_alloc_args* args) {
  if (!args || args->struct_size < ZHOST_BUFFER_ALLOC_ARGS_SIZE)
    return make_status(ZHOST_ERR_INVALID_ARGUMENT, "buffer_alloc: args missing or too small");
  if (args->memory == ZHOST_MEMORY_DEVICE)
    return make_status(ZHOST_ERR_UNSUPPORTED, "buffer_alloc: the conformance kit has no device memory");
  const uint64_t alignment = args->alignment ? args->alignment : (args->memory == ZHOST_MEMORY_PINNED ? 4096 : 64);
  const uint64_t bytes = (std::max<uint64_t>(args->size_bytes, 1) + alignment - 1) / alignment * alignment;
  void* data = std::aligned_alloc(alignment, bytes);
  if (!data) return make_status(ZHOST_ERR_OUT_OF_MEMORY, "buffer_alloc: out of memory");
  KitHost& host = of(ctx);
  std::lock_guard<std::mutex> lock(host.mutex_);
  args->handle = host.next_handle_++;
  args->data = data;
  host.buffers_[args->handle] = Buffer{data, args->size_bytes};
  return nullptr;
}

zhost_status* KitHost::buffer_release(zhost_host_context* ctx, zhost_buffer_release_args* args) {
  if (!args || args->struct_size < ZHOST_BUFFER_RELEASE_ARGS_MIN_SIZE)
    return make_status(ZHOST_ERR_INVALID_ARGUMENT, "buffer_release: args missing or too small");
  const zhost_buffer_handle handle = args->handle;
  KitHost& host = of(ctx);
  std::lock_guard<std::mutex> lock(host.mutex_);
  auto it = host.buffers_.find(handle);
  if (it == host.buffers_.end())
    return make_status(ZHOST_ERR_INVALID_ARGUMENT, "buffer_release: unknown handle " + std::to_string(handle));
  std::free(it->second.data);
  host.buffers_.erase(it);
  return nullptr;
}

zhost_status* KitHost::kv_set(zhost_host_context* ctx, zhost_kv_set_args* args) {
  if (!args || args->struct_size < ZHOST_KV_SET_ARGS_MIN_SIZE || !args->key)
    return make_status(ZHOST_ERR_INVALID_ARGUMENT, "kv_set: args missing or too small");
  KitHost& host = of(ctx);
  std::lock_guard<std::mutex> lock(host.mutex_);
  const char* value = static_cast<const char*>(args->value);
  host.kv_[args->key] = std::vector<char>(value, value + args->len);
  return nullptr;
}

zhost_status* KitHost::kv_get(zhost_host_context* ctx, zhost_kv_get_args* args) {
  if (!args || args->struct_size < ZHOST_KV_GET_ARGS_MIN_SIZE || !args->key)
    return make_status(ZHOST_ERR_INVALID_ARGUMENT, "kv_get: args missing or too small");
  const char* key = args->key;
  const size_t capacity = args->capacity;
  size_t* len = &args->len;
  KitHost& host = of(ctx);
  std::lock_guard<std::mutex> lock(host.mutex_);
  auto it = host.kv_.find(key);
  if (it == host.kv_.end())  // one rank: nobody else will ever set it
    return make_status(ZHOST_ERR_TIMEOUT, std::string("kv_get: key '") + key + "' was never set");
  *len = it->second.size();
  if (it->second.size() > capacity)
    return make_status(ZHOST_ERR_INVALID_ARGUMENT, "kv_get: value larger than capacity");
  std::memcpy(args->out, it->second.data(), it->second.size());
  return nullptr;
}

zhost_status* KitHost::tier_for(zhost_host_context* ctx, zhost_tier_ref* out) {
  if (!out || out->struct_size < ZHOST_TIER_REF_SIZE)
    return make_status(ZHOST_ERR_INVALID_ARGUMENT, "tier_for: needs a zhost_tier_ref with struct_size set");
  KitHost& host = of(ctx);
  auto it = host.tiers_.find(out->role);
  out->instance = it == host.tiers_.end() ? nullptr : it->second.instance;
  out->storage = it == host.tiers_.end() ? nullptr : it->second.storage;
  out->optimizer = it == host.tiers_.end() ? nullptr : it->second.optimizer;
  out->name = it == host.tiers_.end() ? nullptr : it->second.name;
  return nullptr;
}

}  // namespace zhost::conformance
