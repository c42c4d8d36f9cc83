// tests/optim/optimizers_test.cpp: AdamW, Adam, SGD and Lion against float64 references of their
// formulas (max-norm relative error <= 1e-6 after ten steps), flat-shard equivalence (slices step to the
// same bits as the whole), the CPU step being the fused kernel's bits, state bookkeeping and export/import, on the CPU
// and (when present) CUDA; and argument checks.
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/zeros_like.h>
#include <gtest/gtest.h>

#include <cstring>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "host/core/error.hpp"
#include "host/optim/optimizer_type.hpp"
#include "tests/optim/optim_test_support.hpp"
#include "zhost/cpp/error.hpp"
#include "zhost/kit/cpu_optimizer.hpp"
#include "zhost/kit/optimizer.hpp"

namespace zhost::optim {
namespace {

using namespace ::zhost::kit;  // the optimizers and numerics under test are the plugin kit's

using testing::ReferenceState;

constexpr int64_t kSteps = 10;

struct OptimizerCase {
  std::string name;
  OptimizerSpec spec;
};

void PrintTo(const OptimizerCase& optimizer_case, std::ostream* out) { *out << optimizer_case.name; }

OptimizerSpec spec_of(OptimizerKind kind, double lr, double weight_decay) {
  OptimizerSpec spec = OptimizerSpec::defaults(kind);
  spec.lr = lr;
  spec.weight_decay = weight_decay;
  return spec;
}

std::vector<OptimizerCase> optimizer_cases() {
  OptimizerSpec adamw_no_bias_correction = spec_of(OptimizerKind::kAdamW, 1e-3, 0.1);
  adamw_no_bias_correction.bias_correction = false;
  OptimizerSpec sgd_momentum = spec_of(OptimizerKind::kSgd, 0.05, 0.01);
  sgd_momentum.momentum = 0.9;
  OptimizerSpec adam_custom_betas = spec_of(OptimizerKind::kAdam, 2e-3, 0.05);
  adam_custom_betas.beta1 = 0.8;
  adam_custom_betas.beta2 = 0.95;
  adam_custom_betas.eps = 1e-6;
  OptimizerSpec adamw_large_eps = spec_of(OptimizerKind::kAdamW, 1e-2, 0.0);
  adamw_large_eps.eps = 0.05;  // comparable to sqrt(v_hat): where eps enters the formula shows
  return {
      {"AdamW", spec_of(OptimizerKind::kAdamW, 1e-2, 0.1)},
      {"AdamWNoBiasCorrection", adamw_no_bias_correction},
      {"AdamWLargeEps", adamw_large_eps},
      {"Adam", spec_of(OptimizerKind::kAdam, 1e-2, 0.1)},
      {"AdamCustomBetas", adam_custom_betas},
      {"SgdMomentum", sgd_momentum},
      {"SgdPlain", spec_of(OptimizerKind::kSgd, 0.1, 0.0)},
      {"Lion", spec_of(OptimizerKind::kLion, 1e-3, 0.1)},
      {"LionNoDecay", spec_of(OptimizerKind::kLion, 3e-4, 0.0)},
  };
}

// The reference's state vector that corresponds to a zhost state tensor name.
const std::vector<double>& reference_tensor(const ReferenceState& state, const std::string& name) {
  return name == "exp_avg_sq" ? state.second : state.first;
}

// Parameters: the case, and the device its tensors live on (CUDA cases skip without a CUDA device).
class OptimizerTest : public ::testing::TestWithParam<std::tuple<OptimizerCase, at::DeviceType>> {
 protected:
  void SetUp() override {
    if (!testing::device_available(device())) GTEST_SKIP() << "no CUDA device";
  }
  const OptimizerCase& optimizer_case() const { return std::get<0>(GetParam()); }
  const OptimizerSpec& spec() const { return optimizer_case().spec; }
  at::DeviceType device() const { return std::get<1>(GetParam()); }
  at::Tensor random_tensor(int64_t n, uint32_t seed, float scale = 1.0f) const {
    return testing::to_tensor(testing::random_normal(n, seed, scale), device());
  }
};

TEST_P(OptimizerTest, MatchesFloat64ReferenceOverTenSteps) {
  const auto optimizer = make_optimizer(spec());
  for (const int64_t n : {1, 7, 1001, 65537}) {
    const std::vector<float> initial = testing::random_normal(n, 1000 + static_cast<uint32_t>(n));
    at::Tensor param = testing::to_tensor(initial, device());
    std::vector<double> reference_param = testing::widen(initial);
    OptimizerState state;
    ReferenceState reference_state;
    for (int64_t step = 1; step <= kSteps; ++step) {
      const std::vector<float> grad = testing::random_normal(n, static_cast<uint32_t>(7 * step + n), 0.1f);
      const double lr = testing::test_lr(spec().lr, step);
      optimizer->step(param, testing::to_tensor(grad, device()), state, step, lr);
      testing::reference_step(spec(), reference_param, testing::widen(grad), reference_state, step, lr);
    }
    const std::string where = optimizer_case().name + " n=" + std::to_string(n);
    testing::expect_close(testing::to_doubles(param), reference_param, 1e-6, where + " param");
    for (const std::string& name : optimizer->state_names()) {
      EXPECT_EQ(state.get(name).device(), param.device());
      testing::expect_close(testing::to_doubles(state.get(name)), reference_tensor(reference_state, name), 1e-6,
                            where + " " + name);
    }
  }
}

// ZeRO steps a flat partition in sub-groups: the slices must end bit-identical to the whole.
TEST_P(OptimizerTest, SlicesOfAFlatShardStepLikeTheWhole) {
  const auto optimizer = make_optimizer(spec());
  const int64_t n = 65537;
  const std::vector<int64_t> slice_bounds = {0, 5, 30001, n};  // odd sizes: 5, 29996, 35536
  at::Tensor whole = random_tensor(n, 11);
  at::Tensor sliced = whole.clone();
  OptimizerState whole_state;
  std::vector<OptimizerState> slice_states(slice_bounds.size() - 1);
  for (int64_t step = 1; step <= kSteps; ++step) {
    const at::Tensor grad = random_tensor(n, static_cast<uint32_t>(100 + step), 0.1f);
    const double lr = testing::test_lr(spec().lr, step);
    optimizer->step(whole, grad, whole_state, step, lr);
    for (size_t s = 0; s + 1 < slice_bounds.size(); ++s) {
      const int64_t begin = slice_bounds[s];
      const int64_t length = slice_bounds[s + 1] - begin;
      optimizer->step(sliced.narrow(0, begin, length), grad.narrow(0, begin, length), slice_states[s], step, lr);
    }
  }
  EXPECT_TRUE(testing::bitwise_equal(whole, sliced)) << "parameters differ";
  for (const std::string& name : optimizer->state_names()) {
    std::vector<at::Tensor> parts;
    for (const OptimizerState& state : slice_states) parts.push_back(state.get(name));
    EXPECT_TRUE(testing::bitwise_equal(whole_state.get(name), at::cat(parts))) << name << " differs";
  }
}

// Note [One optimizer arithmetic]: on the CPU the kit steps with the fused kernel the CPU tier uses, with
// the gradient factor applied first: the same bits as calling the kernel on the raw buffers.
TEST_P(OptimizerTest, CpuStepIsTheFusedKernelBitForBit) {
  if (device() != at::kCPU) GTEST_SKIP() << "the fused kernel steps CPU tensors only";
  const auto optimizer = make_optimizer(spec());
  const int64_t n = 1003;
  at::Tensor param = random_tensor(n, 21);
  std::vector<float> raw(param.data_ptr<float>(), param.data_ptr<float>() + n);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  OptimizerState state;
  const double grad_scale = 0.3;
  for (int64_t step = 1; step <= 3; ++step) {
    const at::Tensor grad = random_tensor(n, static_cast<uint32_t>(200 + step), 0.1f);
    const double lr = testing::test_lr(spec().lr, step);
    optimizer->step(param, grad, state, step, lr, grad_scale);
    const float* g = grad.data_ptr<float>();
    const auto f32 = cpu_optim::GradType::kF32;
    switch (spec().kind) {
      case OptimizerKind::kAdamW:
      case OptimizerKind::kAdam: {
        cpu_optim::AdamHyper h;
        h.lr = lr;
        h.beta1 = spec().beta1;
        h.beta2 = spec().beta2;
        h.eps = spec().eps;
        h.weight_decay = spec().weight_decay;
        h.decoupled = spec().kind == OptimizerKind::kAdamW;
        h.bias_correction = spec().bias_correction;
        h.step = step;
        h.grad_scale = grad_scale;
        cpu_optim::adam_step(h, raw.data(), g, f32, m.data(), v.data(), nullptr, cpu_optim::Copy16::kNone, n);
        break;
      }
      case OptimizerKind::kSgd: {
        cpu_optim::SgdHyper h;
        h.lr = lr;
        h.momentum = spec().momentum;
        h.weight_decay = spec().weight_decay;
        h.grad_scale = grad_scale;
        cpu_optim::sgd_step(h, raw.data(), g, f32, m.data(), nullptr, cpu_optim::Copy16::kNone, n);
        break;
      }
      case OptimizerKind::kLion: {
        cpu_optim::LionHyper h;
        h.lr = lr;
        h.beta1 = spec().beta1;
        h.beta2 = spec().beta2;
        h.weight_decay = spec().weight_decay;
        h.grad_scale = grad_scale;
        cpu_optim::lion_step(h, raw.data(), g, f32, m.data(), nullptr, cpu_optim::Copy16::kNone, n);
        break;
      }
    }
  }
  EXPECT_EQ(std::memcmp(param.data_ptr<float>(), raw.data(), sizeof(float) * n), 0);
}

TEST_P(OptimizerTest, StateIsAllocatedOnFirstStepAndSurvivesExportImport) {
  const auto optimizer = make_optimizer(spec());
  const int64_t n = 301;
  at::Tensor param = random_tensor(n, 5);
  OptimizerState state;
  EXPECT_TRUE(state.empty());
  auto grad_at = [&](int64_t step) { return random_tensor(n, static_cast<uint32_t>(step), 0.1f); };
  for (int64_t step = 1; step <= 5; ++step) optimizer->step(param, grad_at(step), state, step, spec().lr);
  EXPECT_EQ(state.names(), optimizer->state_names());
  EXPECT_EQ(state.bytes(), optimizer->state_bytes_per_param() * n);

  // Export to host memory (as a checkpoint would), import into a fresh state, and continue both.
  at::Tensor resumed_param = param.clone();
  OptimizerState resumed_state;
  for (const std::string& name : state.names()) {
    optimizer->import_state(resumed_state, name, state.get(name).to(at::kCPU), resumed_param);
    EXPECT_EQ(resumed_state.get(name).device(), param.device());
  }
  for (int64_t step = 6; step <= kSteps; ++step) {
    optimizer->step(param, grad_at(step), state, step, spec().lr);
    optimizer->step(resumed_param, grad_at(step), resumed_state, step, spec().lr);
  }
  EXPECT_TRUE(testing::bitwise_equal(param, resumed_param));
}

INSTANTIATE_TEST_SUITE_P(AllKinds, OptimizerTest,
                         ::testing::Combine(::testing::ValuesIn(optimizer_cases()),
                                            ::testing::Values(at::kCPU, at::kCUDA)),
                         [](const ::testing::TestParamInfo<std::tuple<OptimizerCase, at::DeviceType>>& param_info) {
                           return std::get<0>(param_info.param).name +
                                  testing::device_suffix(std::get<1>(param_info.param));
                         });

// Note [bf16 masters without offload]: Adam on a bf16 tensor keeps bf16 moments, and on the CPU is the fused kernel's
// adam_step_typed bit for bit, with a bf16 or an fp32 gradient; every other kind refuses a bf16 tensor.
TEST(Bf16Adam, CpuStepIsTheTypedKernelBitForBit) {
  const int64_t n = 1003;
  for (const OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kAdam}) {
    for (const at::ScalarType grad_dtype : {at::kBFloat16, at::kFloat}) {
      SCOPED_TRACE(std::string(optimizer_kind_name(kind)) + ", " + c10::toString(grad_dtype) + " gradient");
      const OptimizerSpec spec = spec_of(kind, 1e-2, 0.1);
      const auto optimizer = make_optimizer(spec);
      at::Tensor param = testing::to_tensor(testing::random_normal(n, 21)).to(at::kBFloat16);
      at::Tensor raw = param.clone();
      at::Tensor m = at::zeros_like(param), v = at::zeros_like(param);
      OptimizerState state;
      for (int64_t step = 1; step <= 3; ++step) {
        const at::Tensor grad =
            testing::to_tensor(testing::random_normal(n, static_cast<uint32_t>(200 + step), 0.1f)).to(grad_dtype);
        const double lr = testing::test_lr(spec.lr, step);
        optimizer->step(param, grad, state, step, lr, 0.3);
        cpu_optim::AdamHyper h;
        h.lr = lr;
        h.beta1 = spec.beta1;
        h.beta2 = spec.beta2;
        h.eps = spec.eps;
        h.weight_decay = spec.weight_decay;
        h.decoupled = kind == OptimizerKind::kAdamW;
        h.step = step;
        h.grad_scale = 0.3;
        cpu_optim::adam_step_typed(h, raw.data_ptr(), cpu_optim::StateType::kBf16, grad.data_ptr(),
                                   grad_dtype == at::kBFloat16 ? cpu_optim::GradType::kBf16 : cpu_optim::GradType::kF32,
                                   m.data_ptr(), v.data_ptr(), cpu_optim::StateType::kBf16, nullptr,
                                   cpu_optim::Copy16::kNone, n);
      }
      EXPECT_EQ(param.scalar_type(), at::kBFloat16);
      EXPECT_TRUE(testing::bitwise_equal(param, raw));
      EXPECT_TRUE(testing::bitwise_equal(state.get("exp_avg"), m));
      EXPECT_TRUE(testing::bitwise_equal(state.get("exp_avg_sq"), v));
      EXPECT_EQ(state.get("exp_avg").scalar_type(), at::kBFloat16);
      EXPECT_EQ(state.bytes(), 4 * n);  // two moments, 2 bytes each
    }
  }
}

// A checkpoint's fp32 moment imported into a bf16 state is rounded to nearest even; kinds that step fp32 only, and a
// bf16 param with an fp16 gradient, are refused.
TEST(Bf16Adam, ImportRoundsAndOtherKindsRefuse) {
  const auto adam = make_optimizer(OptimizerSpec::defaults(OptimizerKind::kAdamW));
  const at::Tensor param = testing::to_tensor(testing::random_normal(9, 1)).to(at::kBFloat16);
  const at::Tensor value = testing::to_tensor(testing::random_normal(9, 2));
  OptimizerState state;
  adam->import_state(state, "exp_avg", value, param);
  EXPECT_TRUE(testing::bitwise_equal(state.get("exp_avg"), value.to(at::kBFloat16)));
  EXPECT_THROW(adam->step(param, value.to(at::kHalf), state, 1, 1e-3), sdk::PluginError);
  const at::Tensor square = testing::to_tensor(testing::random_normal(9, 3)).to(at::kBFloat16).reshape({3, 3});
  OptimizerState strided;
  EXPECT_THROW(adam->step(square.t(), square.t(), strided, 1, 1e-3), sdk::PluginError);  // not contiguous
  OptimizerSpec sgd = OptimizerSpec::defaults(OptimizerKind::kSgd);
  sgd.momentum = 0.9;
  for (const OptimizerSpec& spec : {sgd, OptimizerSpec::defaults(OptimizerKind::kLion)}) {
    OptimizerState other;
    EXPECT_FALSE(steps_bf16(spec));
    EXPECT_THROW(make_optimizer(spec)->step(param, param, other, 1, 1e-3), sdk::PluginError)
        << optimizer_kind_name(spec.kind);
  }
}

TEST(OptimizerStateBytes, MatchZeroAccounting) {
  EXPECT_EQ(make_optimizer(OptimizerSpec::defaults(OptimizerKind::kAdamW))->state_bytes_per_param(), 8);
  EXPECT_EQ(make_optimizer(OptimizerSpec::defaults(OptimizerKind::kAdam))->state_bytes_per_param(), 8);
  EXPECT_EQ(make_optimizer(OptimizerSpec::defaults(OptimizerKind::kLion))->state_bytes_per_param(), 4);
  OptimizerSpec sgd = OptimizerSpec::defaults(OptimizerKind::kSgd);
  EXPECT_EQ(make_optimizer(sgd)->state_bytes_per_param(), 0);
  sgd.momentum = 0.9;
  EXPECT_EQ(make_optimizer(sgd)->state_bytes_per_param(), 4);
}

TEST(OptimizerSpecTest, DefaultsAreDeepSpeeds) {
  const OptimizerSpec adam = OptimizerSpec::defaults(OptimizerKind::kAdamW);
  EXPECT_EQ(adam.lr, 1e-3);
  EXPECT_EQ(adam.beta1, 0.9);
  EXPECT_EQ(adam.beta2, 0.999);
  EXPECT_EQ(adam.eps, 1e-8);
  EXPECT_EQ(adam.weight_decay, 0.0);
  EXPECT_TRUE(adam.bias_correction);
  const OptimizerSpec lion = OptimizerSpec::defaults(OptimizerKind::kLion);
  EXPECT_EQ(lion.beta1, 0.9);
  EXPECT_EQ(lion.beta2, 0.99);
}

TEST(ParseOptimizerKind, FollowsDeepSpeedsAdamWMode) {
  EXPECT_EQ(parse_optimizer_kind("Adam"), OptimizerKind::kAdamW);  // adam_w_mode defaults to true
  EXPECT_EQ(parse_optimizer_kind("adam", /*adam_w_mode=*/false), OptimizerKind::kAdam);
  EXPECT_EQ(parse_optimizer_kind("AdamW", /*adam_w_mode=*/false), OptimizerKind::kAdamW);
  EXPECT_EQ(parse_optimizer_kind("sgd"), OptimizerKind::kSgd);
  EXPECT_EQ(parse_optimizer_kind("LION"), OptimizerKind::kLion);
  EXPECT_THROW(parse_optimizer_kind("Adagrad"), UsageError);
  try {
    parse_optimizer_kind("AdamX");
    FAIL() << "AdamX was accepted";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("did you mean"), std::string::npos) << error.what();
  }
}

