// tests/optim/optim_test_support.hpp: shared helpers for the zhost_optim tests: deterministic random
// data, float64 reference optimizer steps, tolerance checks, and tensor <-> vector conversions.
#pragma once

#include <ATen/Context.h>  // at::hasCUDA
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "zhost/kit/optimizer.hpp"

namespace zhost::optim::testing {

using namespace ::zhost::kit;  // the optimizers under test are the plugin kit's

// n samples of N(0, scale^2) as float32, reproducible from `seed` (independent of LibTorch's RNG).
inline std::vector<float> random_normal(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& value : values) value = normal(engine);
  return values;
}

// A fresh 1-D fp32 tensor holding `values`, on `device`.
inline at::Tensor to_tensor(const std::vector<float>& values, at::DeviceType device = at::kCPU) {
  at::Tensor tensor = at::empty({static_cast<int64_t>(values.size())}, at::TensorOptions().dtype(at::kFloat));
  std::memcpy(tensor.data_ptr<float>(), values.data(), values.size() * sizeof(float));
  return device == at::kCPU ? tensor : tensor.to(device);
}

// Whether tests can run on `device`: the CPU always, CUDA when LibTorch has it and sees a device.
inline bool device_available(at::DeviceType device) { return device == at::kCPU || at::hasCUDA(); }

inline std::string device_suffix(at::DeviceType device) { return device == at::kCUDA ? "_cuda" : "_cpu"; }

// The elements of an fp32 tensor (any shape, strides and device), widened to double.
inline std::vector<double> to_doubles(const at::Tensor& tensor) {
  const at::Tensor flat = tensor.to(at::kCPU).contiguous().view({-1});
  const float* data = flat.data_ptr<float>();
  return std::vector<double>(data, data + flat.numel());
}

inline std::vector<double> widen(const std::vector<float>& values) {
  return std::vector<double>(values.begin(), values.end());
}

// Bitwise equality of two tensors of one shape and dtype (any device).
inline bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  const at::Tensor left = a.to(at::kCPU).contiguous();
  const at::Tensor right = b.to(at::kCPU).contiguous();
  return std::memcmp(left.data_ptr(), right.data_ptr(), static_cast<size_t>(left.nbytes())) == 0;
}

// Checks max|actual - expected| <= rtol * max|expected| (relative error in the max norm) and reports the
// worst element. Elementwise relative error would be meaningless for elements that cancel to near zero
// (p - lr*update, beta*m + (1-beta)*g): their absolute error is set by the operands' scale, not theirs.
inline void expect_close(const std::vector<double>& actual, const std::vector<double>& expected, double rtol,
                         const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double largest = 0;
  for (const double value : expected) largest = std::max(largest, std::abs(value));
  size_t worst = 0;
  double worst_error = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double error = std::abs(actual[i] - expected[i]);
    if (std::isnan(error) || error > worst_error) {
      worst_error = error;
      worst = i;
      if (std::isnan(error)) break;
    }
  }
  EXPECT_LE(worst_error, rtol * largest) << what << ": worst at element " << worst << " of " << expected.size() << ": "
                                         << actual[worst] << " vs " << expected[worst] << "; max-norm relative error "
                                         << worst_error / largest;
}

// The float64 reference of one optimizer's state for one tensor: `first` is exp_avg or momentum_buffer,
// `second` exp_avg_sq.
struct ReferenceState {
  std::vector<double> first;
  std::vector<double> second;
};

