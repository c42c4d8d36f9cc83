// plugins/quant_zeropp/node_groups.hpp: the sub-groups of qgZ's two hops (Note [qgZ's two hops]): the ranks
// of this rank's node, and the ranks with this rank's local index on every node. Made on first use, by
// every rank at the same collective, so in the same order everywhere.
#pragma once

#include <vector>

#include "zhost/cpp/collective.hpp"

namespace zhost::zeropp {

class NodeGroups {
 public:
  explicit NodeGroups(const sdk::Host& host) : host_(host) {}
  // Makes the groups on the first call. Throws PluginError(ZHOST_ERR_UNSUPPORTED) when the nodes hold
  // different numbers of ranks.
  void ensure();
  int num_nodes() const { return num_nodes_; }
  int ranks_per_node() const { return ranks_per_node_; }
  int local_index() const { return local_; }  // l: this rank's index on its node
  // R(m, k): the k-th rank of node m.
  int rank_at(int node, int local) const { return ranks_[static_cast<size_t>(node)][static_cast<size_t>(local)]; }
  // NULL when the node is the whole job (one node); not used with one rank per node.
  zhost_group* node_group() const { return node_group_; }
  zhost_group* index_group() const { return index_group_; }  // NULL: one node (no second hop)

 private:
  const sdk::Host& host_;
  bool made_ = false;
  int num_nodes_ = 1, ranks_per_node_ = 1, local_ = 0;
  std::vector<std::vector<int>> ranks_;  // by node, in rank order
  zhost_group* node_group_ = nullptr;
  zhost_group* index_group_ = nullptr;
};

}  // namespace zhost::zeropp
