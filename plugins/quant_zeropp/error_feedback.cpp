// plugins/quant_zeropp/error_feedback.cpp: LoCo's kept errors (see the header).
#include "plugins/quant_zeropp/error_feedback.hpp"

#include <ATen/ops/empty.h>

namespace zhost::zeropp {
namespace {

// How a kept error is stored between reductions (DeepSpeed: 8 bits too).
const BlockFormat kKeptFormat{Bits::kInt8, 512};

}  // namespace

float* ErrorFeedback::load(const DeviceOps& ops, int32_t block, int hop, int64_t n) {
  Kept& kept = kept_[Key{block, hop, n}];
  if (!open_.defined() || open_.numel() < n || open_ops_ != &ops)
    open_ = at::empty({n}, ops.options().dtype(at::kFloat));
  float* error = open_.data_ptr<float>();
  if (!kept.packed || &kept.packed->ops() != &ops) {  // first use, or the job's collectives moved device
    bytes_ -= kept.packed ? static_cast<uint64_t>(kept.packed->shape) : 0;
    kept.packed = std::make_unique<ByteBuffer>(ops, packed_bytes(ChunkPieces(n), kKeptFormat));
    bytes_ += static_cast<uint64_t>(kept.packed->shape);
    kept.reductions = 0;  // an error from another device restarts from zero
  }
  if (kept.reductions == 0 || kept.reductions >= options_.reset_after) {
    ops.zero(error, n * static_cast<int64_t>(sizeof(float)));
    kept.reductions = 0;
  } else {
    unpack(ops, kept.packed->data(), ChunkPieces(n), kKeptFormat, error, Dtype::kF32);
  }
  ++kept.reductions;
  open_ops_ = &ops;
  open_kept_ = &kept;
  open_n_ = n;
  return error;
}

void ErrorFeedback::store() {
  if (!open_kept_) return;
  pack(*open_ops_, open_.data_ptr<float>(), Dtype::kF32, ChunkPieces(open_n_), kKeptFormat, open_kept_->packed->data(),
       open_kept_->packed->shape);
  open_kept_ = nullptr;
}

}  // namespace zhost::zeropp
