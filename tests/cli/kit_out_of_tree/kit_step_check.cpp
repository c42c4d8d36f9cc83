// tests/cli/kit_out_of_tree/kit_step_check.cpp: one AdamW step of the installed plugin kit on a DLPack
// view of plain memory, against AdamW's closed form for the first step; exits 1 on a mismatch.
#include <ATen/ops/from_blob.h>

#include <cmath>
#include <cstdio>

#include "zhost/kit/dlpack_views.hpp"
#include "zhost/kit/optimizer.hpp"

int main() {
  float param[3] = {1.0f, -2.0f, 0.5f};
  float grad[3] = {0.25f, 0.5f, -1.0f};
  int64_t shape[1] = {3};
  DLTensor param_view{param, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, nullptr, 0};
  const at::Tensor p = zhost::kit::tensor_view(param_view);
  const at::Tensor g = at::from_blob(grad, {3});
  zhost::kit::OptimizerSpec spec = zhost::kit::OptimizerSpec::defaults(zhost::kit::OptimizerKind::kAdamW);
  spec.weight_decay = 0.1;
  const auto optimizer = zhost::kit::make_optimizer(spec);
  zhost::kit::OptimizerState state;
  const double lr = 0.01;
  const float before[3] = {param[0], param[1], param[2]};
  optimizer->step(p, g, state, 1, lr);
  for (int i = 0; i < 3; ++i) {
    // First AdamW step with bias correction: m_hat = g, v_hat = g^2, so p' = p(1 - lr wd) - lr g/(|g| + eps).
    const double expected = before[i] * (1 - lr * 0.1) - lr * grad[i] / (std::fabs(grad[i]) + 1e-8);
    if (std::fabs(param[i] - expected) > 1e-6) {
      std::printf("FAIL: element %d is %.9g, AdamW's first step gives %.9g\n", i, param[i], expected);
      return 1;
    }
  }
  std::printf("PASS: the installed kit's AdamW step matches the closed form\n");
  return 0;
}
