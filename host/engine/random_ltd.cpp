// host/engine/random_ltd.cpp: the schedule, the draw and the gather/scatter of Note [Random-LTD].
#include "host/engine/random_ltd.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/rand.h>

#include <algorithm>
#include <cmath>

#include "host/core/error.hpp"
#include "host/model/model.hpp"

namespace zhost::engine {

int64_t random_ltd_tokens(const RandomLtdSpec& spec, int64_t step) {
  // DeepSpeed's fixed_linear value at global_steps = step - 1 (its __fixed_root_get_value with root_degree 1).
  const double progress = static_cast<double>(step - 1) / static_cast<double>(spec.require_steps);
  auto value = static_cast<int64_t>(std::floor(progress * static_cast<double>(spec.max_tokens - spec.min_tokens) +
                                               static_cast<double>(spec.min_tokens)));
  value -= value % spec.tokens_per_increase;
  return std::min(value, spec.max_tokens);
}

int64_t random_ltd_last_ramp_step(const RandomLtdSpec& spec, int64_t seq) {
  const int64_t end = std::min(spec.max_tokens, seq);
  int64_t step = 1;
  while (step <= spec.require_steps && random_ltd_tokens(spec, step) < end) ++step;
  return step;
}

void check_random_ltd_model(const RandomLtdSpec& spec, const model::Model& model) {
  if (!spec.enabled()) return;
  const model::ModelSpec& m = model.spec();
  if (!model.positions_from_embedding())
    fail_usage(
        "random_ltd.layers is set, and {} computes rotary positions in every layer, which would renumber the tokens "
        "a layer keeps; random-LTD is built for models with learned positions (gpt, GPT-2): remove random_ltd.layers",
        m.path.empty() ? m.type : m.path);
  if (spec.layers.back() >= m.layers)
    fail_usage("random_ltd.layers names layer {}, and the model has {} (0 to {}); fix random_ltd.layers",
               spec.layers.back(), m.layers, m.layers - 1);
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
