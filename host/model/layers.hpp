// host/model/layers.hpp: the functional building blocks shared by the built-in models (internal to
// zhost_model). Each is a pure function of its inputs and the parameter tensors it is given, so that a
// block can be recomputed for activation checkpointing. Shapes: B batch, T time, C width, H query heads,
// KV key/value heads, D head dimension, F feed-forward width.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "host/model/model.hpp"

namespace zhost::model::layers {

// x: [B, T, H*D] -> [B, H, T, D]
at::Tensor split_heads(const at::Tensor& x, int64_t heads);
// x: [B, H, T, D] -> [B, T, H*D]
at::Tensor merge_heads(const at::Tensor& x);

// Causal scaled-dot-product attention, scale 1/sqrt(D), softmax accumulated in fp32, by `kernel` (Note [Attention
// kernels]). q: [B, H, T, D], k and v: [B, KV, T, D] with H % KV == 0 (grouped-query attention: key/value head j
// serves query heads j*H/KV .. (j+1)*H/KV - 1, as HF's repeat_kv) -> [B, H, T, D]
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, Attention kernel);

// Rotary position embedding tables for positions 0..T-1 (HF Llama "rotate_half" layout: frequency i is
// used by dimensions i and i + D/2). -> cos, sin: [T, D] in `like`'s dtype and device.
struct Rotary {
  at::Tensor cos;
  at::Tensor sin;
};
Rotary rotary_tables(int64_t seq_len, int64_t head_dim, double theta, const at::Tensor& like);
// x: [B, H, T, D] -> x * cos + rotate_half(x) * sin, same shape
at::Tensor apply_rotary(const at::Tensor& x, const Rotary& rotary);

// x: [..., C] -> x / sqrt(mean(x^2) + eps) * weight, normalised in fp32 (as HF LlamaRMSNorm)
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
// x: [..., C] -> LayerNorm over C with weight and bias: [C]
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps);

enum class Activation { kRelu, kGeluTanh };
// Two-layer feed-forward: x: [..., C] -> fc [F, C] (+ bias [F]) -> activation -> proj [C, F] (+ bias [C])
// -> [..., C]. Undefined bias tensors mean no bias.
at::Tensor feed_forward(const at::Tensor& x, const at::Tensor& fc_weight, const at::Tensor& fc_bias,
                        Activation activation, const at::Tensor& proj_weight, const at::Tensor& proj_bias);
// SwiGLU feed-forward (no biases): x: [..., C] -> down(silu(gate(x)) * up(x)) -> [..., C];
// gate and up: [F, C], down: [C, F]
at::Tensor swiglu_feed_forward(const at::Tensor& x, const at::Tensor& gate_weight, const at::Tensor& up_weight,
                               const at::Tensor& down_weight);

}  // namespace zhost::model::layers