// The kit refuses a setting out of range with ZHOST_ERR_CONFIG; the host reports it as a usage error.
void expect_config_error(const OptimizerSpec& spec, const std::string& setting) {
  try {
    make_optimizer(spec);
    FAIL() << setting << " out of range was accepted";
  } catch (const sdk::PluginError& error) {
    EXPECT_EQ(error.code(), ZHOST_ERR_CONFIG);
    EXPECT_NE(std::string(error.what()).find(setting), std::string::npos) << error.what();
  }
  EXPECT_THROW(check_optimizer_spec(spec), UsageError);
}

// Lamb (Note [Lamb steps whole parameters]) against the float64 transcription of DeepSpeed 0.19.8's FusedLamb:
// the ratio inside the bounds, clamped at each bound, without bias correction, and a zero parameter (ratio 1).
TEST(Lamb, MatchesFloat64ReferenceOfDeepSpeedsFusedLamb) {
  struct Case {
    const char* name;
    double max_coeff, min_coeff, weight_decay;
    bool bias_correction;
    float scale;  // of the initial parameter: 0 gives the zero-norm case
  };
  for (const Case& c :
       {Case{"inside the bounds", 10.0, 0.01, 0.01, true, 1.0f},
        Case{"clamped above (BERT's 0.3)", 0.3, 0.01, 0.01, false, 1.0f},
        Case{"clamped below", 100.0, 50.0, 0.0, true, 1.0f}, Case{"zero parameter", 10.0, 0.01, 0.0, true, 0.0f}}) {
    OptimizerSpec spec = OptimizerSpec::defaults(OptimizerKind::kLamb);
    spec.lr = 1e-3;
    spec.max_coeff = c.max_coeff;
    spec.min_coeff = c.min_coeff;
    spec.weight_decay = c.weight_decay;
    spec.bias_correction = c.bias_correction;
    const auto optimizer = make_optimizer(spec);
    const int64_t n = 1001;
    const std::vector<float> initial = testing::random_normal(n, 77, c.scale);
    at::Tensor param = testing::to_tensor(initial);
    std::vector<double> reference = testing::widen(initial);
    OptimizerState state;
    ReferenceState reference_state;
    for (int64_t step = 1; step <= kSteps; ++step) {
      const std::vector<float> grad = testing::random_normal(n, static_cast<uint32_t>(31 * step), 0.1f);
      const double lr = testing::test_lr(spec.lr, step);
      optimizer->step(param, testing::to_tensor(grad), state, step, lr);
      testing::reference_lamb_step(spec, reference, testing::widen(grad), reference_state, step, lr);
    }
    testing::expect_close(testing::to_doubles(param), reference, 1e-6, c.name);
    testing::expect_close(testing::to_doubles(state.get("exp_avg_sq")), reference_state.second, 1e-6, c.name);
  }
}

