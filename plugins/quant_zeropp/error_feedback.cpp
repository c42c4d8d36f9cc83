// plugins/quant_zeropp/error_feedback.cpp: LoCo's kept errors (see the header).
#include "plugins/quant_zeropp/error_feedback.hpp"

#include <algorithm>

namespace zhost::zeropp {
namespace {

// How a kept error is stored between reductions (DeepSpeed: 8 bits too).
const BlockFormat kKeptFormat{Bits::kInt8, 512};

}  // namespace

float* ErrorFeedback::load(int32_t block, int hop, int64_t n) {
  Kept& kept = kept_[Key{block, hop, n}];
  open_.resize(static_cast<size_t>(n));
  if (!kept.packed) {
    kept.packed = std::make_unique<ByteBuffer>(packed_bytes(ChunkPieces(n), kKeptFormat));
    bytes_ += static_cast<uint64_t>(kept.packed->shape);
  }
  if (kept.reductions == 0 || kept.reductions >= options_.reset_after) {
    std::fill(open_.begin(), open_.end(), 0.0f);
    kept.reductions = 0;
  } else {
    unpack(kept.packed->data(), ChunkPieces(n), kKeptFormat, open_.data(), Dtype::kF32);
  }
  ++kept.reductions;
  open_kept_ = &kept;
  open_n_ = n;
  return open_.data();
}

void ErrorFeedback::store() {
  if (!open_kept_) return;
  pack(open_.data(), Dtype::kF32, ChunkPieces(open_n_), kKeptFormat, open_kept_->packed->data(),
       open_kept_->packed->shape);
  open_kept_ = nullptr;
}

}  // namespace zhost::zeropp
