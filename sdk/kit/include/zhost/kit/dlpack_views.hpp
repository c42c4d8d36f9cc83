// zhost/kit/dlpack_views.hpp: borrowed views between at::Tensor and DLPack's DLTensor, the tensor form of
// the plugin ABI. Nothing is copied or owned: a view lives as long as the tensor or memory it was made
// from (see Note [DLTensor lifetimes] in docs/abi.md).
#pragma once

#include <ATen/core/Tensor.h>
#include <dlpack/dlpack.h>

namespace zhost::kit {

// A DLTensor describing `tensor` (same data pointer, shape and strides). The shape and strides point into
// the tensor's own metadata, so the view is valid while `tensor` is alive and not resized.
DLTensor dl_view(const at::Tensor& tensor);

// An at::Tensor over the memory a DLTensor describes (no copy, no ownership): valid while that memory is.
// Throws sdk::PluginError(ZHOST_ERR_UNSUPPORTED) for a dtype or device zhost does not map.
at::Tensor tensor_view(const DLTensor& view);

DLDataType dl_dtype(at::ScalarType type);
DLDevice dl_device(at::Device device);
at::ScalarType scalar_type(DLDataType type);

}  // namespace zhost::kit
