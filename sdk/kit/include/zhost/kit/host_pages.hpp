// zhost/kit/host_pages.hpp: page-level preparation of host memory a plugin is about to fill.
#pragma once

#include <ATen/core/Tensor.h>

namespace zhost::kit {

// Makes every page under `data` (host memory, contiguous) resident and writable in one system call
// (MADV_POPULATE_WRITE), so that the writes that follow fault on none of them. Meant for memory whose pages
// were given back to the kernel (an offload tier's accumulator, Note [Gradients in storage]): there, an add
// reads each page first, which maps the shared zero page, and then writes it, which replaces that mapping
// with a TLB shootdown across the process's CPUs - about 3 s per GB measured on a 2-core VM. Does nothing
// for device memory or where the kernel cannot (before Linux 5.14).
void prefault_for_write(const at::Tensor& data);

}  // namespace zhost::kit
