// zhost/cpp/offload.hpp: the offload table (zhost/offload.h) for a C++ class, so that a tier writes
// methods instead of a positional table of C callbacks, and a client for calling another tier.
//
//   class MyTier : public zhost::sdk::TierDefaults {  // synchronous events, no memory report
//    public:
//     static constexpr uint64_t kTierFlags = ZHOST_PLUGIN_FLAG_TIER_STORES;  // the roles it declares
//     explicit MyTier(const zhost::sdk::Host& host);
//     zhost_tier_event* store(uint64_t key, const DLTensor& data);  // NULL: done already
//     zhost_tier_event* load(uint64_t key, DLTensor& data);
//     void drop(uint64_t key);
//     void export_state(zhost_state_writer write, void* user) const;
//     void import_state(zhost_state_reader read, void* user);
//   };
//   const zhost_plugin_api kApi = zhost::sdk::tier_api<MyTier>();
//   ... DescriptorBuilder(...).flags(ZHOST_PLUGIN_FLAG_HOT_SWAPPABLE | MyTier::kTierFlags) ...
//
// A tier whose kTierFlags has ZHOST_PLUGIN_FLAG_TIER_COMPUTES also implements
//     void optimizer_setup(const zhost_tier_optimizer_setup& setup);
//     void optimizer_grad(uint64_t key, DLTensor& out);
//     void optimizer_step(const zhost_tier_step_args& args);
//     void optimizer_step_range(const zhost_tier_step_args& args, int64_t offset);  // offset resolved here
//     void optimizer_drop(uint64_t key);
// (and, for checkpoints, optimizer_read_state / optimizer_write_state: TierDefaults' refuse; with
// ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE, for hot swap, optimizer_move_storage: TierDefaults' refuses; a tier
// that sets kMovesGradients = true implements bool optimizer_grad_done(key, offset, numel) and
// optimizer_grad_zero(key), docs/abi.md "Gradients in storage")
// and gets their table entries; a storing-only tier gets NULL there, as the contract says. Every entry
// runs the method inside guard(), so exceptions become statuses. Asynchronous tiers override
// wait_event/test_event (and order_compute_after); TierDefaults' versions serve tiers whose events are
// always NULL.
#ifndef ZHOST_CPP_OFFLOAD_HPP
#define ZHOST_CPP_OFFLOAD_HPP

#include <string>

#include "zhost/cpp/plugin.hpp"
#include "zhost/offload.h"

namespace zhost::sdk {

// Defaults for a synchronous tier: no events ever pending, no memory report, nothing to order.
struct TierDefaults {
  void wait_event(zhost_tier_event* event) {
    if (event) throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "this tier never hands out events; the event is not its");
  }
  bool test_event(zhost_tier_event* event) {
    wait_event(event);
    return true;
  }
  void order_compute_after(zhost_tier_event* event) { wait_event(event); }
  void memory(zhost_tier_memory&) const {}
  // Computing tiers whose groups can be checkpointed override these (0.5).
  void optimizer_read_state(const zhost_tier_state_args&) {
    throw PluginError(ZHOST_ERR_UNSUPPORTED, "this tier cannot hand out its optimizer states for a checkpoint");
  }
  void optimizer_write_state(const zhost_tier_state_args&) {
    throw PluginError(ZHOST_ERR_UNSUPPORTED, "this tier cannot take optimizer states from a checkpoint");
  }
  // Computing tiers that move finished gradients out of host memory set this and implement
  // optimizer_grad_done and optimizer_grad_zero (0.9); the table has NULL there otherwise.
  static constexpr bool kMovesGradients = false;
  // Computing tiers with ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE whose storage can be swapped override this (0.7).
  void optimizer_move_storage(zhost_tier_storage_move&) {
    throw PluginError(ZHOST_ERR_UNSUPPORTED, "this tier cannot move its optimizer states to another storage");
  }
};

// The offset of a range step: the 0.4 field when the caller's struct has it, else the 0.3 argument.
inline int64_t range_step_offset(const zhost_tier_step_args& args, int64_t argument) {
  return args.struct_size >= ZHOST_STRUCT_SIZE(zhost_tier_step_args, offset) ? args.offset : argument;
}

