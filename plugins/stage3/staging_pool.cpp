// plugins/stage3/staging_pool.cpp: reusing host staging buffers (see the header).
#include "plugins/stage3/staging_pool.hpp"

#include <utility>

namespace zhost::stage3 {

at::Tensor HostStagingPool::take(int64_t numel) {
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if (it->numel() >= numel && (best == free_.end() || it->numel() < best->numel())) best = it;
  if (best == free_.end()) return copies_.host_empty(numel, dtype_);
  at::Tensor buffer = std::move(*best);
  free_.erase(best);
  return buffer;
}

}  // namespace zhost::stage3
