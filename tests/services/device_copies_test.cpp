// tests/services/device_copies_test.cpp: the host's copy services (zhost_copy_services) on a CPU job: copies
// complete at once when training in host memory; under debug.deferred_device_copies they run no earlier
// than order_compute_after() or wait(), which is what lets the training tests catch a plugin that reads
// too early; bad copies are refused with what is wrong. (On CUDA the same table runs copy streams; see
// device_copies_cuda.cpp and the syntax check beside this test.) Also: pinned buffers come from the
// allocator a CUDA job installs.
#include "host/services/device_copies.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "host/core/error.hpp"
#include "host/services/host_services.hpp"
#include "zhost/kit/dlpack_views.hpp"

namespace zhost {
namespace {

// The copy services' calls with their args structs (zhost/host.h), as the tests use them.
zhost_status* copy_start(const zhost_copy_services* c, zhost_host_context* ctx, const DLTensor* src, DLTensor* dst,
                         zhost_copy** out) {
  zhost_copy_start_args args{sizeof(args), nullptr, src, dst, nullptr};
  zhost_status* status = c->start(ctx, &args);
  *out = args.copy;
  return status;
}
zhost_status* copy_wait(const zhost_copy_services* c, zhost_host_context* ctx, zhost_copy* copy) {
  zhost_copy_args args{sizeof(args), nullptr, copy};
  return c->wait(ctx, &args);
}
zhost_status* copy_order_compute_after(const zhost_copy_services* c, zhost_host_context* ctx, zhost_copy* copy) {
  zhost_copy_args args{sizeof(args), nullptr, copy};
  return c->order_compute_after(ctx, &args);
}

struct Fixture {
  HostServices services;
  zhost_host_context* ctx = services.create_context(PluginContextSpec{"test", {}});
  const zhost_copy_services* copies() const { return services.table()->copies; }
};

TEST(DeviceCopies, ImmediateOnACpuJob) {
  Fixture f;
  EXPECT_EQ(f.copies(), nullptr);  // no job, no copies
  DeviceCopies copies(at::kCPU, f.services, /*deferred=*/false);
  ASSERT_NE(f.copies(), nullptr);
  EXPECT_EQ(f.copies()->device_memory_is_separate(f.ctx), 0);
  at::Tensor src = at::arange(10, at::kFloat), dst = at::zeros({10});
  DLTensor s = kit::dl_view(src), d = kit::dl_view(dst);
  zhost_copy* copy = reinterpret_cast<zhost_copy*>(1);
  ASSERT_EQ(copy_start(f.copies(), f.ctx, &s, &d, &copy), nullptr);
  EXPECT_EQ(copy, nullptr);  // done already
  EXPECT_TRUE(at::equal(src, dst));
}

TEST(DeviceCopies, DeferredCopiesRunAtTheLatestAllowedPoint) {
  Fixture f;
  DeviceCopies copies(at::kCPU, f.services, /*deferred=*/true);
  EXPECT_EQ(f.copies()->device_memory_is_separate(f.ctx), 1);
  at::Tensor src = at::arange(7, at::kBFloat16), dst = at::zeros({7}, at::kBFloat16);
  const at::Tensor expected = src.clone();
  DLTensor s = kit::dl_view(src), d = kit::dl_view(dst);

  zhost_copy* copy = nullptr;
  ASSERT_EQ(copy_start(f.copies(), f.ctx, &s, &d, &copy), nullptr);
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(dst.abs().sum().item<float>(), 0.f);  // not yet
  ASSERT_EQ(copy_wait(f.copies(), f.ctx, copy), nullptr);
  EXPECT_TRUE(at::equal(dst, expected));

  // order_compute_after runs it (host compute waits by the copy happening now); wait() then only frees.
  dst.zero_();
  ASSERT_EQ(copy_start(f.copies(), f.ctx, &s, &d, &copy), nullptr);
  src.fill_(3);  // a source rewritten before ordering: the late copy sees the new values
  ASSERT_EQ(copy_order_compute_after(f.copies(), f.ctx, copy), nullptr);
  EXPECT_TRUE(at::equal(dst, at::full({7}, 3, at::kBFloat16)));
  src.fill_(5);
  ASSERT_EQ(copy_wait(f.copies(), f.ctx, copy), nullptr);
  EXPECT_TRUE(at::equal(dst, at::full({7}, 3, at::kBFloat16)));
}

TEST(DeviceCopies, RefusesCopiesItCannotMake) {
  Fixture f;
  DeviceCopies copies(at::kCPU, f.services, /*deferred=*/false);
  at::Tensor a = at::zeros({4}), b = at::zeros({5}), c = at::zeros({4}, at::kDouble);
  at::Tensor strided = at::zeros({4, 2}).t();
  zhost_copy* copy = nullptr;
  auto message = [&](const at::Tensor& src, const at::Tensor& dst) {
    DLTensor s = kit::dl_view(src), d = kit::dl_view(dst);
    try {
      HostServices::throw_if_error(copy_start(f.copies(), f.ctx, &s, &d, &copy), "start");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(a, b).find("source (4 elements of Float) and destination (5 of Float) differ"), std::string::npos);
  EXPECT_NE(message(a, c).find("differ"), std::string::npos);
  EXPECT_NE(message(strided, at::zeros({8})).find("must be contiguous"), std::string::npos);
  EXPECT_EQ(copy, nullptr);
}

// On CUDA jobs DeviceCopies installs LibTorch's pinned allocator for ZHOST_MEMORY_PINNED buffers (so that
// copies from them overlap). The plumbing, with an allocator that counts: pinned buffers come from it and
// go back to it on release; an alignment above a page, and pageable buffers, do not use it.
TEST(DeviceCopies, PinnedBuffersComeFromTheInstalledAllocator) {
  int allocated = 0, freed = 0;  // outlive the fixture, whose buffers are released when it goes
  Fixture f;
  f.services.set_pinned_allocator([&](size_t bytes) {
    ++allocated;
    return std::shared_ptr<void>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096), [&](void* p) {
      ++freed;
      std::free(p);
    });
  });
  auto alloc = [&](zhost_memory_kind kind, uint64_t alignment) {
    zhost_buffer_alloc_args args{};
    args.struct_size = sizeof(args);
    args.memory = kind;
    args.size_bytes = 10000;
    args.alignment = alignment;
    HostServices::throw_if_error(f.services.table()->buffer_alloc(f.ctx, &args), "buffer_alloc");
    std::memset(args.data, 1, args.size_bytes);  // usable memory
    return args.handle;
  };
  const zhost_buffer_handle pinned = alloc(ZHOST_MEMORY_PINNED, 0);
  EXPECT_EQ(allocated, 1);
  alloc(ZHOST_MEMORY_PINNED, 8192);
  alloc(ZHOST_MEMORY_HOST, 0);
  EXPECT_EQ(allocated, 1);
  zhost_buffer_release_args release{sizeof(release), nullptr, pinned};
  HostServices::throw_if_error(f.services.table()->buffer_release(f.ctx, &release), "buffer_release");
  EXPECT_EQ(freed, 1);
  f.services.set_pinned_allocator(nullptr);
  alloc(ZHOST_MEMORY_PINNED, 0);
  EXPECT_EQ(allocated, 1);
}

// Two jobs in one process (two HostServices, as two JobSetups hold): each call finds its own job's copies
// through the context it passes, and one job ending leaves the other's untouched.
TEST(DeviceCopies, TwoJobsInOneProcessDoNotShareTheirCopies) {
  Fixture deferred_job;
  DeviceCopies deferred(at::kCPU, deferred_job.services, /*deferred=*/true);
  Fixture immediate_job;
  auto immediate = std::make_unique<DeviceCopies>(at::kCPU, immediate_job.services, /*deferred=*/false);
  EXPECT_EQ(deferred_job.copies()->device_memory_is_separate(deferred_job.ctx), 1);
  EXPECT_EQ(immediate_job.copies()->device_memory_is_separate(immediate_job.ctx), 0);

  at::Tensor src = at::arange(6, at::kFloat), dst = at::zeros({6});
  DLTensor s = kit::dl_view(src), d = kit::dl_view(dst);
  zhost_copy* copy = nullptr;
  ASSERT_EQ(copy_start(deferred_job.copies(), deferred_job.ctx, &s, &d, &copy), nullptr);
  ASSERT_NE(copy, nullptr);  // deferred: pending until waited for
  immediate.reset();         // the other job ends
  EXPECT_EQ(immediate_job.copies(), nullptr);
  EXPECT_EQ(deferred_job.copies()->device_memory_is_separate(deferred_job.ctx), 1);
  ASSERT_EQ(copy_wait(deferred_job.copies(), deferred_job.ctx, copy), nullptr);
  EXPECT_TRUE(at::equal(src, dst));
}

TEST(DeviceCopies, ACallWithoutAContextIsRefused) {
  Fixture f;
  DeviceCopies copies(at::kCPU, f.services, /*deferred=*/false);
  at::Tensor src = at::arange(3, at::kFloat), dst = at::zeros({3});
  DLTensor s = kit::dl_view(src), d = kit::dl_view(dst);
  zhost_copy* copy = nullptr;
  try {
    HostServices::throw_if_error(copy_start(f.copies(), nullptr, &s, &d, &copy), "start");
    FAIL() << "a copy without a context ran";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("copies->start: no host context"), std::string::npos) << e.what();
  }
}

TEST(DeviceCopies, DeferredCopiesAreRefusedOnCuda) {
  Fixture f;
  EXPECT_THROW(DeviceCopies(at::Device(at::kCUDA, 0), f.services, /*deferred=*/true), UsageError);
}

}  // namespace
}  // namespace zhost