template <typename T>
struct OffloadTableOf {
  static constexpr bool kComputes = (T::kTierFlags & ZHOST_PLUGIN_FLAG_TIER_COMPUTES) != 0;
  static constexpr bool kUsesStorage = kComputes && (T::kTierFlags & ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE) != 0;
  static constexpr bool kMovesGradients = kComputes && T::kMovesGradients;
  static T& self(zhost_plugin_instance* instance) { return InstanceOf<T>::self(instance); }

  static zhost_status* store(zhost_plugin_instance* s, zhost_tier_io_args* a) {
    return guard([&] { a->event = self(s).store(a->key, *a->data); });
  }
  static zhost_status* load(zhost_plugin_instance* s, zhost_tier_io_args* a) {
    return guard([&] { a->event = self(s).load(a->key, *a->data); });
  }
  static zhost_status* wait_event(zhost_plugin_instance* s, zhost_tier_event* e) {
    return guard([&] { self(s).wait_event(e); });
  }
  static zhost_status* test_event(zhost_plugin_instance* s, zhost_tier_event* e, int32_t* done) {
    *done = 0;
    return guard([&] { *done = self(s).test_event(e) ? 1 : 0; });
  }
  static zhost_status* drop(zhost_plugin_instance* s, uint64_t key) {
    return guard([&] { self(s).drop(key); });
  }
  static zhost_status* export_state(zhost_plugin_instance* s, zhost_state_writer w, void* u) {
    return guard([&] { self(s).export_state(w, u); });
  }
  static zhost_status* import_state(zhost_plugin_instance* s, zhost_state_reader r, void* u) {
    return guard([&] { self(s).import_state(r, u); });
  }
  static zhost_status* memory(zhost_plugin_instance* s, zhost_tier_memory* out) {
    return guard([&] { self(s).memory(*out); });
  }
  static zhost_status* order_compute_after(zhost_plugin_instance* s, zhost_tier_event* e) {
    return guard([&] { self(s).order_compute_after(e); });
  }
  // Computing tiers only (the table holds NULL otherwise, so these bodies are never reached then).
  static zhost_status* optimizer_setup(zhost_plugin_instance* s, const zhost_tier_optimizer_setup* a) {
    return guard([&] {
      if constexpr (kComputes) self(s).optimizer_setup(*a);
    });
  }
  static zhost_status* optimizer_grad(zhost_plugin_instance* s, uint64_t key, DLTensor* out) {
    return guard([&] {
      if constexpr (kComputes) self(s).optimizer_grad(key, *out);
    });
  }
  static zhost_status* optimizer_step(zhost_plugin_instance* s, const zhost_tier_step_args* a) {
    return guard([&] {
      if constexpr (kComputes) self(s).optimizer_step(*a);
    });
  }
  static zhost_status* optimizer_step_range(zhost_plugin_instance* s, const zhost_tier_step_args* a, int64_t offset) {
    return guard([&] {
      if constexpr (kComputes) self(s).optimizer_step_range(*a, range_step_offset(*a, offset));
    });
  }
  static zhost_status* optimizer_drop(zhost_plugin_instance* s, uint64_t key) {
    return guard([&] {
      if constexpr (kComputes) self(s).optimizer_drop(key);
    });
  }
  static zhost_status* optimizer_read_state(zhost_plugin_instance* s, const zhost_tier_state_args* a) {
    return guard([&] {
      if constexpr (kComputes) self(s).optimizer_read_state(*a);
    });
  }
  static zhost_status* optimizer_write_state(zhost_plugin_instance* s, const zhost_tier_state_args* a) {
    return guard([&] {
      if constexpr (kComputes) self(s).optimizer_write_state(*a);
    });
  }

  static zhost_status* optimizer_move_storage(zhost_plugin_instance* s, zhost_tier_storage_move* a) {
    return guard([&] {
      if constexpr (kUsesStorage) self(s).optimizer_move_storage(*a);
    });
  }

  static zhost_status* optimizer_grad_done(zhost_plugin_instance* s, uint64_t key, int64_t offset, int64_t numel,
                                           int32_t* moved) {
    *moved = 0;
    return guard([&] {
      if constexpr (kMovesGradients) *moved = self(s).optimizer_grad_done(key, offset, numel) ? 1 : 0;
    });
  }
  static zhost_status* optimizer_grad_zero(zhost_plugin_instance* s, uint64_t key) {
    return guard([&] {
      if constexpr (kMovesGradients) self(s).optimizer_grad_zero(key);
    });
  }

