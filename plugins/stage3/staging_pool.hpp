// plugins/stage3/staging_pool.hpp: the host staging buffers (pinned when the device is CUDA) that stage 3
// reuses for its copies to and from an offload tier: updated shards on their way to the parameter tier
// (sub_group_optimizer.hpp). Buffers return to the pool after use and are kept between steps.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "zhost/zero/plugin_calls.hpp"

namespace zhost::stage3 {

class HostStagingPool {
 public:
  HostStagingPool() = default;  // none: nothing is staged (no offload tier)
  // `copies`: allocates the buffers; `dtype`: theirs (the compute dtype).
  HostStagingPool(const zero::HostCopies& copies, at::ScalarType dtype) : copies_(copies), dtype_(dtype) {}

  // A buffer of at least `numel` elements (1-D, uninitialised): the smallest free one that fits, or a new one.
  at::Tensor take(int64_t numel);
  // Returns a buffer from take() to the pool.
  void give(at::Tensor buffer) { free_.push_back(std::move(buffer)); }

 private:
  zero::HostCopies copies_;
  at::ScalarType dtype_ = at::kFloat;
  std::vector<at::Tensor> free_;  // not in use
};

}  // namespace zhost::stage3
