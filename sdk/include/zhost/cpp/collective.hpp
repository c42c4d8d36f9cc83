// zhost/cpp/collective.hpp: the collective-transform table (zhost/collective.h) for a C++ class, and the
// job's node layout (zhost_topology) as a value. The rules a transform follows are Note [Collective
// transforms] in zhost/collective.h.
//
//   class MyTransform : public zhost::sdk::CollectiveHooks {   // memory(): holds nothing
//    public:
//     explicit MyTransform(const zhost::sdk::Host& host);
//     // true: served (args.recv holds the result); false: the host runs the collective unchanged.
//     bool interpose(zhost_collective_op op, zhost_collective_args& args);
//   };
//   const zhost_plugin_api kApi = zhost::sdk::collective_api<MyTransform>();
#ifndef ZHOST_CPP_COLLECTIVE_HPP
#define ZHOST_CPP_COLLECTIVE_HPP

#include <vector>

#include "zhost/collective.h"
#include "zhost/cpp/plugin.hpp"

namespace zhost::sdk {

// Defaults for a transform class to inherit: it keeps nothing between collectives.
struct CollectiveHooks {
  void memory(zhost_model_state_bytes&) const {}
};

template <typename T>
struct CollectiveTableOf {
  static constexpr zhost_collective_api table = {
      sizeof(zhost_collective_api), nullptr,
      [](zhost_plugin_instance* s, zhost_interpose_args* args) {
        args->handled = 0;
        return guard([&] { args->handled = InstanceOf<T>::self(s).interpose(args->op, *args->collective) ? 1 : 0; });
      },
      [](zhost_plugin_instance* s, zhost_model_state_bytes* out) {
        return guard([&] { InstanceOf<T>::self(s).memory(*out); });
      }};
};

// The lifecycle table of a transform plugin whose instance is a T; `check` is its config check, or nullptr.
template <typename T>
constexpr zhost_plugin_api collective_api(zhost_status* (*check)(zhost_config_check_args*) = nullptr) {
  zhost_plugin_api api = lifecycle_api<T>(check);
  api.collective = &CollectiveTableOf<T>::table;
  return api;
}

// Where the job's ranks run (zhost_topology), copied out of the host's answer.
struct Topology {
  int num_nodes = 1;
  int node = 0;                   // this rank's node
  std::vector<int> node_of_rank;  // by job-wide rank
  // The job-wide ranks on `node`, in rank order.
  std::vector<int> ranks_on(int node_index) const {
    std::vector<int> ranks;
    for (size_t r = 0; r < node_of_rank.size(); ++r)
      if (node_of_rank[r] == node_index) ranks.push_back(static_cast<int>(r));
    return ranks;
  }
};

// The job's topology.
inline Topology topology(const Host& host) {
  const zhost_collectives& c = host.collectives();
  zhost_topology out{};
  out.struct_size = sizeof(out);
  host.check(c.topology(host.context(), &out));
  Topology t;
  t.num_nodes = out.num_nodes;
  t.node = out.node;
  const int world = host.group_info().size;
  t.node_of_rank.assign(out.node_of_rank, out.node_of_rank + world);
  return t;
}

}  // namespace zhost::sdk

#endif  // ZHOST_CPP_COLLECTIVE_HPP