  static constexpr zhost_offload_api table = {
      sizeof(zhost_offload_api),
      nullptr,
      store,
      load,
      wait_event,
      drop,
      export_state,
      import_state,
      kComputes ? optimizer_setup : nullptr,
      kComputes ? optimizer_grad : nullptr,
      kComputes ? optimizer_step : nullptr,
      memory,
      kComputes ? optimizer_step_range : nullptr,
      order_compute_after,
      test_event,
      kComputes ? optimizer_drop : nullptr,
      kComputes ? optimizer_read_state : nullptr,
      kComputes ? optimizer_write_state : nullptr,
      kUsesStorage ? optimizer_move_storage : nullptr,
      kMovesGradients ? optimizer_grad_done : nullptr,
      kMovesGradients ? optimizer_grad_zero : nullptr,
  };
};

// The lifecycle table of a tier plugin whose instance is a T (see the top of this file); `check` is its
// config check (ConfigCheck, ABI 0.10), or nullptr.
template <typename T>
constexpr zhost_plugin_api tier_api(zhost_status* (*check)(zhost_config_check_args*) = nullptr) {
  return zhost_plugin_api{
      sizeof(zhost_plugin_api),  nullptr, nullptr, InstanceOf<T>::create, InstanceOf<T>::destroy, nullptr,
      &OffloadTableOf<T>::table, nullptr, check};
}

// Another tier as host services tier_for() hands it over (e.g. the storage tier of a computing tier), with
// throwing calls. Copyable; it does not own the tier, whose instance outlives the caller (docs/abi.md "Tier
// lifetimes").
class TierClient {
 public:
  TierClient() = default;
  // The tier serving `role`, or an inactive client when the config names none (or the host is older).
  static TierClient find(const Host& host, zhost_tier_role role) {
    TierClient client;
    client.host_ = host.services();
    const zhost_host_services* services = host.services();
    client.ref_.struct_size = sizeof(client.ref_);
    if (ZHOST_HAS_FIELD(services, zhost_host_services, tier_for) && services->tier_for)
      host.check(services->tier_for(host.context(), role, &client.ref_));
    return client;
  }
  // A tier handed over directly (e.g. the new storage of zhost_tier_storage_move); the ref is copied.
  static TierClient of(const Host& host, const zhost_tier_ref& ref) {
    TierClient client;
    client.host_ = host.services();
    client.ref_ = ref;
    client.ref_.struct_size = sizeof(client.ref_);
    return client;
  }
  bool active() const { return ref_.instance != nullptr; }
  const char* name() const { return ref_.name ? ref_.name : ""; }
  const zhost_tier_ref& ref() const { return ref_; }

  // store/load, waiting for the event: the data may be reused or read when they return.
  void store(uint64_t key, DLTensor& data) const { io(ref_.api->store, key, data); }
  void load(uint64_t key, DLTensor& data) const { io(ref_.api->load, key, data); }
  void drop(uint64_t key) const { check(ref_.api->drop(ref_.instance, key)); }
  zhost_tier_memory memory() const {
    zhost_tier_memory out{};
    out.struct_size = sizeof(out);
    if (ZHOST_HAS_FIELD(ref_.api, zhost_offload_api, memory) && ref_.api->memory)
      check(ref_.api->memory(ref_.instance, &out));
    return out;
  }

 private:
  using IoFn = zhost_status* (*)(zhost_plugin_instance*, zhost_tier_io_args*);
  void io(IoFn fn, uint64_t key, DLTensor& data) const {
    zhost_tier_io_args args{};
    args.struct_size = sizeof(args);
    args.key = key;
    args.data = &data;
    check(fn(ref_.instance, &args));
    if (args.event) check(ref_.api->wait_event(ref_.instance, args.event));
  }
  void check(zhost_status* status) const {
    Status owned(host_, status);
    if (!owned.ok()) throw PluginError(owned.code(), std::string("tier '") + name() + "': " + owned.message());
  }

  const zhost_host_services* host_ = nullptr;
  zhost_tier_ref ref_{};
};

}  // namespace zhost::sdk

#endif  // ZHOST_CPP_OFFLOAD_HPP
