// plugins/quant_zeropp/secondary_copies.hpp: hpZ, the secondary partition. After a block's parameters were
// gathered over the whole job (PARAM_GATHER: forward's gather, qwZ-quantized or not), each rank keeps the
// slice of them that is its share within its node; the block's later gathers in the same micro-batch
// (PARAM_REGATHER: backward's) are all-gathers of those slices among the node's ranks, so they never cross
// nodes. The copy holds what the first gather delivered, so forward and backward compute with the same
// values.
//
// Memory: every block's slice stays until its next PARAM_GATHER replaces it: the model's parameters / L per
// rank (L ranks per node), in their own type, on top of stage 3's shards (memory_bytes()).
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "plugins/quant_zeropp/node_groups.hpp"
#include "plugins/quant_zeropp/packed_chunks.hpp"
#include "zhost/collective.h"
#include "zhost/cpp/plugin.hpp"

namespace zhost::zeropp {

class SecondaryCopies {
 public:
  // `partition_size`: zero.zero_hpz_partition_size, which must equal the ranks per node.
  SecondaryCopies(const sdk::Host& host, NodeGroups& groups, int64_t partition_size)
      : host_(host), groups_(groups), partition_size_(partition_size) {}
  // Keeps this rank's slice of a block's gathered parameters (args.recv after the job-wide gather).
  void keep(const zhost_collective_args& args);
  // Serves a PARAM_REGATHER from the node's slices; false when no copy of that block and size is kept.
  bool serve(zhost_collective_args& args);
  uint64_t memory_bytes() const { return bytes_; }

 private:
  void check_layout();
  const sdk::Host& host_;
  NodeGroups& groups_;
  int64_t partition_size_;
  bool checked_ = false;
  struct Copy {
    std::unique_ptr<ByteBuffer> slice;  // this rank's share: numel(recv) / L elements of recv's type, as bytes
    int64_t gathered_numel = 0;         // numel(recv) of the gather it came from
  };
  std::map<int32_t, Copy> copies_;  // by block
  uint64_t bytes_ = 0;
};

}  // namespace zhost::zeropp
