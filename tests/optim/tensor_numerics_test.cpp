// tests/optim/tensor_numerics_test.cpp: overflow detection, the global gradient norm against float64,
// clipping (PyTorch's coefficient), and the fp32-master-to-16-bit copy's rounding, on the CPU and (when
// present) CUDA.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "host/core/error.hpp"
#include "tests/optim/optim_test_support.hpp"
#include "tests/support/scoped_env.hpp"
#include "zhost/cpp/error.hpp"
#include "zhost/kit/cpu_isa.hpp"
#include "zhost/kit/grad_numerics.hpp"

namespace zhost::optim {
namespace {

using namespace ::zhost::kit;  // the optimizers and numerics under test are the plugin kit's

double float64_norm(const std::vector<at::Tensor>& tensors) {
  double sum_of_squares = 0;
  for (const at::Tensor& tensor : tensors) {
    for (const double value : testing::to_doubles(tensor.to(at::kFloat))) sum_of_squares += value * value;
  }
  return std::sqrt(sum_of_squares);
}

// Three gradients of odd sizes and scales, on the CPU (so tests can plant values before moving them).
std::vector<at::Tensor> sample_grads() {
  return {testing::to_tensor(testing::random_normal(1001, 1)).view({7, 11, 13}),
          testing::to_tensor(testing::random_normal(65537, 2, 0.01f)),
          testing::to_tensor(testing::random_normal(3, 3, 100.0f))};
}

std::vector<at::Tensor> moved_to(const std::vector<at::Tensor>& tensors, at::DeviceType device) {
  std::vector<at::Tensor> moved;
  for (const at::Tensor& tensor : tensors) moved.push_back(tensor.to(device));
  return moved;
}

class TensorNumericsTest : public ::testing::TestWithParam<at::DeviceType> {
 protected:
  void SetUp() override {
    if (!testing::device_available(device())) GTEST_SKIP() << "no CUDA device";
  }
  at::DeviceType device() const { return GetParam(); }
  at::TensorOptions options(at::ScalarType dtype) const { return at::TensorOptions().dtype(dtype).device(device()); }
};

TEST_P(TensorNumericsTest, GlobalNormMatchesFloat64SumOfSquares) {
  const std::vector<at::Tensor> grads = moved_to(sample_grads(), device());
  const double expected = float64_norm(grads);
  EXPECT_NEAR(global_grad_norm(grads), expected, 1e-6 * expected);
  const at::Tensor squared = squared_norm(grads);
  EXPECT_EQ(squared.dim(), 0);
  EXPECT_EQ(squared.scalar_type(), at::kDouble);
  EXPECT_EQ(squared.device().type(), device());
  EXPECT_NEAR(squared.item<double>(), expected * expected, 2e-6 * expected * expected);
}

TEST_P(TensorNumericsTest, GlobalNormReadsSixteenBitTensorsInFp32) {
  // 300 values of 20 in fp16: the sum of squares (120000) is past fp16's range, not fp32's.
  const at::Tensor bf16 = testing::to_tensor(testing::random_normal(99, 4), device()).to(at::kBFloat16);
  const std::vector<at::Tensor> grads = {at::full({300}, 20.0, options(at::kHalf)), bf16};
  const double expected = float64_norm(grads);
  EXPECT_NEAR(global_grad_norm(grads), expected, 1e-6 * expected);
}

TEST_P(TensorNumericsTest, GlobalNormOfNothingIsZeroAndNonFiniteShowsThrough) {
  EXPECT_EQ(global_grad_norm({}), 0.0);
  std::vector<at::Tensor> grads = sample_grads();
  grads[1].data_ptr<float>()[12345] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(global_grad_norm(moved_to(grads, device()))));
}

TEST_P(TensorNumericsTest, HasInfOrNanFindsAnyNonFiniteElement) {
  std::vector<at::Tensor> grads = sample_grads();
  EXPECT_FALSE(has_inf_or_nan(moved_to(grads, device())));
  EXPECT_FALSE(has_inf_or_nan({}));
  grads[1].data_ptr<float>()[65536] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(has_inf_or_nan(moved_to(grads, device())));
  grads[1].data_ptr<float>()[65536] = -std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(has_inf_or_nan(moved_to(grads, device())));
  const at::Tensor half = at::full({5}, 70000.0, options(at::kFloat)).to(at::kHalf);
  EXPECT_TRUE(has_inf_or_nan({half}));  // overflowed to inf in the cast
}

TEST_P(TensorNumericsTest, ClipGradNormScalesAboveMaxNormAndLeavesOthersAlone) {
  std::vector<at::Tensor> grads = moved_to(sample_grads(), device());
  const double norm_before = float64_norm(grads);
  const std::vector<double> first_before = testing::to_doubles(grads[0]);
  const double returned = clip_grad_norm(grads, 1.0);
  EXPECT_NEAR(returned, norm_before, 1e-6 * norm_before);
  EXPECT_NEAR(float64_norm(grads), 1.0, 1e-6);
  const double coefficient = clip_coefficient(returned, 1.0);
  const std::vector<double> first_after = testing::to_doubles(grads[0]);
  for (size_t i = 0; i < first_after.size(); ++i) {
    ASSERT_NEAR(first_after[i], first_before[i] * coefficient, 1e-6 * std::abs(first_before[i]) + 1e-12);
  }

  const std::vector<at::Tensor> small = {testing::to_tensor(testing::random_normal(17, 9, 0.01f), device())};
  const at::Tensor untouched = small[0].clone();
  clip_grad_norm(small, 1.0);
  EXPECT_TRUE(testing::bitwise_equal(small[0], untouched));
}

TEST_P(TensorNumericsTest, CopyMasterToModelRoundsToNearestEvenIntoAViewOfAFlatBuffer) {
  // bf16 keeps 8 significant bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 (ties to even: 1),
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6 (ties to even: 1 + 2^-6).
  const std::vector<float> master_values = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f, 1.0f + 0x1p-7f + 0x1p-10f, 0.0f,
                                            1e-3f};
  const at::Tensor master = testing::to_tensor(master_values, device());
  for (const at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    at::Tensor flat_model = at::full({10}, 7.0, options(dtype));
    const at::Tensor partition = flat_model.narrow(0, 2, 6).view({2, 3});
    copy_master_to_model(partition, master);
    const std::vector<double> written = testing::to_doubles(flat_model.narrow(0, 2, 6).to(at::kFloat));
    const std::vector<double> expected_rounding = testing::to_doubles(master.to(dtype).to(at::kFloat));
    EXPECT_EQ(written, expected_rounding);
    EXPECT_EQ(flat_model[0].item<double>(), 7.0);  // outside the partition: untouched
    EXPECT_EQ(flat_model[9].item<double>(), 7.0);
    if (dtype == at::kBFloat16) {
      EXPECT_EQ(written[0], 1.0);
      EXPECT_EQ(written[1], 1.0 + 0x1p-6);
      EXPECT_EQ(written[3], 1.0 + 0x1p-7);
    }
  }
  const at::Tensor wrong_size = at::empty({5}, options(at::kBFloat16));
  EXPECT_THROW(copy_master_to_model(wrong_size, master), sdk::PluginError);
}

