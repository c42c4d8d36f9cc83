// zhost/cpp/plugin.hpp: header-only C++17 helpers for writing zhost plugins against the C ABI.
//
//   - Status:            RAII owner of a zhost_status received from the host.
//   - PluginError:       (zhost/cpp/error.hpp) the exception plugin code throws; guard() turns it into a status.
//   - guard():           runs a lambda, converting any exception into a status (no exception may cross).
//   - Host:              the host-services table bound to one instance's context, with helpers that build each
//                        call's args struct (log, config lookups, group info, copies, buffer release).
//   - DescriptorBuilder: builds the static descriptor (strings, arrays and key specs it owns).
//   - ZHOST_PLUGIN_ENTRY: defines the exported zhost_plugin_v1 entry from a descriptor and a lifecycle table.
//   - InstanceOf<T>:     create/destroy functions that construct and delete a C++ object as the instance.
//   - ConfigCheck:       what check_config gets, for `void check(const ConfigCheck&)`, and its
//                        entry check_config_entry<check>.
//
// Only the C ABI crosses the shared-object boundary: nothing here is exported except the entry.
#pragma once

#include <cstring>
#include <deque>
#include <initializer_list>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "zhost/cpp/error.hpp"
#include "zhost/zhost.h"

namespace zhost::sdk {

// Owns a status returned by a host call; destroys it through the host when it goes out of scope.
class Status {
 public:
  Status(const zhost_host_services* host, zhost_status* status) : host_(host), status_(status) {}
  Status(const Status&) = delete;
  Status& operator=(const Status&) = delete;
  Status(Status&& other) noexcept : host_(other.host_), status_(std::exchange(other.status_, nullptr)) {}
  ~Status() {
    if (status_) host_->status_destroy(status_);
  }
  bool ok() const { return status_ == nullptr; }
  zhost_status_code code() const { return status_ ? host_->status_code(status_) : ZHOST_OK; }
  std::string message() const { return status_ ? host_->status_message(status_) : std::string(); }
  // Throws PluginError carrying this status's code and message.
  void throw_if_error() const {
    if (status_) throw PluginError(code(), message());
  }

