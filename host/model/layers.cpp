// host/model/layers.cpp: the functional building blocks shared by the built-in models (see layers.hpp).
#include "host/model/layers.hpp"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/baddbmm.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/outer.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/softmax.h>

#include <cmath>
#include <limits>

namespace zhost::model::layers {

at::Tensor split_heads(const at::Tensor& x, int64_t heads) {
  const int64_t batch = x.size(0), time = x.size(1), head_dim = x.size(2) / heads;
  return x.view({batch, time, heads, head_dim}).transpose(1, 2);  // [B, H, T, D]
}

at::Tensor merge_heads(const at::Tensor& x) {
  const int64_t batch = x.size(0), heads = x.size(1), time = x.size(2), head_dim = x.size(3);
  return x.transpose(1, 2).reshape({batch, time, heads * head_dim});  // [B, T, H*D]
}

// k: [B, KV, T, D] -> [B, KV*repeats, T, D], each key/value head repeated for its group of query heads.
static at::Tensor repeat_kv(const at::Tensor& k, int64_t repeats) {
  if (repeats == 1) return k;
  const int64_t batch = k.size(0), kv_heads = k.size(1), time = k.size(2), head_dim = k.size(3);
  return k.unsqueeze(2)
      .expand({batch, kv_heads, repeats, time, head_dim})
      .reshape({batch, kv_heads * repeats, time, head_dim});
}

// Note [Attention kernels]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// `model.attention` picks how the built-in models compute causal attention; both compute the same function to fp32
// rounding (softmax accumulated in fp32 either way) and differ in speed, memory and repeatability:
// - "sdpa" (default): ATen's scaled_dot_product_attention(is_causal), which dispatches to a fused kernel (flash
//   attention on CPU and on CUDA for fp16/bf16, memory-efficient or cuDNN otherwise) that never materialises the
//   [B, H, T, T] scores: activation memory O(T) per row instead of O(T^2). On the 2-core CPU, one thread, forward
//   plus backward: about even at T = 64 in fp32, 2x faster at T = 1024, 2.6x in bf16 (bench/gpu/RESULTS.md has
//   the GPU's figures). On CPU its backward is a fixed loop per (batch, head): bit for bit repeatable. On CUDA,
//   PyTorch's flash backward adds dQ with atomics unless torch.use_deterministic_algorithms is on, so two runs may
//   differ in the last bits.
// - "eager" (HF's name for the explicit form): scores = mask + q k^T / sqrt(D) in one baddbmm (the -inf causal
//   mask is the product's starting value, the scale its alpha), softmax in fp32, then probs v: O(T^2) memory,
//   bit for bit repeatable on every device.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, Attention kernel) {
  const int64_t batch = q.size(0), heads = q.size(1), time = q.size(2), head_dim = q.size(3);
  const int64_t repeats = heads / k.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  if (kernel == Attention::kSdpa) {
    return at::scaled_dot_product_attention(q, repeat_kv(k, repeats), repeat_kv(v, repeats), /*attn_mask=*/{},
                                            /*dropout_p=*/0.0, /*is_causal=*/true, scale);  // [B, H, T, D]
  }
  // [B, H, T, D] -> [B*H, T, D]: the batched products below take 3-d operands
  const at::Tensor queries = q.reshape({batch * heads, time, head_dim});
  const at::Tensor keys = repeat_kv(k, repeats).reshape({batch * heads, time, head_dim});
  const at::Tensor values = repeat_kv(v, repeats).reshape({batch * heads, time, head_dim});
  // the causal mask: 0 where position t may attend (positions <= t), -inf after
  const at::Tensor mask = at::full({time, time}, -std::numeric_limits<double>::infinity(), q.options()).triu(1);
  const at::Tensor scores = at::baddbmm(mask, queries, keys.transpose(1, 2), /*beta=*/1.0, scale);  // [B*H, T, T]
  const at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
  return at::bmm(probs, values).view({batch, heads, time, head_dim});  // [B, H, T, D]
}

Rotary rotary_tables(int64_t seq_len, int64_t head_dim, double theta, const at::Tensor& like) {
  const auto f32 = like.options().dtype(at::kFloat);
  const at::Tensor inv_freq =
      at::pow(theta, at::arange(0, head_dim, 2, f32) / static_cast<double>(head_dim)).reciprocal();  // [D/2]
  const at::Tensor angles = at::outer(at::arange(seq_len, f32), inv_freq);                           // [T, D/2]
  const at::Tensor both_halves = at::cat({angles, angles}, -1);                                      // [T, D]
  return {both_halves.cos().to(like.scalar_type()), both_halves.sin().to(like.scalar_type())};
}

// x: [..., D] -> [-x2, x1] where x1, x2 are the two halves of the last dimension
static at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

at::Tensor apply_rotary(const at::Tensor& x, const Rotary& rotary) {
  return x * rotary.cos + rotate_half(x) * rotary.sin;
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor normalised = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normalised.to(x.scalar_type());
}

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  return at::layer_norm(x, {x.size(-1)}, weight, bias, eps);
}

at::Tensor feed_forward(const at::Tensor& x, const at::Tensor& fc_weight, const at::Tensor& fc_bias,
                        Activation activation, const at::Tensor& proj_weight, const at::Tensor& proj_bias) {
  at::Tensor hidden = at::linear(x, fc_weight, fc_bias);  // [..., F]
  switch (activation) {
    case Activation::kRelu:
      hidden = at::relu(hidden);
      break;
    case Activation::kGeluTanh:
      hidden = at::gelu(hidden, "tanh");
      break;
  }
  return at::linear(hidden, proj_weight, proj_bias);  // [..., C]
}

at::Tensor swiglu_feed_forward(const at::Tensor& x, const at::Tensor& gate_weight, const at::Tensor& up_weight,
                               const at::Tensor& down_weight) {
  const at::Tensor hidden = at::silu(at::linear(x, gate_weight)) * at::linear(x, up_weight);  // [..., F]
  return at::linear(hidden, down_weight);                                                     // [..., C]
}

}  // namespace zhost::model::layers
