// host/engine/random_ltd.cpp: the schedule, the draw and the gather/scatter of Note [Random-LTD].
#include "host/engine/random_ltd.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/rand.h>

#include <algorithm>
#include <cmath>

namespace zhost::engine {

int64_t random_ltd_tokens(const RandomLtdSpec& spec, int64_t step) {
  // DeepSpeed's fixed_linear value at global_steps = step - 1 (its __fixed_root_get_value with root_degree 1).
  const double progress = static_cast<double>(step - 1) / static_cast<double>(spec.require_steps);
  auto value = static_cast<int64_t>(std::floor(progress * static_cast<double>(spec.max_tokens - spec.min_tokens) +
                                               static_cast<double>(spec.min_tokens)));
  value -= value % spec.tokens_per_increase;
  return std::min(value, spec.max_tokens);
}

at::Tensor random_ltd_positions(uint64_t key, int64_t batch, int64_t seq, int64_t keep) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(key);
  const at::Tensor scores = at::rand({batch, seq}, generator);  // [B, T]: the k smallest scores are kept
  const at::Tensor chosen = std::get<1>(scores.topk(keep, /*dim=*/1, /*largest=*/false));
  return std::get<0>(chosen.sort(/*dim=*/1));  // [B, k] ascending
}

at::Tensor run_on_kept_tokens(const at::Tensor& x, const at::Tensor& positions,
                              const std::function<at::Tensor(const at::Tensor&)>& block) {
  const at::Tensor index = positions.to(x.device()).unsqueeze(-1).expand({-1, -1, x.size(2)});  // [B, k, C]
  const at::Tensor kept = x.gather(1, index);                                                   // [B, k, C]
  return x.scatter(1, index, block(kept));                                                      // [B, T, C]
}

}  // namespace zhost::engine
