// zhost/cpp/offload.hpp: an offload tier's tables (zhost/storage.h, zhost/optimizer.h) for a C++ class, so that a
// tier writes methods instead of tables of C callbacks, and a client for calling another tier's storage.
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
//     void optimizer_step_range(const zhost_tier_step_args& args, int64_t offset);  // offset = args.offset
//     void optimizer_drop(uint64_t key);
// (and, for checkpoints, optimizer_read_state / optimizer_write_state: TierDefaults' refuse; with
// ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE, for hot swap, optimizer_move_storage: TierDefaults' refuses; a tier
// that sets kMovesGradients = true implements bool optimizer_grad_done(key, offset, numel) and
// optimizer_grad_zero(key), docs/abi.md "Gradients in storage")
// and gets the optimizer table; a tier with ZHOST_PLUGIN_FLAG_TIER_STORES gets the storage table (store, load,
// drop, export/import), and a tier without it need not define those. Every entry runs the method inside
// guard(), so exceptions become statuses. Asynchronous tiers override wait_event/test_event (and
// order_compute_after); TierDefaults' versions serve tiers whose events are always NULL.
#ifndef ZHOST_CPP_OFFLOAD_HPP
#define ZHOST_CPP_OFFLOAD_HPP

#include <string>

#include "zhost/cpp/plugin.hpp"
#include "zhost/optimizer.h"
#include "zhost/storage.h"

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
  // Computing tiers whose groups can be checkpointed override these.
  void optimizer_read_state(const zhost_tier_state_args&) {
    throw PluginError(ZHOST_ERR_UNSUPPORTED, "this tier cannot hand out its optimizer states for a checkpoint");
  }
  void optimizer_write_state(const zhost_tier_state_args&) {
    throw PluginError(ZHOST_ERR_UNSUPPORTED, "this tier cannot take optimizer states from a checkpoint");
  }
  // Computing tiers that move finished gradients out of host memory set this and implement
  // optimizer_grad_done and optimizer_grad_zero; the table has NULL there otherwise.
  static constexpr bool kMovesGradients = false;
  // Computing tiers with ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE whose storage can be swapped override this.
  void optimizer_move_storage(zhost_tier_storage_move&) {
    throw PluginError(ZHOST_ERR_UNSUPPORTED, "this tier cannot move its optimizer states to another storage");
  }
};

template <typename T>
struct StorageTableOf {
  static T& self(zhost_plugin_instance* instance) { return InstanceOf<T>::self(instance); }

  static zhost_status* store(zhost_plugin_instance* s, zhost_tier_io_args* a) {
    return guard([&] { a->event = self(s).store(a->key, *a->data); });
  }
  static zhost_status* load(zhost_plugin_instance* s, zhost_tier_io_args* a) {
    return guard([&] { a->event = self(s).load(a->key, *a->data); });
  }
  static zhost_status* wait(zhost_plugin_instance* s, zhost_tier_event_args* a) {
    return guard([&] { self(s).wait_event(a->event); });
  }
  static zhost_status* test(zhost_plugin_instance* s, zhost_tier_event_args* a) {
    a->done = 0;
    return guard([&] { a->done = self(s).test_event(a->event) ? 1 : 0; });
  }
  static zhost_status* order_compute_after(zhost_plugin_instance* s, zhost_tier_event_args* a) {
    return guard([&] { self(s).order_compute_after(a->event); });
  }
  static zhost_status* drop(zhost_plugin_instance* s, zhost_tier_key_args* a) {
    return guard([&] { self(s).drop(a->key); });
  }
  static zhost_status* export_state(zhost_plugin_instance* s, zhost_tier_stream_args* a) {
    return guard([&] { self(s).export_state(a->write, a->user); });
  }
  static zhost_status* import_state(zhost_plugin_instance* s, zhost_tier_stream_args* a) {
    return guard([&] { self(s).import_state(a->read, a->user); });
  }
  static zhost_status* memory(zhost_plugin_instance* s, zhost_tier_memory* out) {
    return guard([&] { self(s).memory(*out); });
  }

  static constexpr zhost_storage_api table = {
      sizeof(zhost_storage_api), nullptr, store,        load,         wait,   test,
      order_compute_after,       drop,    export_state, import_state, memory,
  };
};

template <typename T>
struct OptimizerTableOf {
  static constexpr bool kUsesStorage = (T::kTierFlags & ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE) != 0;
  static T& self(zhost_plugin_instance* instance) { return InstanceOf<T>::self(instance); }

