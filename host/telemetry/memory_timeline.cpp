// host/telemetry/memory_timeline.cpp: memory by category (Note [Memory categories]) and see_memory_usage lines.
#include "host/telemetry/memory_timeline.hpp"

#include <fmt/format.h>
#include <malloc.h>
#include <sys/sysinfo.h>

#include <cstddef>

#include "host/telemetry/telemetry.hpp"

#if ZHOST_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

// gperftools' C entry point, present when the process runs tcmalloc (weak: null under glibc's malloc).
extern "C" int MallocExtension_GetNumericProperty(const char* property, size_t* value) __attribute__((weak));

namespace zhost::engine {

double live_allocated_bytes(bool cuda) {
#if ZHOST_WITH_CUDA
  if (cuda && cuda_allocator_in_use()) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
    return static_cast<double>(stats.allocated_bytes[0].current);
  }
#else
  (void)cuda;
#endif
  if (MallocExtension_GetNumericProperty) {
    size_t value = 0;
    if (MallocExtension_GetNumericProperty("generic.current_allocated_bytes", &value))
      return static_cast<double>(value);
    return 0;
  }
  const struct mallinfo2 info = mallinfo2();
  return static_cast<double>(info.uordblks + info.hblkhd);
}

MemoryCategories memory_categories(const ModelStateBytes& s, double pinned, double activations, double checkpoints_host,
                                   double tier_storage) {
  const MemoryUsage usage = current_memory();
  return {{"params", s.params},
          {"grads", s.grads},
          {"master", s.master},
          {"optimizer", s.optimizer},
          {"buffers", s.buffers},
          {"gather_window", s.gather_window},
          {"pinned", pinned},
          {"tier_host", s.offloaded},
          {"tier_nvme", tier_storage},
          {"activations", activations},
          {"checkpoints_host", checkpoints_host},
          {"rss", usage.rss_mb * 1048576.0},
          {"peak_rss", usage.peak_rss_mb * 1048576.0}};
}

std::string see_memory_usage(const std::string& phase, const MemoryCategories& categories) {
  const MemoryUsage usage = current_memory();
  std::string line = phase;
  constexpr double kGB = 1024.0 * 1024 * 1024;
  if (usage.cuda_allocated_mb)
    line += fmt::format(" | MA {:.2f} GB Max_MA {:.2f} GB CA {:.2f} GB", *usage.cuda_allocated_mb / 1024,
                        *usage.cuda_peak_mb / 1024, *usage.cuda_reserved_mb / 1024);
  struct sysinfo info {};
  if (sysinfo(&info) == 0 && info.totalram > 0) {
    const double total = static_cast<double>(info.totalram) * info.mem_unit;
    const double used = total - static_cast<double>(info.freeram + info.bufferram) * info.mem_unit;
    line += fmt::format(" | CPU Virtual Memory: used = {:.2f} GB, percent = {:.1f}%", used / kGB, 100 * used / total);
  }
  line += " |";
  for (const auto& [name, bytes] : categories)
    if (bytes != 0) line += fmt::format(" {} {:.1f} MB", name, bytes / 1048576.0);
  return line;
}

}  // namespace zhost::engine