INSTANTIATE_TEST_SUITE_P(Devices, TensorNumericsTest, ::testing::Values(at::kCPU, at::kCUDA),
                         [](const ::testing::TestParamInfo<at::DeviceType>& param_info) {
                           return testing::device_suffix(param_info.param).substr(1);
                         });

// Note [Exact gradient norm]: the limbs of any split of the elements, summed, give the bits of the whole;
// the result is within 1e-12 of float64's, and follows inf and NaN as overflow.
double exact_norm_over(const std::vector<std::vector<at::Tensor>>& parts) {
  float max = 0;
  for (const auto& part : parts) max = std::max(max, max_abs(part));
  SquareSumLimbs total;
  for (const auto& part : parts) {
    const SquareSumLimbs limbs = square_sum_limbs(part, max);
    for (int i = 0; i < kSquareSumLimbs; ++i) total.limb[i] += limbs.limb[i];
  }
  return exact_norm(total, max);
}

TEST(ExactNorm, IsIndependentOfHowTheElementsAreSplit) {
  // Magnitudes from 1e-30 to 1e4 in one vector, so that a floating-point sum would depend on its order.
  std::vector<float> values = testing::random_normal(100003, 7);
  for (size_t i = 0; i < values.size(); ++i) values[i] *= std::pow(10.0f, static_cast<float>(i % 35) - 30.0f);
  const at::Tensor whole = testing::to_tensor(values);
  const double expected = float64_norm({whole});
  const double one = exact_norm_over({{whole}});
  EXPECT_NEAR(one, expected, 1e-12 * expected);
  // Uneven shards across "ranks", some holding several tensors, one none; and reversed.
  const double split = exact_norm_over({{whole.narrow(0, 0, 5)},
                                        {whole.narrow(0, 5, 40000), whole.narrow(0, 40005, 3)},
                                        {},
                                        {whole.narrow(0, 40008, 59995)}});
  const double reversed = exact_norm_over({{whole.narrow(0, 40008, 59995)}, {whole.narrow(0, 0, 40008)}});
  EXPECT_EQ(one, split);
  EXPECT_EQ(one, reversed);
  // 16-bit tensors are read as their fp32 values.
  const at::Tensor bf16 = whole.to(at::kBFloat16);
  EXPECT_EQ(exact_norm_over({{bf16}}), exact_norm_over({{bf16.to(at::kFloat)}}));
}

