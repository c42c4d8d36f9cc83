// plugins/quant_zeropp/node_groups.cpp: see node_groups.hpp.
#include "plugins/quant_zeropp/node_groups.hpp"

#include <string>

namespace zhost::zeropp {
namespace {

zhost_group* new_group(const sdk::Host& host, const std::vector<int>& ranks) {
  std::vector<int32_t> members(ranks.begin(), ranks.end());
  return host.new_group(members.data(), members.size());
}

}  // namespace

void NodeGroups::ensure() {
  if (made_) return;
  const sdk::Topology topology = sdk::topology(host_);
  num_nodes_ = topology.num_nodes;
  ranks_.clear();
  std::string sizes;
  for (int m = 0; m < num_nodes_; ++m) {
    ranks_.push_back(topology.ranks_on(m));
    sizes += (m ? ", " : "") + std::to_string(ranks_.back().size());
  }
  ranks_per_node_ = static_cast<int>(ranks_.front().size());
  for (const auto& node : ranks_)
    if (static_cast<int>(node.size()) != ranks_per_node_)
      throw sdk::PluginError(ZHOST_ERR_UNSUPPORTED,
                             "quant_zeropp: qgZ needs the same number of ranks on every node; this job's nodes hold " +
                                 sizes +
                                 " ranks; launch the same number per node or set "
                                 "zero.zero_quantized_gradients = false");
  const std::vector<int>& mine = ranks_[static_cast<size_t>(topology.node)];
  const int me = host_.group_info().rank;
  while (mine[static_cast<size_t>(local_)] != me) ++local_;
  if (num_nodes_ > 1) {
    if (ranks_per_node_ > 1) node_group_ = new_group(host_, mine);
    std::vector<int> same_index;
    for (const auto& node : ranks_) same_index.push_back(node[static_cast<size_t>(local_)]);
    index_group_ = new_group(host_, same_index);
  }
  made_ = true;
}

}  // namespace zhost::zeropp