  static zhost_status* setup(zhost_plugin_instance* s, const zhost_tier_optimizer_setup* a) {
    return guard([&] { self(s).optimizer_setup(*a); });
  }
  static zhost_status* grad(zhost_plugin_instance* s, zhost_tier_grad_args* a) {
    return guard([&] { self(s).optimizer_grad(a->key, a->grad); });
  }
  static zhost_status* step(zhost_plugin_instance* s, const zhost_tier_step_args* a) {
    return guard([&] { self(s).optimizer_step(*a); });
  }
  static zhost_status* step_range(zhost_plugin_instance* s, const zhost_tier_step_args* a) {
    return guard([&] { self(s).optimizer_step_range(*a, a->offset); });
  }
  static zhost_status* drop(zhost_plugin_instance* s, zhost_tier_key_args* a) {
    return guard([&] { self(s).optimizer_drop(a->key); });
  }
  static zhost_status* read_state(zhost_plugin_instance* s, const zhost_tier_state_args* a) {
    return guard([&] { self(s).optimizer_read_state(*a); });
  }
  static zhost_status* write_state(zhost_plugin_instance* s, const zhost_tier_state_args* a) {
    return guard([&] { self(s).optimizer_write_state(*a); });
  }
  static zhost_status* move_storage(zhost_plugin_instance* s, zhost_tier_storage_move* a) {
    return guard([&] {
      if constexpr (kUsesStorage) self(s).optimizer_move_storage(*a);
    });
  }
  static zhost_status* grad_done(zhost_plugin_instance* s, zhost_tier_grad_done_args* a) {
    a->moved = 0;
    return guard([&] {
      if constexpr (T::kMovesGradients) a->moved = self(s).optimizer_grad_done(a->key, a->offset, a->numel) ? 1 : 0;
    });
  }
  static zhost_status* grad_zero(zhost_plugin_instance* s, zhost_tier_key_args* a) {
    return guard([&] {
      if constexpr (T::kMovesGradients) self(s).optimizer_grad_zero(a->key);
    });
  }
  static zhost_status* memory(zhost_plugin_instance* s, zhost_tier_memory* out) {
    return guard([&] { self(s).memory(*out); });
  }

  static constexpr zhost_optimizer_tier_api table = {
      sizeof(zhost_optimizer_tier_api),
      nullptr,
      setup,
      grad,
      step,
      step_range,
      drop,
      read_state,
      write_state,
      kUsesStorage ? move_storage : nullptr,
      T::kMovesGradients ? grad_done : nullptr,
      T::kMovesGradients ? grad_zero : nullptr,
      memory,
  };
};

// The lifecycle table of a tier plugin whose instance is a T (see the top of this file): the storage table
// when T::kTierFlags stores, the optimizer table when it computes; `check` is its config check (ConfigCheck),
// or nullptr.
template <typename T>
constexpr zhost_plugin_api tier_api(zhost_status* (*check)(zhost_config_check_args*) = nullptr) {
  zhost_plugin_api api = lifecycle_api<T>(check);
  if constexpr ((T::kTierFlags & ZHOST_PLUGIN_FLAG_TIER_STORES) != 0) api.storage = &StorageTableOf<T>::table;
  if constexpr ((T::kTierFlags & ZHOST_PLUGIN_FLAG_TIER_COMPUTES) != 0) api.optimizer = &OptimizerTableOf<T>::table;
  return api;
}

// Another tier as host services tier_for() hands it over (e.g. the storage tier of a computing tier), with
// throwing calls. Copyable; it does not own the tier, whose instance outlives the caller (docs/abi.md "Tier
// lifetimes").
class TierClient {
 public:
  TierClient() = default;
  // The tier serving `role`, or an inactive client when the config names none.
  static TierClient find(const Host& host, zhost_tier_role role) {
    TierClient client;
    client.host_ = host.services();
    client.ref_.struct_size = sizeof(client.ref_);
    client.ref_.role = role;
    host.check(host.services()->tier_for(host.context(), &client.ref_));
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
  bool stores() const { return ref_.instance != nullptr && ref_.storage != nullptr; }
  const char* name() const { return ref_.name ? ref_.name : ""; }
  const zhost_tier_ref& ref() const { return ref_; }

  // store/load, waiting for the event: the data may be reused or read when they return.
  void store(uint64_t key, DLTensor& data) const { io(ref_.storage->store, key, data); }
  void load(uint64_t key, DLTensor& data) const { io(ref_.storage->load, key, data); }
  void drop(uint64_t key) const {
    zhost_tier_key_args args{};
    args.struct_size = sizeof(args);
    args.key = key;
    check(ref_.storage->drop(ref_.instance, &args));
  }
  void wait(zhost_tier_event* event) const {
    zhost_tier_event_args args{};
    args.struct_size = sizeof(args);
    args.event = event;
    check(ref_.storage->wait(ref_.instance, &args));
  }
  zhost_tier_memory memory() const {
    zhost_tier_memory out{};
    out.struct_size = sizeof(out);
    if (ref_.storage) check(ref_.storage->memory(ref_.instance, &out));
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
    if (args.event) wait(args.event);
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