// Flat shards of partitioned parameters cannot be stepped by Lamb: the partitions refuse it by name.
TEST(Lamb, PartitionsThatStepFlatShardsRefuseIt) {
  EXPECT_NO_THROW(require_elementwise(OptimizerSpec::defaults(OptimizerKind::kAdamW), "zero.stage = 2"));
  try {
    require_elementwise(OptimizerSpec::defaults(OptimizerKind::kLamb), "zero.stage = 2");
    ADD_FAILURE() << "Lamb accepted for flat shards";
  } catch (const sdk::PluginError& e) {
    EXPECT_EQ(e.code(), ZHOST_ERR_CONFIG);
    EXPECT_NE(std::string(e.what()).find("zero.stage = 2 steps flat shards"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(make_optimizer(OptimizerSpec::defaults(OptimizerKind::kLamb))->elementwise());
}

// A momentum schedule (OneCycle) hands each step its betas: the CPU's fused kernels and the ATen path use them,
// not the spec's.
TEST(StepScalars, EachStepUsesItsOwnBetas) {
  for (const OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kLion, OptimizerKind::kLamb}) {
    OptimizerSpec spec = OptimizerSpec::defaults(kind);
    spec.lr = 1e-3;
    spec.weight_decay = 0.01;
    const auto optimizer = make_optimizer(spec);
    const std::vector<float> initial = testing::random_normal(513, 5);
    at::Tensor param = testing::to_tensor(initial);
    std::vector<double> reference = testing::widen(initial);
    OptimizerState state;
    ReferenceState reference_state;
    for (int64_t step = 1; step <= kSteps; ++step) {
      const std::vector<float> grad = testing::random_normal(513, static_cast<uint32_t>(step), 0.1f);
      StepScalars scalars = optimizer->scalars(step, spec.lr);
      scalars.beta1 = 0.8 + 0.01 * static_cast<double>(step);  // OneCycle-like: a new beta1 every step
      scalars.beta2 = 0.99;
      optimizer->step(param, testing::to_tensor(grad), state, scalars);
      OptimizerSpec at_step = spec;
      at_step.beta1 = scalars.beta1;
      at_step.beta2 = scalars.beta2;
      if (kind == OptimizerKind::kLamb)
        testing::reference_lamb_step(at_step, reference, testing::widen(grad), reference_state, step, spec.lr);
      else
        testing::reference_step(at_step, reference, testing::widen(grad), reference_state, step, spec.lr);
    }
    testing::expect_close(testing::to_doubles(param), reference, 1e-6, std::string(optimizer_kind_name(kind)));
  }
}

TEST(MakeOptimizer, RejectsOutOfRangeSettings) {
  OptimizerSpec spec = OptimizerSpec::defaults(OptimizerKind::kAdamW);
  spec.beta2 = 1.0;
  expect_config_error(spec, "betas[1]");
  spec = OptimizerSpec::defaults(OptimizerKind::kAdam);
  spec.lr = -1;
  expect_config_error(spec, "lr");
  spec = OptimizerSpec::defaults(OptimizerKind::kSgd);
  spec.momentum = -0.5;
  expect_config_error(spec, "momentum");
  EXPECT_NO_THROW(check_optimizer_spec(OptimizerSpec::defaults(OptimizerKind::kLion)));
  spec = OptimizerSpec::defaults(OptimizerKind::kLamb);
  spec.min_coeff = 2;
  spec.max_coeff = 1;
  expect_config_error(spec, "max_coeff");
}

TEST(OptimizerStep, RejectsBadArguments) {
  const auto optimizer = make_optimizer(OptimizerSpec::defaults(OptimizerKind::kAdamW));
  const at::Tensor param = testing::to_tensor(testing::random_normal(9, 1));
  const at::Tensor grad = testing::to_tensor(testing::random_normal(9, 2));
  OptimizerState state;
  EXPECT_THROW(optimizer->step(param, grad, state, 0, 1e-3), sdk::PluginError);                  // steps count from 1
  EXPECT_THROW(optimizer->step(param, grad.narrow(0, 0, 8), state, 1, 1e-3), sdk::PluginError);  // shape
  EXPECT_THROW(optimizer->step(param.to(at::kHalf), grad, state, 1, 1e-3), sdk::PluginError);    // not fp32
  EXPECT_THROW(optimizer->step(param, grad, state, 1, -1.0), sdk::PluginError);                  // negative lr
  EXPECT_TRUE(state.empty());

  optimizer->step(param, grad, state, 1, 1e-3);
  const at::Tensor other_param = testing::to_tensor(testing::random_normal(11, 3));
  const at::Tensor other_grad = testing::to_tensor(testing::random_normal(11, 4));
  EXPECT_THROW(optimizer->step(other_param, other_grad, state, 2, 1e-3), sdk::PluginError);  // state of another shape
  EXPECT_THROW(state.get("momentum_buffer"), sdk::PluginError);
  EXPECT_THROW(optimizer->import_state(state, "momentum_buffer", param, param), sdk::PluginError);
  EXPECT_THROW(optimizer->import_state(state, "exp_avg", other_param, param), sdk::PluginError);
}

}  // namespace
}  // namespace zhost::optim
