// host/services/device_copies_cuda.hpp: the CUDA half of device_copies (compiled with ZHOST_WITH_CUDA only):
// copies on per-direction copy streams ordered by events against the compute stream, and pinned host
// memory from LibTorch's allocator. Kept apart so that CPU builds never see a CUDA header; a syntax check
// in the test suite compiles it against the CUDA headers on machines without a CUDA LibTorch.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <memory>

namespace zhost::cuda_copies {

// A copy in flight on a copy stream.
struct Transfer;
struct TransferDeleter {
  void operator()(Transfer* transfer) const;
};
using TransferPtr = std::unique_ptr<Transfer, TransferDeleter>;

// Starts dst.copy_(src) on the copy stream of its direction, after the compute stream's work so far. One of
// the two tensors is on a CUDA device.
TransferPtr start(const at::Tensor& src, at::Tensor& dst);
// The compute stream's later work waits for the copy.
void order_compute_after(Transfer& transfer);
// The calling thread waits for the copy.
void wait(Transfer& transfer);

// `bytes` of page-locked host memory (page-aligned), owned by the returned pointer.
std::shared_ptr<void> pinned_allocate(size_t bytes);

}  // namespace zhost::cuda_copies