// One step of `spec`'s optimizer in float64, written from the published formulas (torch.optim.AdamW,
// torch.optim.Adam, torch.optim.SGD, Lion), independently of zhost_optim's ATen code.
inline void reference_step(const OptimizerSpec& spec, std::vector<double>& param, const std::vector<double>& grad,
                           ReferenceState& state, int64_t step, double lr) {
  const size_t n = param.size();
  if (state.first.empty()) {
    state.first.assign(n, 0.0);
    state.second.assign(n, 0.0);
  }
  const double wd = spec.weight_decay;
  const double steps = static_cast<double>(step);
  const double bias_correction1 = spec.bias_correction ? 1.0 - std::pow(spec.beta1, steps) : 1.0;
  const double bias_correction2 = spec.bias_correction ? 1.0 - std::pow(spec.beta2, steps) : 1.0;
  for (size_t i = 0; i < n; ++i) {
    double& p = param[i];
    double& m = state.first[i];
    double& v = state.second[i];
    switch (spec.kind) {
      case OptimizerKind::kAdamW:
      case OptimizerKind::kAdam: {
        double g = grad[i];
        if (spec.kind == OptimizerKind::kAdam) g += wd * p;
        if (spec.kind == OptimizerKind::kAdamW) p *= 1.0 - lr * wd;
        m = spec.beta1 * m + (1.0 - spec.beta1) * g;
        v = spec.beta2 * v + (1.0 - spec.beta2) * g * g;
        p -= lr * (m / bias_correction1) / (std::sqrt(v / bias_correction2) + spec.eps);
        break;
      }
      case OptimizerKind::kSgd: {
        double direction = grad[i] + wd * p;
        if (spec.momentum != 0) {
          m = step == 1 ? direction : spec.momentum * m + direction;  // torch: the buffer starts at d
          direction = m;
        }
        p -= lr * direction;
        break;
      }
      case OptimizerKind::kLion: {
        p *= 1.0 - lr * wd;
        const double interpolated = spec.beta1 * m + (1.0 - spec.beta1) * grad[i];
        p -= lr * static_cast<double>((interpolated > 0) - (interpolated < 0));
        m = spec.beta2 * m + (1.0 - spec.beta2) * grad[i];
        break;
      }
      case OptimizerKind::kLamb:  // not elementwise: reference_lamb_step
        throw std::logic_error("reference_step: use reference_lamb_step for Lamb");
    }
  }
}

// One Lamb step in float64, from DeepSpeed 0.19.8's FusedLamb kernel (csrc/lamb): Adam's moments without bias
// correction inside the update u = m / (sqrt(v) + eps) + wd * p, the trust ratio |p| / |u| clamped to [min_coeff,
// max_coeff] (1 when a norm is 0), and the bias correction in the step size lr * sqrt(bc2) / bc1.
inline void reference_lamb_step(const OptimizerSpec& spec, std::vector<double>& param, const std::vector<double>& grad,
                                ReferenceState& state, int64_t step, double lr) {
  const size_t n = param.size();
  if (state.first.empty()) {
    state.first.assign(n, 0.0);
    state.second.assign(n, 0.0);
  }
  std::vector<double> update(n);
  double param_square = 0, update_square = 0;
  for (size_t i = 0; i < n; ++i) {
    state.first[i] = spec.beta1 * state.first[i] + (1.0 - spec.beta1) * grad[i];
    state.second[i] = spec.beta2 * state.second[i] + (1.0 - spec.beta2) * grad[i] * grad[i];
    update[i] = state.first[i] / (std::sqrt(state.second[i]) + spec.eps) + spec.weight_decay * param[i];
    param_square += param[i] * param[i];
    update_square += update[i] * update[i];
  }
  double ratio = 1.0;
  if (param_square > 0 && update_square > 0)
    ratio = std::min(spec.max_coeff, std::max(spec.min_coeff, std::sqrt(param_square) / std::sqrt(update_square)));
  const double steps = static_cast<double>(step);
  const double step_size = spec.bias_correction
                               ? lr * std::sqrt(1.0 - std::pow(spec.beta2, steps)) / (1.0 - std::pow(spec.beta1, steps))
                               : lr;
  for (size_t i = 0; i < n; ++i) param[i] -= step_size * ratio * update[i];
}

// The lr of step k in the tests: varies per step so that a step using a stale lr is caught.
inline double test_lr(double base_lr, int64_t step) { return base_lr * (1.0 + 0.25 * static_cast<double>(step % 4)); }

}  // namespace zhost::optim::testing
