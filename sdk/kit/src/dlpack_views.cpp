// sdk/kit/src/dlpack_views.cpp: dtype/device mapping and zero-copy views between ATen and DLPack.
#include "zhost/kit/dlpack_views.hpp"

#include <ATen/ops/from_blob.h>

#include <optional>
#include <vector>

#include "kit_error.hpp"

namespace zhost::kit {

DLDataType dl_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return {kDLFloat, 32, 1};
    case at::kDouble:
      return {kDLFloat, 64, 1};
    case at::kHalf:
      return {kDLFloat, 16, 1};
    case at::kBFloat16:
      return {kDLBfloat, 16, 1};
    case at::kLong:
      return {kDLInt, 64, 1};
    case at::kInt:
      return {kDLInt, 32, 1};
    case at::kChar:
      return {kDLInt, 8, 1};
    case at::kByte:
      return {kDLUInt, 8, 1};
    case at::kBool:
      return {kDLUInt, 8, 1};
    default:
      detail::fail(ZHOST_ERR_UNSUPPORTED, "dtype {} has no DLPack mapping in zhost", c10::toString(type));
  }
}

at::ScalarType scalar_type(DLDataType type) {
  if (type.lanes != 1)
    detail::fail(ZHOST_ERR_UNSUPPORTED, "DLPack tensors with {} lanes are not supported", type.lanes);
  switch (type.code) {
    case kDLFloat:
      if (type.bits == 32) return at::kFloat;
      if (type.bits == 64) return at::kDouble;
      if (type.bits == 16) return at::kHalf;
      break;
    case kDLBfloat:
      if (type.bits == 16) return at::kBFloat16;
      break;
    case kDLInt:
      if (type.bits == 64) return at::kLong;
      if (type.bits == 32) return at::kInt;
      if (type.bits == 8) return at::kChar;
      break;
    case kDLUInt:
      if (type.bits == 8) return at::kByte;
      break;
    default:
      break;
  }
  detail::fail(ZHOST_ERR_UNSUPPORTED, "DLPack dtype (code {}, {} bits) is not supported", static_cast<int>(type.code),
               static_cast<int>(type.bits));
}

DLDevice dl_device(at::Device device) {
  return device.is_cuda() ? DLDevice{kDLCUDA, device.index()} : DLDevice{kDLCPU, 0};
}

DLTensor dl_view(const at::Tensor& tensor) {
  DLTensor view{};
  view.data = tensor.data_ptr();
  view.device = dl_device(tensor.device());
  view.ndim = static_cast<int32_t>(tensor.dim());
  view.dtype = dl_dtype(tensor.scalar_type());
  view.shape = const_cast<int64_t*>(tensor.sizes().data());
  view.strides = const_cast<int64_t*>(tensor.strides().data());
  view.byte_offset = 0;
  return view;
}

// The device comes from the view, never from the pointer: an empty view's data may be null (ATen's data_ptr()
// of an empty tensor is), which CUDA cannot place on a device, and asking CUDA would cost a call per view.
at::Tensor tensor_view(const DLTensor& view) {
  std::vector<int64_t> shape(view.shape, view.shape + view.ndim);
  at::Device device = at::kCPU;
  if (view.device.device_type == kDLCUDA)
    device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(view.device.device_id));
  else if (view.device.device_type != kDLCPU)
    detail::fail(ZHOST_ERR_UNSUPPORTED, "DLPack device type {} is not supported",
                 static_cast<int>(view.device.device_type));
  void* data = static_cast<char*>(view.data) + view.byte_offset;
  std::optional<std::vector<int64_t>> strides;
  if (view.strides) strides.emplace(view.strides, view.strides + view.ndim);
  return at::for_blob(data, shape)
      .strides(strides ? at::OptionalIntArrayRef(*strides) : std::nullopt)
      .options(at::TensorOptions().dtype(scalar_type(view.dtype)).device(device))
      .target_device(device)
      .make_tensor();
}

}  // namespace zhost::kit