TEST(ExactNorm, ZeroGradientsAndOverflow) {
  const at::Tensor zeros = at::zeros({17}, at::kFloat);
  EXPECT_EQ(exact_norm_over({{zeros}}), 0.0);
  at::Tensor with_nan = at::zeros({17}, at::kFloat);
  with_nan[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isinf(max_abs({with_nan})));
  at::Tensor with_inf = at::zeros({17}, at::kFloat);
  with_inf[16] = -std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isinf(max_abs({with_inf})));
  EXPECT_TRUE(std::isinf(exact_norm_over({{with_inf}})));
}

// The limbs of Note [Exact gradient norm] computed independently of the kit: each element's floor(x^2 * 2^s)
// from its integer significand and exponent (x = m 2^k, so x^2 2^s = m^2 2^(2k + s)), in 128-bit integers.
SquareSumLimbs reference_limbs(const std::vector<float>& values, float max_abs) {
  __extension__ typedef unsigned __int128 Uint128;
  const int s = 80 - 2 * std::ilogb(max_abs) - 2;
  Uint128 sum = 0;
  for (const float x : values) {
    if (x == 0) continue;
    int exponent = 0;
    const double fraction = std::frexp(static_cast<double>(std::fabs(x)), &exponent);  // x = fraction 2^exponent
    const auto m = static_cast<uint64_t>(std::ldexp(fraction, 24));                    // 24-bit significand
    const int shift = 2 * (exponent - 24) + s;                                         // x^2 2^s = m^2 2^shift
    const Uint128 square = static_cast<Uint128>(m) * m;
    sum += shift >= 0 ? square << shift : (-shift >= 128 ? 0 : square >> -shift);
  }
  SquareSumLimbs limbs;
  for (int i = 0; i < 4; ++i) limbs.limb[i] = static_cast<int64_t>((sum >> (32 * i)) & 0xFFFFFFFFu);
  return limbs;
}

// The norm's passes are vectorized per ISA (sdk/kit/src/grad_norm_kernels.hpp); each must give the plain
// formula's limbs, to the bit, on every size around its blocks, magnitudes from subnormal to 1e30, both
// signs and zeros, and a million values near the maximum; and every one must report an inf or NaN anywhere
// as overflow.
TEST(ExactNorm, EveryIsaGivesThePlainFormulasLimbs) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> decade(-44, 30);
  std::uniform_real_distribution<float> near_one(0.75f, 1.0f);
  for (const int64_t n :
       {int64_t{1}, int64_t{7}, int64_t{4095}, int64_t{4096}, int64_t{4097}, int64_t{100003}, int64_t{1000003}}) {
    std::vector<float> values(static_cast<size_t>(n));
    // The largest case holds values near the maximum only, so that its sum of squares fills the 128-bit total
    // (and would overflow fp64's exact range in a lane that skipped the kernel's blocks).
    const bool dense = n > 100003;
    for (float& v : values)
      v = dense ? near_one(rng) * 1e30f : unit(rng) * std::pow(10.0f, static_cast<float>(decade(rng)));
    values[0] = -0.0f;
    if (n > 1) values[static_cast<size_t>(n) / 2] = -1e30f;  // the largest, negative
    float expected_max = 0;
    for (const float v : values) expected_max = std::max(expected_max, std::fabs(v));
    const SquareSumLimbs expected = reference_limbs(values, expected_max);
    const at::Tensor tensor = testing::to_tensor(values);
    for (const cpu_optim::Isa isa : {cpu_optim::Isa::kScalar, cpu_optim::Isa::kAvx2, cpu_optim::Isa::kAvx512}) {
      if (!cpu_optim::isa_supported(isa)) continue;
      const ::zhost::testing::ScopedEnv env("ZHOST_CPU_ISA", cpu_optim::isa_name(isa));
      SCOPED_TRACE(std::string(cpu_optim::isa_name(isa)) + ", n = " + std::to_string(n));
      ASSERT_EQ(max_abs({tensor}), expected_max);
      const SquareSumLimbs limbs = square_sum_limbs({tensor}, expected_max);
      for (int i = 0; i < kSquareSumLimbs; ++i) EXPECT_EQ(limbs.limb[i], expected.limb[i]) << "limb " << i;
      at::Tensor with_nan = tensor.clone();
      with_nan[n - 1] = std::numeric_limits<float>::quiet_NaN();
      EXPECT_TRUE(std::isinf(max_abs({with_nan})));
    }
  }
}

