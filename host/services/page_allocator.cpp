// host/services/page_allocator.cpp: host memory straight from mmap, back to the kernel on free (see the
// header).
#include "host/services/page_allocator.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace zhost {
namespace {

struct Mapping {
  void* address;
  size_t length;
};

void unmap(void* context) {
  auto* mapping = static_cast<Mapping*>(context);
  ::munmap(mapping->address, mapping->length);
  delete mapping;
}

class PageAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) override {
    if (bytes == 0) return c10::DataPtr(nullptr, c10::Device(c10::kCPU));
    // Pages are populated in one call: the caller writes all of them next (a gather or the initial
    // values), and one kernel entry is much cheaper than a fault per page.
    void* address = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (address == MAP_FAILED) throw std::bad_alloc();
    return c10::DataPtr(address, new Mapping{address, bytes}, &unmap, c10::Device(c10::kCPU));
  }
  // Tensor::clone of a tensor in these pages copies host memory to host memory.
  void copy_data(void* destination, const void* source, std::size_t bytes) const override {
    default_copy_data(destination, source, bytes);
  }
};

}  // namespace

c10::Allocator* page_allocator() {
  static PageAllocator instance;
  return &instance;
}

}  // namespace zhost
