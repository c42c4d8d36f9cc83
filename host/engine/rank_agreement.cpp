// host/engine/rank_agreement.cpp: the lowest failing rank (an all-reduce) and its error (two broadcasts).
#include "host/engine/rank_agreement.hpp"

#include <ATen/core/Tensor.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace zhost::engine {

std::string agreed_failure(comm::Comm& world, const std::string& error) {
  const int64_t none = world.world_size();
  at::Tensor first = at::tensor({error.empty() ? none : int64_t{world.rank()}}, at::kLong);
  world.all_reduce(first, comm::ReduceOp::kMin);
  const int64_t root = first.item<int64_t>();
  if (root == none) return {};
  constexpr int64_t kMaxErrorBytes = 2048;
  const bool sender = root == world.rank();
  at::Tensor length =
      at::tensor({sender ? std::min<int64_t>(static_cast<int64_t>(error.size()), kMaxErrorBytes) : 0}, at::kLong);
  world.broadcast(length, static_cast<int>(root));
  at::Tensor bytes = at::zeros({length.item<int64_t>()}, at::kByte);
  if (sender) std::memcpy(bytes.data_ptr<uint8_t>(), error.data(), static_cast<size_t>(bytes.numel()));
  world.broadcast(bytes, static_cast<int>(root));
  if (!error.empty()) return error;
  return fmt::format(
      "rank {}: {}", root,
      std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(bytes.numel())));
}

}  // namespace zhost::engine
