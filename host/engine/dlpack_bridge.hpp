// host/engine/dlpack_bridge.hpp: borrowed views between at::Tensor and DLPack's DLTensor, the tensor
// form of the plugin ABI. Nothing is copied or owned: a view lives as long as the tensor it was made from.
#pragma once

#include <ATen/core/Tensor.h>
#include <dlpack/dlpack.h>

namespace zhost::engine {

// A DLTensor describing `tensor` (same data pointer, shape and strides). The shape and strides point into
// the tensor's own metadata, so the view is valid while `tensor` is alive and not resized.
DLTensor dl_view(const at::Tensor& tensor);

// An at::Tensor over the memory a DLTensor describes (no copy, no ownership).
at::Tensor tensor_view(const DLTensor& view);

DLDataType dl_dtype(at::ScalarType type);
DLDevice dl_device(at::Device device);
at::ScalarType scalar_type(DLDataType type);

}  // namespace zhost::engine
