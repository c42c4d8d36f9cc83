// zhost/cpp/partition.hpp: the partition table (zhost/partition.h) for a C++ class, so that a partition
// plugin writes methods instead of C callbacks. Each entry calls the method inside guard(), so exceptions
// become statuses.
//
//   class MyStage : public zhost::sdk::PartitionHooks {   // no-op defaults for hooks left out
//    public:
//     explicit MyStage(const zhost::sdk::Host& host);
//     void setup(const zhost_partition_setup& setup);
//     void grad_ready(uint32_t param_id, const DLTensor& grad);
//     void step(zhost_step_args& args);
//   };
//   const zhost_plugin_api kApi = zhost::sdk::partition_api<MyStage>();
#ifndef ZHOST_CPP_PARTITION_HPP
#define ZHOST_CPP_PARTITION_HPP

#include "zhost/cpp/plugin.hpp"
#include "zhost/partition.h"

namespace zhost::sdk {

// Hooks that do nothing, for a partition class to inherit the ones it does not need.
struct PartitionHooks {
  void begin_micro_batch(const zhost_micro_batch_args&) {}
  void pre_forward(int32_t) {}
  void post_forward(int32_t) {}
  void pre_backward(int32_t) {}
  void post_backward(int32_t) {}
  void backward_end() {}
  void memory(zhost_model_state_bytes&) const {}
  void gather_param(uint32_t, DLTensor&) {
    throw PluginError(ZHOST_ERR_UNSUPPORTED, "this partition plugin keeps whole parameters: nothing to gather");
  }
  // Checkpoints: a class that does not define these cannot save or resume.
  void save_state(const zhost_state_io&) {
    throw PluginError(ZHOST_ERR_UNSUPPORTED, "this partition plugin cannot save its state to a checkpoint");
  }
  void load_state(const zhost_state_io&) {
    throw PluginError(ZHOST_ERR_UNSUPPORTED, "this partition plugin cannot load its state from a checkpoint");
  }
  // Hot swap: a class that does not define it keeps its parameter storage for the whole job.
  void move_param_storage(zhost_tier_storage_move&) {
    throw PluginError(ZHOST_ERR_UNSUPPORTED, "this partition plugin cannot move its parameters to another storage");
  }
};

template <typename T>
struct PartitionTableOf {
  static T& self(zhost_plugin_instance* instance) { return InstanceOf<T>::self(instance); }

  static constexpr zhost_partition_api table = {
      sizeof(zhost_partition_api),
      nullptr,
      [](zhost_plugin_instance* s, const zhost_partition_setup* setup) {
        return guard([&] { self(s).setup(*setup); });
      },
      [](zhost_plugin_instance* s, const zhost_micro_batch_args* args) {
        return guard([&] { self(s).begin_micro_batch(*args); });
      },
      [](zhost_plugin_instance* s, const zhost_block_args* a) { return guard([&] { self(s).pre_forward(a->block); }); },
      [](zhost_plugin_instance* s, const zhost_block_args* a) {
        return guard([&] { self(s).post_forward(a->block); });
      },
      [](zhost_plugin_instance* s, const zhost_block_args* a) {
        return guard([&] { self(s).pre_backward(a->block); });
      },
      [](zhost_plugin_instance* s, const zhost_grad_ready_args* a) {
        return guard([&] { self(s).grad_ready(a->param_id, *a->grad); });
      },
      [](zhost_plugin_instance* s, const zhost_block_args* a) {
        return guard([&] { self(s).post_backward(a->block); });
      },
      [](zhost_plugin_instance* s, const zhost_backward_end_args*) { return guard([&] { self(s).backward_end(); }); },
      [](zhost_plugin_instance* s, zhost_step_args* args) { return guard([&] { self(s).step(*args); }); },
      [](zhost_plugin_instance* s, zhost_model_state_bytes* out) { return guard([&] { self(s).memory(*out); }); },
      [](zhost_plugin_instance* s, const zhost_gather_param_args* a) {
        return guard([&] { self(s).gather_param(a->param_id, *a->out); });
      },
      [](zhost_plugin_instance* s, const zhost_state_io* io) { return guard([&] { self(s).save_state(*io); }); },
      [](zhost_plugin_instance* s, const zhost_state_io* io) { return guard([&] { self(s).load_state(*io); }); },
      [](zhost_plugin_instance* s, zhost_tier_storage_move* args) {
        return guard([&] { self(s).move_param_storage(*args); });
      },
  };
};

// The lifecycle table of a partition plugin whose instance is a T; `check` is its config check, or nullptr.
template <typename T>
constexpr zhost_plugin_api partition_api(zhost_status* (*check)(zhost_config_check_args*) = nullptr) {
  zhost_plugin_api api = lifecycle_api<T>(check);
  api.partition = &PartitionTableOf<T>::table;
  return api;
}

}  // namespace zhost::sdk

#endif  // ZHOST_CPP_PARTITION_HPP
