// host/services/device_copies_cuda.cpp: copies between host memory and a CUDA device on copy streams, and
// pinned host memory (see device_copies_cuda.hpp). Uses LibTorch's CUDA API only (streams, events, the
// pinned allocator), which is the same in LibTorch 1.13 and 2.x.
#include "host/services/device_copies_cuda.hpp"

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/PinnedMemoryAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <map>
#include <mutex>
#include <utility>

namespace zhost::cuda_copies {

struct Transfer {
  c10::DeviceIndex device = 0;
  at::cuda::CUDAEvent done;  // recorded on the copy stream after the copy
};

void TransferDeleter::operator()(Transfer* transfer) const { delete transfer; }

namespace {

// One stream per device and direction, taken from LibTorch's pool once: copies of one direction run in
// issue order, and the two directions can use the device's two copy engines at once.
c10::cuda::CUDAStream copy_stream(c10::DeviceIndex device, bool to_device) {
  static std::mutex mutex;
  static std::map<std::pair<c10::DeviceIndex, bool>, c10::cuda::CUDAStream> streams;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = streams.find({device, to_device});
  if (it == streams.end())
    it = streams.emplace(std::make_pair(device, to_device), c10::cuda::getStreamFromPool(false, device)).first;
  return it->second;
}

}  // namespace

TransferPtr start(const at::Tensor& src, at::Tensor& dst) {
  const bool to_device = dst.is_cuda();
  const c10::DeviceIndex device = to_device ? dst.device().index() : src.device().index();
  const c10::cuda::CUDAGuard on_device(device);
  const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device);
  const c10::cuda::CUDAStream stream = copy_stream(device, to_device);
  at::cuda::CUDAEvent ready;  // the compute stream's work so far (e.g. the gradient being copied)
  ready.record(compute);
  ready.block(stream);
  TransferPtr transfer(new Transfer);
  transfer->device = device;
  {
    const c10::cuda::CUDAStreamGuard on_stream(stream);
    dst.copy_(src, /*non_blocking=*/true);
  }
  transfer->done.record(stream);
  return transfer;
}

void order_compute_after(Transfer& transfer) { transfer.done.block(c10::cuda::getCurrentCUDAStream(transfer.device)); }

void wait(Transfer& transfer) { transfer.done.synchronize(); }

std::shared_ptr<void> pinned_allocate(size_t bytes) {
  auto data = std::make_shared<c10::DataPtr>(at::cuda::getPinnedMemoryAllocator()->allocate(bytes));
  void* pointer = data->get();
  return std::shared_ptr<void>(pointer, [data](void*) mutable { data.reset(); });
}

}  // namespace zhost::cuda_copies
