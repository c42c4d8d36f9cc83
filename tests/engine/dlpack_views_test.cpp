// tests/engine/dlpack_views_test.cpp: DLPack views of ATen tensors and back (sdk/kit/src/dlpack_views.cpp), the
// way every collective and copy service crosses the ABI: same memory, shape, strides and device.
#include "zhost/kit/dlpack_views.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>

namespace zhost::kit {
namespace {

TEST(DlpackViews, AStridedViewComesBackAsTheSameMemory) {
  at::Tensor base = at::arange(24, at::kFloat).view({4, 6});
  at::Tensor column = base.narrow(1, 2, 3).t();  // [3, 4], strides (1, 6), offset 2
  DLTensor view = dl_view(column);
  at::Tensor back = tensor_view(view);
  EXPECT_EQ(back.data_ptr(), column.data_ptr());
  EXPECT_EQ(back.sizes(), column.sizes());
  EXPECT_EQ(back.strides(), column.strides());
  EXPECT_TRUE(back.equal(column));
  back.fill_(-1);
  EXPECT_EQ(base[0][2].item<float>(), -1);
}

// A rank that owns none of a range hands the collective an empty receive view, whose data ATen gives as null.
// Its device must come from the view: CUDA cannot place a null pointer ("resides on host memory"), the first
// failure of two ranks sharing a GPU. Runs without a GPU: nothing here touches CUDA memory.
TEST(DlpackViews, AnEmptyCudaViewKeepsItsDevice) {
  int64_t shape[] = {0};
  DLTensor view{};
  view.data = nullptr;
  view.device = {kDLCUDA, 0};
  view.ndim = 1;
  view.dtype = {kDLFloat, 32, 1};
  view.shape = shape;
  at::Tensor tensor = tensor_view(view);
  EXPECT_EQ(tensor.device(), at::Device(at::kCUDA, 0));
  EXPECT_EQ(tensor.numel(), 0);
  EXPECT_EQ(tensor.scalar_type(), at::kFloat);
}

TEST(DlpackViews, AnEmptyCpuViewHasNullData) {
  at::Tensor empty = at::arange(4, at::kFloat).narrow(0, 1, 0);
  DLTensor view = dl_view(empty);
  EXPECT_EQ(view.data, nullptr);  // why the device cannot be asked of the pointer
  EXPECT_EQ(tensor_view(view).numel(), 0);
}

}  // namespace
}  // namespace zhost::kit
