// sdk/conformance/reference_optimizer.cpp: the kit's scalar optimizer reference (see the header).
#include "reference_optimizer.hpp"

#include <cmath>
#include <stdexcept>

namespace zhost::conformance {
namespace {

float sign_of(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }

void adam(ReferenceGroup& g, const std::vector<float>& grad, int64_t begin, int64_t end, int64_t step, double lr,
          double grad_scale) {
  const zhost_optimizer_desc& o = g.optimizer;
  const bool decoupled = o.kind == ZHOST_OPTIMIZER_ADAMW;
  const double bc1 = o.bias_correction ? 1.0 - std::pow(o.beta1, static_cast<double>(step)) : 1.0;
  const double bc2 = o.bias_correction ? 1.0 - std::pow(o.beta2, static_cast<double>(step)) : 1.0;
  const float scale = static_cast<float>(grad_scale);
  const float decay = static_cast<float>(decoupled ? 1.0 - lr * o.weight_decay : 1.0);
  const bool l2 = !decoupled && o.weight_decay != 0;
  const float wd = static_cast<float>(o.weight_decay);
  const float beta1 = static_cast<float>(o.beta1), one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  const float beta2 = static_cast<float>(o.beta2), one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float eps = static_cast<float>(o.eps);
  const float step_size = static_cast<float>(-lr / bc1);
  for (int64_t i = begin; i < end; ++i) {
    float& p = g.master[i];
    float& m = g.exp_avg[i];
    float& v = g.exp_avg_sq[i];
    float gi = grad[i] * scale;
    if (l2)
      gi = gi + wd * p;
    else
      p = p * decay;
    m = beta1 * m + one_minus_beta1 * gi;
    v = beta2 * v + one_minus_beta2 * (gi * gi);
    const float denom = std::sqrt(v) * inv_sqrt_bc2 + eps;
    p = p + step_size * (m / denom);
  }
}

void lion(ReferenceGroup& g, const std::vector<float>& grad, int64_t begin, int64_t end, double lr, double grad_scale) {
  const zhost_optimizer_desc& o = g.optimizer;
  const float scale = static_cast<float>(grad_scale), decay = static_cast<float>(1.0 - lr * o.weight_decay);
  const float lr_f = static_cast<float>(lr);
  const float beta1 = static_cast<float>(o.beta1), one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  const float beta2 = static_cast<float>(o.beta2), one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  for (int64_t i = begin; i < end; ++i) {
    float& p = g.master[i];
    float& m = g.exp_avg[i];
    const float gi = grad[i] * scale;
    p = p * decay;
    p = p - lr_f * sign_of(beta1 * m + one_minus_beta1 * gi);
    m = beta2 * m + one_minus_beta2 * gi;
  }
}

// torch.optim.SGD without dampening or Nesterov: L2 decay into the gradient, momentum buffer.
void sgd(ReferenceGroup& g, const std::vector<float>& grad, int64_t begin, int64_t end, double lr, double grad_scale) {
  const zhost_optimizer_desc& o = g.optimizer;
  const float scale = static_cast<float>(grad_scale), wd = static_cast<float>(o.weight_decay);
  const float momentum = static_cast<float>(o.momentum), lr_f = static_cast<float>(lr);
  for (int64_t i = begin; i < end; ++i) {
    float& p = g.master[i];
    float gi = grad[i] * scale;
    if (o.weight_decay != 0) gi = gi + wd * p;
    if (o.momentum != 0) {
      float& buf = g.exp_avg[i];
      buf = g.momentum_started ? momentum * buf + gi : gi;
      gi = buf;
    }
    p = p - lr_f * gi;
  }
}

}  // namespace

void reference_step(ReferenceGroup& group, const std::vector<float>& grad, int64_t begin, int64_t end, int64_t step,
                    double lr, double grad_scale) {
  switch (group.optimizer.kind) {
    case ZHOST_OPTIMIZER_ADAMW:
    case ZHOST_OPTIMIZER_ADAM:
      adam(group, grad, begin, end, step, lr, grad_scale);
      break;
    case ZHOST_OPTIMIZER_LION:
      lion(group, grad, begin, end, lr, grad_scale);
      break;
    case ZHOST_OPTIMIZER_SGD:
      sgd(group, grad, begin, end, lr, grad_scale);
      break;
    case ZHOST_OPTIMIZER_LAMB:  // not elementwise: no tier steps it (Note [Lamb steps whole parameters])
      throw std::logic_error("the conformance reference has no Lamb: tiers step flat groups");
  }
}

}  // namespace zhost::conformance
