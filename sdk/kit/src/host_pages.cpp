// sdk/kit/src/host_pages.cpp: prefaulting host memory for writing (see the header).
#include "zhost/kit/host_pages.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace zhost::kit {

void prefault_for_write(const at::Tensor& data) {
#ifdef MADV_POPULATE_WRITE
  if (!data.defined() || !data.device().is_cpu() || data.nbytes() == 0) return;
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data.data_ptr()) / page * page;
  const auto end = reinterpret_cast<uintptr_t>(data.data_ptr()) + data.nbytes();
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);  // a hint: failure changes nothing
#else
  static_cast<void>(data);
#endif
}

}  // namespace zhost::kit
