// host/engine/device.cpp: the device a rank trains on (see the header).
#include "host/engine/device.hpp"

#include "host/core/error.hpp"

#if ZHOST_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace zhost::engine {

bool has_cuda_device() {
#if ZHOST_WITH_CUDA
  return c10::cuda::device_count() > 0;
#else
  return false;
#endif
}

bool trains_on_cuda(const TrainSettings& settings) { return settings.device != "cpu" && has_cuda_device(); }

at::Device training_device(const TrainSettings& settings) {
  const std::string& wanted = settings.device;
  const bool have_cuda = has_cuda_device();
  if (wanted == "cuda" && !have_cuda)
    fail_usage("run.device = \"cuda\" but this zhost build or machine has no CUDA device; use \"auto\" or \"cpu\"");
  if (wanted == "cpu" || !have_cuda) return at::kCPU;
#if ZHOST_WITH_CUDA
  if (settings.local_world_size > c10::cuda::device_count())
    fail_usage(
        "{} ranks on this node but {} CUDA device(s): each rank needs its own GPU; start at most {} ranks per "
        "node, or set run.device = \"cpu\"",
        settings.local_world_size, c10::cuda::device_count(), c10::cuda::device_count());
  int device = settings.local_rank;
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device));
#else
  return at::kCPU;
#endif
}

}  // namespace zhost::engine
