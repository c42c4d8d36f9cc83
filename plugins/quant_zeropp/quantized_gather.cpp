// plugins/quant_zeropp/quantized_gather.cpp: qwZ (see quantized_gather.hpp).
#include "plugins/quant_zeropp/quantized_gather.hpp"

#include "plugins/quant_zeropp/packed_chunks.hpp"
#include "plugins/quant_zeropp/wire.hpp"

namespace zhost::zeropp {

void QuantizedGather::serve(zhost_collective_args& args) const {
  const Dtype type = *quantizable(args.send->dtype);
  const int world = wire::world_size(host_, args.group);
  const int64_t n = wire::numel(*args.send);  // my shard
  wire::require(wire::numel(*args.recv) == n * world, "an all-gather's recv must hold world_size x send elements");
  const ChunkPlan plan = plan_chunks(args, world, n, format_);  // rank r's shard: chunk r
  const int rank = wire::rank(host_, args.group);
  const size_t element = static_cast<size_t>(args.send->dtype.bits / 8);
  const DeviceOps& ops = DeviceOps::of(args.send->device);

  ByteBuffer mine(ops, plan.stride), all(ops, plan.stride * world);
  pack(ops, wire::data(*args.send), type, plan.chunks[rank], format_, mine.data(), plan.stride);
  wire::all_gather(host_, args, mine.view, all.view);
  auto* out = static_cast<uint8_t*>(wire::data(*args.recv));
  for (int r = 0; r < world; ++r)
    unpack(ops, all.data() + r * plan.stride, plan.chunks[r], format_, out + r * n * element, type);
}

}  // namespace zhost::zeropp