 private:
  const zhost_host_services* host_;
  zhost_status* status_;
};

// The host-services table this plugin negotiated with (set by negotiate_v1; one per plugin library,
// since these helpers are header-only and plugins hide their symbols).
inline const zhost_host_services*& negotiated_host() {
  static const zhost_host_services* host = nullptr;
  return host;
}

// Runs `body` and returns NULL, or the status describing the exception it threw. Use it as the whole
// body of every function a plugin exposes through the ABI.
template <typename Body>
zhost_status* guard(const zhost_host_services* host, Body&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (const PluginError& e) {
    return host->status_create(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return host->status_create(ZHOST_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return host->status_create(ZHOST_ERR_INTERNAL, e.what());
  } catch (...) {
    return host->status_create(ZHOST_ERR_INTERNAL, "unknown exception in plugin");
  }
}

// guard() with the negotiated host table.
template <typename Body>
zhost_status* guard(Body&& body) noexcept {
  return guard(negotiated_host(), std::forward<Body>(body));
}

// The host-services table bound to one plugin instance's context, with C++ conveniences that throw
// PluginError on failure. Cheap to copy.
class Host {
 public:
  Host(const zhost_host_services* services, zhost_host_context* ctx, uint32_t tier_role = 0)
      : services_(services), ctx_(ctx), tier_role_(tier_role) {}
  const zhost_host_services* services() const { return services_; }
  zhost_host_context* context() const { return ctx_; }
  // For an offload tier, the one zhost_tier_role this instance was created for
  // (zhost_plugin_create_args.tier_role); 0 when it serves every role its plugin was given.
  uint32_t tier_role() const { return tier_role_; }

  void log(zhost_log_level level, const std::string& message) const {
    zhost_log_args args{};
    args.struct_size = sizeof(args);
    args.level = level;
    args.message = message.c_str();
    services_->log(ctx_, &args);
  }
  void info(const std::string& message) const { log(ZHOST_LOG_INFO, message); }
  void warn(const std::string& message) const { log(ZHOST_LOG_WARN, message); }

  bool config_bool(const char* key) const { return config(key, ZHOST_CONFIG_BOOL).bool_value != 0; }
  int64_t config_int(const char* key) const { return config(key, ZHOST_CONFIG_INT).int_value; }
  double config_float(const char* key) const { return config(key, ZHOST_CONFIG_FLOAT).float_value; }
  std::string config_string(const char* key) const {
    const char* value = config(key, ZHOST_CONFIG_STRING).string_value;
    return value ? value : "";
  }

  // The collectives table, or a PluginError when the job has no process group.
  const zhost_collectives& collectives() const {
    if (!ZHOST_HAS_FIELD(services_, zhost_host_services, collectives) || services_->collectives == nullptr)
      throw PluginError(ZHOST_ERR_UNSUPPORTED, "the host has no process group (collectives unavailable)");
    return *services_->collectives;
  }

  // Copies between host memory and the training device, or nullptr outside a training job.
  const zhost_copy_services* copies() const { return services_->copies; }

  // This rank's index and the size of `group` (nullptr: the data-parallel world); throws without collectives.
  zhost_group_info_args group_info(zhost_group* group = nullptr) const {
    zhost_group_info_args args{};
    args.struct_size = sizeof(args);
    args.group = group;
    check(collectives().group_info(ctx_, &args));
    return args;
  }
  // A sub-group of the job-wide `ranks` (collective: every member calls it alike); lives until the job ends.
  zhost_group* new_group(const int32_t* ranks, size_t num_ranks) const {
    zhost_new_group_args args{};
    args.struct_size = sizeof(args);
    args.ranks = ranks;
    args.num_ranks = num_ranks;
    check(collectives().new_group(ctx_, &args));
    return args.group;
  }
  // Completes an asynchronous collective (NULL: nothing to wait for); the status, not thrown.
  zhost_status* wait_work(zhost_work* work) const {
    zhost_work_wait_args args{};
    args.struct_size = sizeof(args);
    args.work = work;
    return collectives().wait(ctx_, &args);
  }

  // Copies between host memory and the training device (copies() must be non-NULL); NULL: done already.
  zhost_copy* copy_start(const DLTensor& src, DLTensor& dst) const {
    zhost_copy_start_args args{};
    args.struct_size = sizeof(args);
    args.src = &src;
    args.dst = &dst;
    check(services_->copies->start(ctx_, &args));
    return args.copy;
  }
  void copy_order_compute_after(zhost_copy* copy) const {
    zhost_copy_args args{};
    args.struct_size = sizeof(args);
    args.copy = copy;
    check(services_->copies->order_compute_after(ctx_, &args));
  }
  // Completes and frees `copy`; the status, not thrown (destructors call it).
  zhost_status* copy_wait(zhost_copy* copy) const {
    zhost_copy_args args{};
    args.struct_size = sizeof(args);
    args.copy = copy;
    return services_->copies->wait(ctx_, &args);
  }

  // Releases a buffer of buffer_alloc; the status, not thrown (destructors call it).
  zhost_status* buffer_release(zhost_buffer_handle handle) const {
    zhost_buffer_release_args args{};
    args.struct_size = sizeof(args);
    args.handle = handle;
    return services_->buffer_release(ctx_, &args);
  }

  // Throws PluginError if `status` is an error (and releases it either way).
  void check(zhost_status* status) const { Status(services_, status).throw_if_error(); }

 private:
  zhost_config_get_args config(const char* key, zhost_config_type type) const {
    zhost_config_get_args args{};
    args.struct_size = sizeof(args);
    args.key = key;
    args.type = type;
    check(services_->config_get(ctx_, &args));
    return args;
  }

  const zhost_host_services* services_;
  zhost_host_context* ctx_;
  uint32_t tier_role_ = 0;
};

// Builds a plugin descriptor and owns everything it points to. Keep the builder in static storage (e.g.
// a function-local static) so the descriptor outlives every use, as the ABI requires.
class DescriptorBuilder {
 public:
  DescriptorBuilder(const char* name, const char* version, zhost_capability_kind kind) {
    descriptor_.struct_size = sizeof(zhost_plugin_descriptor);
    descriptor_.name = keep(name);
    descriptor_.version = keep(version);
    descriptor_.summary = keep("");
    descriptor_.kind = kind;
  }
  DescriptorBuilder(const DescriptorBuilder&) = delete;
  DescriptorBuilder& operator=(const DescriptorBuilder&) = delete;

  DescriptorBuilder& summary(const char* text) {
    descriptor_.summary = keep(text);
    return *this;
  }
  DescriptorBuilder& provides(std::initializer_list<const char*> caps) { return names(provides_, caps); }
  DescriptorBuilder& requires_caps(std::initializer_list<const char*> caps) { return names(requires_, caps); }
  DescriptorBuilder& conflicts(std::initializer_list<const char*> caps) { return names(conflicts_, caps); }
  // Keys declared by the host or another plugin that this plugin reads (zhost_plugin_descriptor::reads_keys).
  DescriptorBuilder& reads_keys(std::initializer_list<const char*> keys) { return names(reads_, keys); }
  DescriptorBuilder& flags(uint64_t value) {
    descriptor_.flags = value;
    return *this;
  }

  DescriptorBuilder& config_bool(const char* key, bool default_value, const char* doc) {
    return add_key(key, ZHOST_CONFIG_BOOL, default_value ? "true" : "false", doc);
  }
  DescriptorBuilder& config_int(const char* key, int64_t default_value, const char* doc) {
    return add_key(key, ZHOST_CONFIG_INT, std::to_string(default_value), doc);
  }
  DescriptorBuilder& config_int(const char* key, int64_t default_value, const char* doc, double min, double max) {
    add_key(key, ZHOST_CONFIG_INT, std::to_string(default_value), doc);
    return range(min, max);
  }
  DescriptorBuilder& config_float(const char* key, double default_value, const char* doc, double min, double max) {
    add_key(key, ZHOST_CONFIG_FLOAT, float_literal(default_value), doc);
    return range(min, max);
  }
  DescriptorBuilder& config_string(const char* key, const char* default_value, const char* doc,
                                   std::initializer_list<const char*> choices = {}) {
    add_key(key, ZHOST_CONFIG_STRING, "\"" + std::string(default_value) + "\"", doc);
    if (choices.size()) {
      auto& list = choice_lists_.emplace_back();
      for (const char* c : choices) list.push_back(keep(c));
      list.push_back(nullptr);
      pending_choices_.emplace_back(keys_.size() - 1, choice_lists_.size() - 1);
    }
    return *this;
  }

  // Finalises the pointers; call once, after every setter.
  const zhost_plugin_descriptor* build() {
    descriptor_.provides = terminated(provides_);
    descriptor_.requires_caps = requires_.empty() ? nullptr : terminated(requires_);
    descriptor_.conflicts = conflicts_.empty() ? nullptr : terminated(conflicts_);
    descriptor_.reads_keys = reads_.empty() ? nullptr : terminated(reads_);
    for (auto [key_index, list_index] : pending_choices_) keys_[key_index].choices = choice_lists_[list_index].data();
    descriptor_.config_keys = keys_.empty() ? nullptr : keys_.data();
    descriptor_.num_config_keys = keys_.size();
    return &descriptor_;
  }

 private:
  const char* keep(const std::string& text) { return strings_.emplace_back(text).c_str(); }
  static std::string float_literal(double value) {
    std::string text = std::to_string(value);
    if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
    return text;
  }
  DescriptorBuilder& names(std::vector<const char*>& list, std::initializer_list<const char*> caps) {
    for (const char* c : caps) list.push_back(keep(c));
    return *this;
  }
  static const char* const* terminated(std::vector<const char*>& list) {
    if (list.empty() || list.back() != nullptr) list.push_back(nullptr);
    return list.data();
  }
  DescriptorBuilder& add_key(const char* key, zhost_config_type type, const std::string& default_literal,
                             const char* doc) {
    zhost_config_key spec{};
    spec.struct_size = sizeof(zhost_config_key);
    spec.key = keep(key);
    spec.type = type;
    spec.default_value = keep(default_literal);
    spec.doc = keep(doc);
    keys_.push_back(spec);
    return *this;
  }
  DescriptorBuilder& range(double min, double max) {
    keys_.back().min_value = min;
    keys_.back().max_value = max;
    keys_.back().has_range = 1;
    return *this;
  }

  zhost_plugin_descriptor descriptor_{};
  std::deque<std::string> strings_;  // deque: c_str() pointers stay valid as it grows
  std::vector<const char*> provides_, requires_, conflicts_, reads_;
  std::vector<zhost_config_key> keys_;
  std::deque<std::vector<const char*>> choice_lists_;
  std::vector<std::pair<size_t, size_t>> pending_choices_;
};

// Answers the host's negotiation for ABI major 1. `min_host_minor` is the oldest host minor whose
// features this plugin uses (defaults to the minor it was built with: always safe).
inline zhost_status* negotiate_v1(zhost_negotiation* io, const zhost_plugin_descriptor* descriptor,
                                  const zhost_plugin_api* api, uint32_t min_host_minor = ZHOST_ABI_MINOR) {
  if (io == nullptr || io->struct_size < ZHOST_NEGOTIATION_MIN_SIZE) return nullptr;  // cannot even answer
  negotiated_host() = io->host;
  io->plugin_abi_minor = ZHOST_ABI_MINOR;
  io->plugin_min_host_minor = min_host_minor;
  io->descriptor = descriptor;
  io->api = api;
  return nullptr;
}

// A plugin's check of the job's config (zhost_plugin_api.check_config), handed to a C++ function
// `void check(const ConfigCheck&)` that throws to refuse (docs/abi.md "Config checks"). No instance exists.
class ConfigCheck {
 public:
  explicit ConfigCheck(zhost_config_check_args* args) : args_(args), host_(args->host, args->ctx) {}
  const Host& host() const { return host_; }  // config lookups and log lines; no buffers
  // Whether the job gives this plugin `role` at start (zhost_config_check_args.tier_roles).
  bool serves(zhost_tier_role role) const { return (args_->tier_roles >> role) & 1u; }
  uint32_t tier_roles() const { return args_->tier_roles; }
  std::string chosen_for() const { return args_->chosen_for ? args_->chosen_for : ""; }
  const zhost_config_check_args& args() const { return *args_; }
  // Refuses the config: one config error line, `message`, at `key` (a string literal; nullptr: at the
  // setting that chose the plugin).
  [[noreturn]] void refuse(const char* key, const std::string& message) const {
    args_->key = key;
    throw PluginError(ZHOST_ERR_CONFIG, message);
  }

 private:
  zhost_config_check_args* args_;
  Host host_;
};

// The check_config entry that runs `Check` under guard().
template <void (*Check)(const ConfigCheck&)>
zhost_status* check_config_entry(zhost_config_check_args* args) {
  return guard(args->host, [&] { Check(ConfigCheck(args)); });
}

// create/destroy functions that make a `T` the instance: T(const Host&) is its constructor.
template <typename T>
struct InstanceOf {
  static zhost_status* create(zhost_plugin_create_args* args) {
    return guard(args->host, [&] {
      args->instance = reinterpret_cast<zhost_plugin_instance*>(new T(Host(args->host, args->ctx, args->tier_role)));
    });
  }
  static void destroy(zhost_plugin_instance* instance) { delete reinterpret_cast<T*>(instance); }
  static T& self(zhost_plugin_instance* instance) { return *reinterpret_cast<T*>(instance); }
};

// The lifecycle table of a plugin whose instance is a T, without its capability tables: partition_api,
// tier_api and collective_api add their kind's. `check` is its config check (ConfigCheck), or nullptr.
template <typename T>
constexpr zhost_plugin_api lifecycle_api(zhost_status* (*check)(zhost_config_check_args*)) {
  zhost_plugin_api api{};
  api.struct_size = sizeof(zhost_plugin_api);
  api.check_config = check;
  api.create = InstanceOf<T>::create;
  api.destroy = InstanceOf<T>::destroy;
  return api;
}

}  // namespace zhost::sdk

// Defines the exported entry for ABI major 1. `describe` is an expression yielding the descriptor
// pointer (evaluated once, on first negotiation), `api` a pointer to the plugin's static lifecycle table.
#define ZHOST_PLUGIN_ENTRY(describe, api)                                        \
  extern "C" ZHOST_EXPORT zhost_status* zhost_plugin_v1(zhost_negotiation* io) { \
    static const zhost_plugin_descriptor* zhost_descriptor_ = (describe);        \
    return ::zhost::sdk::negotiate_v1(io, zhost_descriptor_, (api));             \
  }
