// host/engine/device.cpp: the device a rank trains on (see the header).
#include "host/engine/device.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "host/core/error.hpp"

#if ZHOST_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace zhost::engine {
namespace {

bool cuda_kept_out = false;
std::optional<int> probed_device_count;

int count_devices_here() {
#if ZHOST_WITH_CUDA
  return c10::cuda::device_count();
#else
  return 0;
#endif
}

// Note [No CUDA before fork]: asks a child process, which counts the devices, writes the count and exits.
int count_devices_in_child() {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) fail("cannot count CUDA devices: pipe failed: {}", std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) fail("cannot count CUDA devices: fork failed: {}", std::strerror(errno));
  if (pid == 0) {
    ::close(pipe_fds[0]);
    const int count = count_devices_here();
    [[maybe_unused]] const ssize_t written = ::write(pipe_fds[1], &count, sizeof count);
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  int count = 0;
  ssize_t got = 0;
  while ((got = ::read(pipe_fds[0], &count, sizeof count)) < 0 && errno == EINTR) {
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  // A child that died before answering (a broken driver) found no usable device; the ranks will say why.
  return got == static_cast<ssize_t>(sizeof count) ? count : 0;
}

int cuda_device_count() {
  if (!cuda_kept_out) return count_devices_here();
  if (!probed_device_count) probed_device_count = count_devices_in_child();
  return *probed_device_count;
}

}  // namespace

void keep_cuda_out_of_this_process() { cuda_kept_out = true; }

bool has_cuda_device() { return cuda_device_count() > 0; }

bool trains_on_cuda(const TrainSettings& settings) { return settings.device != "cpu" && has_cuda_device(); }

at::Device training_device(const TrainSettings& settings) {
  const std::string& wanted = settings.device;
  const bool have_cuda = has_cuda_device();
  if (wanted == "cuda" && !have_cuda)
    fail_usage("run.device = \"cuda\" but this zhost build or machine has no CUDA device; use \"auto\" or \"cpu\"");
  if (wanted == "cpu" || !have_cuda) return at::kCPU;
#if ZHOST_WITH_CUDA
  const int devices = cuda_device_count();
  if (settings.local_world_size > devices && !settings.share_cuda_device)
    fail_usage(
        "{} ranks on this node but {} CUDA device(s): each rank needs its own GPU; start at most {} ranks per "
        "node, or set run.device = \"cpu\"",
        settings.local_world_size, devices, devices);
  const auto device = static_cast<c10::DeviceIndex>(settings.local_rank % devices);
  c10::cuda::set_device(device);
  return at::Device(at::kCUDA, device);
#else
  return at::kCPU;
#endif
}

}  // namespace zhost::engine
