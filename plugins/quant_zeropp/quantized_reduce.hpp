// plugins/quant_zeropp/quantized_reduce.hpp: qgZ, the gradient reduce-scatter as a hierarchical all-to-all of
// int4 (or int8) payloads.
//
// Note [qgZ's two hops]
// W ranks on N nodes of L ranks each; rank g holds W chunks of c elements, chunk j for rank j, and must
// receive the sum over ranks of its own chunk. Let R(m, k) be the k-th rank (in rank order) of node m, and
// l my index on my node.
//   1. Within the node: every rank packs (packed_chunks.hpp) the chunks of R(0, k), ..., R(N-1, k) for each
//      local index k and sends them to its node's rank k (all-to-all among the node's L ranks). Rank l
//      dequantizes what it received and adds it up in fp32, local ranks in order: the node's sums of the
//      chunks of R(m, l) for every node m.
//   2. Across nodes: it packs each node sum again and sends the one for R(m, l) to R(m, l) (all-to-all among
//      the N ranks of index l, one per node), dequantizes what it receives and adds it up in fp32, nodes in
//      order: the job's sum of its own chunk. AVG divides that by W; the result is rounded once to recv's type.
// Only step 2 crosses nodes, with c elements per remote node at 4 (int4) or 8 (int8) bits: per rank c/8 or
// c/4 bytes of an fp32 chunk against c x 4 for each remote rank with the plain reduce-scatter. On one node
// step 2 is skipped (the node sums are the result); with one rank per node step 1 sends nothing. Every
// contribution is quantized once per hop, its own included, so the result does not depend on which rank
// computes it, and the order of the sums is fixed: the same inputs give the same bits. With LoCo
// (error_feedback.hpp) each hop quantizes its values plus that hop's kept error, and keeps what it lost.
#pragma once

#include <vector>

#include "plugins/quant_zeropp/error_feedback.hpp"
#include "plugins/quant_zeropp/node_groups.hpp"
#include "zhost/collective.h"
#include "zhost/cpp/plugin.hpp"
#include "zhost/kit/zeropp_quant.hpp"

namespace zhost::zeropp {

class QuantizedReduce {
 public:
  // `feedback`: LoCo's kept errors, or NULL without LoCo; it outlives this.
  QuantizedReduce(const sdk::Host& host, BlockFormat format, NodeGroups& groups, ErrorFeedback* feedback)
      : host_(host), format_(format), groups_(groups), feedback_(feedback) {}
  // Serves an equal-split SUM or AVG reduce-scatter over the whole job in a quantizable type, send and recv on
  // one device (Note [ZeRO++ on the collective's device]).
  void serve(zhost_collective_args& args);

 private:
  const sdk::Host& host_;
  BlockFormat format_;
  NodeGroups& groups_;
  ErrorFeedback* feedback_;
};

}  // namespace zhost::zeropp