// On a GPU the passes run where the gradients are (sdk/kit/src/grad_norm_cuda.cu) and must give the host's
// limbs to the bit, for every gradient dtype, sizes around a warp and a block, magnitudes from subnormal to
// 1e30, several tensors at once, and report an inf or NaN anywhere as overflow.
TEST(TensorNumerics, ExactNormOnCudaIsTheHostsBitForBit) {
  if (!testing::device_available(at::kCUDA)) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> decade(-44, 30);
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (const int64_t n : {int64_t{1}, int64_t{31}, int64_t{257}, int64_t{100003}, int64_t{3000017}}) {
      std::vector<float> values(static_cast<size_t>(n));
      for (float& v : values) v = unit(rng) * std::pow(10.0f, static_cast<float>(decade(rng)));
      values[0] = -0.0f;
      const at::Tensor whole = testing::to_tensor(values).to(dtype);  // fp16 turns the extremes to 0 and inf
      const at::Tensor host = whole.isfinite().all().item<bool>() ? whole : whole.nan_to_num(0, 1e4, -1e4);
      const std::vector<at::Tensor> on_host = {host.narrow(0, 0, n / 3), host.narrow(0, n / 3, n - n / 3)};
      const std::vector<at::Tensor> on_gpu = {on_host[0].to(at::kCUDA), on_host[1].to(at::kCUDA)};
      SCOPED_TRACE(std::string(c10::toString(dtype)) + ", n = " + std::to_string(n));
      const float max = max_abs(on_host);
      ASSERT_EQ(max_abs(on_gpu), max);
      const SquareSumLimbs expected = square_sum_limbs(on_host, max), limbs = square_sum_limbs(on_gpu, max);
      for (int i = 0; i < kSquareSumLimbs; ++i) EXPECT_EQ(limbs.limb[i], expected.limb[i]) << "limb " << i;
      at::Tensor with_nan = on_gpu[1].clone();
      with_nan[with_nan.numel() - 1] = std::numeric_limits<float>::quiet_NaN();
      EXPECT_TRUE(std::isinf(max_abs({on_gpu[0], with_nan})));
    }
  }
}

TEST(ClipCoefficient, IsPyTorchs) {
  EXPECT_DOUBLE_EQ(clip_coefficient(10.0, 1.0), 1.0 / (10.0 + 1e-6));
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0);
  EXPECT_EQ(clip_coefficient(1e9, 0.0), 1.0);  // gradient_clipping 0: off
  EXPECT_EQ(clip_coefficient(std::numeric_limits<double>::infinity(), 1.0), 0.0);
  EXPECT_TRUE(std::isnan(clip_coefficient(std::numeric_limits<double>::quiet_NaN(), 1.0)));
}

TEST(TensorNumerics, MixedCpuAndCudaDevicesAreRejected) {
  if (!testing::device_available(at::kCUDA)) GTEST_SKIP() << "no CUDA device";
  const std::vector<at::Tensor> mixed = {testing::to_tensor({1.0f}), testing::to_tensor({2.0f}, at::kCUDA)};
  EXPECT_THROW(global_grad_norm(mixed), sdk::PluginError);
  EXPECT_THROW(has_inf_or_nan(mixed), sdk::PluginError);
}

}  // namespace
}  // namespace zhost::optim
