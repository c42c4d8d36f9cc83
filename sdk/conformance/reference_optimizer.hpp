// sdk/conformance/reference_optimizer.hpp: the conformance kit's scalar reference of a computing tier's
// optimizer step (AdamW, Adam, SGD, Lion), in fp32 with the constants computed in double and rounded once,
// in the operation order of sdk/kit/cpu_optimizer/cpu_optimizer_kernels.hpp (the kit is compiled without FMA
// contraction), so that a tier using that order matches it bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "zhost/optimizer.h"

namespace zhost::conformance {

struct ReferenceGroup {
  zhost_optimizer_desc optimizer{};
  std::vector<float> master, exp_avg, exp_avg_sq;  // exp_avg: SGD's momentum buffer
  bool momentum_started = false;                   // SGD: the first step sets the buffer to the gradient
};

// One step on elements [begin, end) of `group` with gradient grad[begin..end) * grad_scale; `step` is the
// 1-based count of applied steps (bias correction).
void reference_step(ReferenceGroup& group, const std::vector<float>& grad, int64_t begin, int64_t end, int64_t step,
                    double lr, double grad_scale);

}  // namespace zhost::conformance
