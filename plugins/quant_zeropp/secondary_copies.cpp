// plugins/quant_zeropp/secondary_copies.cpp: hpZ (see secondary_copies.hpp).
#include "plugins/quant_zeropp/secondary_copies.hpp"

#include <string>

#include "plugins/quant_zeropp/packed_chunks.hpp"
#include "plugins/quant_zeropp/wire.hpp"

namespace zhost::zeropp {

void SecondaryCopies::check_layout() {
  if (checked_) return;
  groups_.ensure();
  if (partition_size_ != groups_.ranks_per_node())
    throw sdk::PluginError(ZHOST_ERR_UNSUPPORTED,
                           "quant_zeropp: zero.zero_hpz_partition_size = " + std::to_string(partition_size_) +
                               ", but zhost's hpZ keeps the secondary partition within a node and this job runs " +
                               std::to_string(groups_.ranks_per_node()) + " ranks per node; set it to " +
                               std::to_string(groups_.ranks_per_node()));
  checked_ = true;
}

void SecondaryCopies::keep(const zhost_collective_args& args) {
  check_layout();
  const int local_ranks = groups_.ranks_per_node();
  const int64_t total = wire::numel(*args.recv);
  wire::require(total % local_ranks == 0, "hpZ: a gathered block must split evenly over the node's ranks");
  const int64_t slice_bytes = total / local_ranks * (args.recv->dtype.bits / 8);
  const DeviceOps& ops = DeviceOps::of(args.recv->device);
  Copy& copy = copies_[args.block];
  if (!copy.slice || copy.slice->shape != slice_bytes || &copy.slice->ops() != &ops) {
    bytes_ -= copy.slice ? static_cast<uint64_t>(copy.slice->shape) : 0;
    copy.slice = std::make_unique<ByteBuffer>(ops, slice_bytes);
    bytes_ += static_cast<uint64_t>(slice_bytes);
  }
  copy.gathered_numel = total;
  ops.copy(copy.slice->data(),
           static_cast<const uint8_t*>(wire::data(*args.recv)) + groups_.local_index() * slice_bytes, slice_bytes);
}

bool SecondaryCopies::serve(zhost_collective_args& args) {
  auto found = copies_.find(args.block);
  const DeviceOps& ops = DeviceOps::of(args.recv->device);
  if (found == copies_.end() || found->second.gathered_numel != wire::numel(*args.recv) ||
      &found->second.slice->ops() != &ops)
    return false;
  ByteBuffer& slice = *found->second.slice;
  if (groups_.ranks_per_node() == 1) {
    ops.copy(wire::data(*args.recv), slice.data(), slice.shape);
    return true;
  }
  DLTensor recv = *args.recv;  // the same memory, as bytes
  int64_t recv_bytes = slice.shape * groups_.ranks_per_node();
  recv.dtype = {kDLUInt, 8, 1};
  recv.ndim = 1;
  recv.shape = &recv_bytes;
  recv.strides = nullptr;
  zhost_collective_args within = args;
  within.group = groups_.node_group();
  wire::all_gather(host_, within, slice.view, recv);
  return true;
}

}  // namespace zhost::zeropp
