// plugins/quant_zeropp/quantized_reduce.cpp: qgZ (Note [qgZ's two hops] in quantized_reduce.hpp).
#include "plugins/quant_zeropp/quantized_reduce.hpp"

#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>

#include "plugins/quant_zeropp/packed_chunks.hpp"
#include "plugins/quant_zeropp/wire.hpp"
#include "zhost/kit/dlpack_views.hpp"

namespace zhost::zeropp {
namespace {

// pack(), or pack_compensated() with the error of these elements when LoCo keeps one (error != NULL).
void pack_chunk(const DeviceOps& ops, const void* src, Dtype type, const ChunkPieces& pieces, const BlockFormat& format,
                const ErrorFeedback* feedback, float* error, uint8_t* out, int64_t stride) {
  if (error)
    pack_compensated(ops, src, type, pieces, format, feedback->beta(), error, out, stride);
  else
    pack(ops, src, type, pieces, format, out, stride);
}

}  // namespace

void QuantizedReduce::serve(zhost_collective_args& args) {
  groups_.ensure();
  const Dtype type = *quantizable(args.send->dtype);
  const int nodes = groups_.num_nodes(), local_ranks = groups_.ranks_per_node(), l = groups_.local_index();
  const int world = nodes * local_ranks;
  const int64_t c = wire::numel(*args.recv);  // my chunk
  wire::require(wire::numel(*args.send) == c * world, "a reduce-scatter's send must hold world_size x recv elements");
  const ChunkPlan plan = plan_chunks(args, world, c, format_);  // chunk r: the elements rank r receives
  const int64_t stride = plan.stride;
  auto chunk_of = [&](int rank) -> const ChunkPieces& { return plan.chunks[static_cast<size_t>(rank)]; };
  const size_t element = static_cast<size_t>(args.send->dtype.bits / 8);
  const auto* send = static_cast<const uint8_t*>(wire::data(*args.send));
  const DeviceOps& ops = DeviceOps::of(args.send->device);
  // Hop 1, within the node: piece k = the chunks of R(0, k) .. R(N-1, k), for local rank k.
  const int64_t piece = stride * nodes;
  ByteBuffer out1(ops, piece * local_ranks), in1(ops, piece * local_ranks);
  float* error1 = feedback_ ? feedback_->load(ops, args.block, 1, c * world) : nullptr;  // by job-wide rank
  for (int k = 0; k < local_ranks; ++k)
    for (int m = 0; m < nodes; ++m) {
      const int r = groups_.rank_at(m, k);
      pack_chunk(ops, send + static_cast<size_t>(r) * c * element, type, chunk_of(r), format_, feedback_,
                 error1 ? error1 + static_cast<int64_t>(r) * c : nullptr, out1.data() + k * piece + m * stride, stride);
    }
  if (error1) feedback_->store();
  if (local_ranks > 1)
    wire::all_to_all(host_, args, groups_.node_group(), out1.view, in1.view);
  else
    ops.copy(in1.data(), out1.data(), piece);
  at::Tensor node_sums =
      at::zeros({nodes, c}, ops.options().dtype(at::kFloat));  // [N, c]: this node's sums for R(m, l)
  float* sums = node_sums.data_ptr<float>();
  for (int k = 0; k < local_ranks; ++k)
    for (int m = 0; m < nodes; ++m)
      unpack_add(ops, in1.data() + k * piece + m * stride, chunk_of(groups_.rank_at(m, l)), format_, sums + m * c);

  // Hop 2, across nodes: node m's sum for R(m', l) goes to R(m', l).
  at::Tensor total = node_sums[0];
  if (nodes > 1) {
    ByteBuffer out2(ops, stride * nodes), in2(ops, stride * nodes);
    float* error2 = feedback_ ? feedback_->load(ops, args.block, 2, c * nodes) : nullptr;  // by node
    for (int m = 0; m < nodes; ++m)
      pack_chunk(ops, sums + m * c, Dtype::kF32, chunk_of(groups_.rank_at(m, l)), format_, feedback_,
                 error2 ? error2 + m * c : nullptr, out2.data() + m * stride, stride);
    if (error2) feedback_->store();
    wire::all_to_all(host_, args, groups_.index_group(), out2.view, in2.view);
    total = at::zeros({c}, ops.options().dtype(at::kFloat));
    const ChunkPieces& mine = chunk_of(wire::rank(host_, nullptr));
    for (int m = 0; m < nodes; ++m) unpack_add(ops, in2.data() + m * stride, mine, format_, total.data_ptr<float>());
  }
  if (args.op == ZHOST_REDUCE_AVG) total.div_(static_cast<double>(world));
  kit::tensor_view(*args.recv).reshape({-1}).copy_(total);
}

}  // namespace zhost::zeropp
