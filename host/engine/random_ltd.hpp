// host/engine/random_ltd.hpp: random layerwise token dropping (DeepSpeed's random-LTD) for the trainer: how many
// tokens the chosen layers keep at a step, which ones, and a block run on them alone.
//
// Note [Random-LTD]
// Random-LTD (Yao et al. 2022, arXiv:2211.11586; DeepSpeed's data_efficiency.data_routing.random_ltd, zhost's
// random_ltd table) runs each chosen transformer layer on a random subset of every sample's tokens; the other tokens
// pass that layer unchanged, as the residual stream passes a skipped layer. As in DeepSpeed (gpt_sample_tokens):
// - the subset is drawn anew for every micro-batch, layer and sample, uniformly without replacement, and kept in
//   sequence order; the layer attends causally among the tokens kept (DeepSpeed's mask of the first k positions);
// - its size k follows the fixed_linear schedule: the forward passes of optimizer step s (1-based) keep
//     k = min(max_tokens, v - v mod tokens_per_increase),  v = floor((s-1) / require_steps * (max - min) + min)
//   (DeepSpeed's update_seq(global_steps) before each forward), and the layer runs whole while k >= the sequence.
// zhost draws the subsets from (seed, step, micro-batch, layer, rank) alone, not from a generator's running state,
// so activation checkpointing recomputes a layer on the same tokens and a resumed job draws the subsets the
// uninterrupted one drew. Built for models whose blocks see positions only through the embedding
// (Model::positions_from_embedding: gpt, GPT-2, mlp): a block of a rotary model (llama, HF Llama and Mistral)
// would number the kept tokens 0..k-1, so zhost refuses them there. Not compared with DeepSpeed: its sampling
// kernel (random_ltd op) builds for CUDA only.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace zhost::model {
class Model;
}

namespace zhost::engine {

struct RandomLtdSpec {
  std::vector<int64_t> layers;      // transformer layers (0-based; layer i is block i+1), ascending; empty: off
  int64_t min_tokens = 1;           // the schedule's start (DeepSpeed's min_value)
  int64_t max_tokens = 0;           // its end (max_value); 0: the model's seq_len
  int64_t require_steps = 1;        // steps from min to max (schedule_config.require_steps)
  int64_t tokens_per_increase = 1;  // k is a multiple of it (schedule_config.seq_per_step)
  bool enabled() const { return !layers.empty(); }
  // Whether block b (layer b - 1) is one of the layers.
  bool drops_tokens_in(size_t block) const {
    return block > 0 && std::binary_search(layers.begin(), layers.end(), static_cast<int64_t>(block) - 1);
  }
};

// Refuses (UsageError, one line saying what to change) random-LTD on a model it is not built for: rotary
// positions (Model::positions_from_embedding false), or layers the model lacks. `config check` runs it on an HF
// folder's model, and the trainer on every model, so both refuse alike.
void check_random_ltd_model(const RandomLtdSpec& spec, const model::Model& model);

// k, the tokens the chosen layers keep in the forward passes of optimizer step `step` (1-based; Note [Random-LTD]).
int64_t random_ltd_tokens(const RandomLtdSpec& spec, int64_t step);
// The first step whose layers keep all of `seq` tokens (or reach max_tokens), for the setup line.
int64_t random_ltd_last_ramp_step(const RandomLtdSpec& spec, int64_t seq);

// The positions each of `batch` samples keeps: [batch, keep] int64 on the CPU, ascending in each row, drawn
// uniformly without replacement from [0, seq) by a generator seeded with `key`. keep <= seq.
at::Tensor random_ltd_positions(uint64_t key, int64_t batch, int64_t seq, int64_t keep);

// x [B, T, C] with block(x's rows at `positions` ([B, k] int64, any device)) written back in their place: the
// other tokens are x's. Differentiable in x and through block.
at::Tensor run_on_kept_tokens(const at::Tensor& x, const at::Tensor& positions,
                              const std::function<at::Tensor(const at::Tensor&)>& block);

}  // namespace zhost::engine
