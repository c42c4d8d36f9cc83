// tests/offload_cpu/cpu_optimizer_test.cpp: the fused CPU optimizer (zhost/kit/cpu_optimizer.hpp)
// against a float64 reference of the same updates, on every ISA path, every gradient type and every
// 16-bit copy; plus agreement between paths and thread counts, the 16-bit conversions on special values,
// and the ZHOST_CPU_ISA variable.
#include "zhost/kit/cpu_optimizer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/half_reference.hpp"
#include "tests/support/scoped_env.hpp"

namespace zhost::cpu_optim {
namespace {

constexpr int kSteps = 5;
// Allowed error, relative to max(|reference|, magnitude floor); see ReferenceState.
constexpr double kRelativeTolerance = 1e-6;

// ---- The test's own 16-bit conversions, by value (tests/support/half_reference.hpp) ----

using zhost::testing::bits_of;
using zhost::testing::decode_bf16;
using zhost::testing::decode_f16;
using zhost::testing::float_of;
using zhost::testing::round_to_bf16;
using zhost::testing::round_to_f16;

uint16_t round_to(Copy16 type, float x) { return type == Copy16::kBf16 ? round_to_bf16(x) : round_to_f16(x); }

// ---- Buffers ----

// n elements starting `offset` elements into the allocation (so SIMD loads are unaligned), followed by
// guard elements that must stay untouched.
template <class T>
class Padded {
 public:
  static constexpr int64_t kGuard = 40;
  Padded(int64_t n, int64_t offset, T sentinel) : n_(n), offset_(offset), sentinel_(sentinel) {
    storage_.assign(static_cast<size_t>(offset + n + kGuard), sentinel);
  }
  T* data() { return storage_.data() + offset_; }
  const T* data() const { return storage_.data() + offset_; }
  T& operator[](int64_t i) { return data()[i]; }
  const T& operator[](int64_t i) const { return data()[i]; }
  bool guards_intact() const {
    for (int64_t i = 0; i < offset_; ++i) {
      if (std::memcmp(&storage_[static_cast<size_t>(i)], &sentinel_, sizeof(T)) != 0) return false;
    }
    for (int64_t i = offset_ + n_; i < static_cast<int64_t>(storage_.size()); ++i) {
      if (std::memcmp(&storage_[static_cast<size_t>(i)], &sentinel_, sizeof(T)) != 0) return false;
    }
    return true;
  }

 private:
  int64_t n_, offset_;
  T sentinel_;
  std::vector<T> storage_;
};

const float kFloatSentinel = 12345.678f;
const uint16_t kHalfSentinel = 0x5A5A;

// A gradient of one type, misaligned, and the exact value of each of its elements.
struct Gradient {
  Gradient(GradType grad_type, const std::vector<float>& values)
      : type(grad_type),
        floats(static_cast<int64_t>(values.size()), 3, kFloatSentinel),
        halves(static_cast<int64_t>(values.size()), 1, kHalfSentinel),
        exact(values.size()) {
    for (size_t i = 0; i < values.size(); ++i) {
      const int64_t k = static_cast<int64_t>(i);
      if (type == GradType::kF32) {
        floats[k] = values[i];
        exact[i] = values[i];
      } else if (type == GradType::kBf16) {
        halves[k] = round_to_bf16(values[i]);
        exact[i] = decode_bf16(halves[k]);
      } else {
        halves[k] = round_to_f16(values[i]);
        exact[i] = decode_f16(halves[k]);
      }
    }
  }
  const void* data() const { return type == GradType::kF32 ? static_cast<const void*>(floats.data()) : halves.data(); }
  GradType type;
  Padded<float> floats;
  Padded<uint16_t> halves;
  std::vector<double> exact;
};

// Random data of one length: parameters, moments as mid-training (non-zero), a gradient per step.
struct Problem {
  std::vector<float> param, exp_avg, exp_avg_sq;
  std::vector<std::vector<float>> grads;
};

Problem make_problem(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Problem problem;
  const size_t size = static_cast<size_t>(n);
  problem.param.resize(size);
  problem.exp_avg.resize(size);
  problem.exp_avg_sq.resize(size);
  for (size_t i = 0; i < size; ++i) {
    problem.param[i] = normal(rng);
    problem.exp_avg[i] = 0.1f * normal(rng);
    problem.exp_avg_sq[i] = 0.01f * std::fabs(normal(rng));
  }
  problem.grads.resize(kSteps, std::vector<float>(size));
  for (std::vector<float>& grad : problem.grads) {
    for (float& g : grad) g = normal(rng);
  }
  return problem;
}

// ---- The variants and the float64 reference ----

enum class Variant { kAdamW, kAdamL2, kAdamNoBiasCorrection, kLion, kSgdMomentum };
const Variant kVariants[] = {Variant::kAdamW, Variant::kAdamL2, Variant::kAdamNoBiasCorrection, Variant::kLion,
                             Variant::kSgdMomentum};
const GradType kGradTypes[] = {GradType::kF32, GradType::kBf16, GradType::kF16};
const Copy16 kCopyTypes[] = {Copy16::kNone, Copy16::kBf16, Copy16::kF16};

const char* variant_name(Variant variant) {
  switch (variant) {
    case Variant::kAdamW:
      return "AdamW";
    case Variant::kAdamL2:
      return "Adam-L2";
    case Variant::kAdamNoBiasCorrection:
      return "AdamW-no-bias-correction";
    case Variant::kLion:
      return "Lion";
    case Variant::kSgdMomentum:
      return "SGD-momentum-L2";
  }
  return "?";
}
const char* grad_name(GradType type) {
  return type == GradType::kF32 ? "fp32" : (type == GradType::kBf16 ? "bf16" : "fp16");
}
const char* copy_name(Copy16 type) {
  return type == Copy16::kNone ? "none" : (type == Copy16::kBf16 ? "bf16" : "fp16");
}

// Weight decay large enough that both decay forms visibly matter.
AdamHyper adam_hyper(Variant variant, int64_t step) {
  AdamHyper hyper;
  hyper.lr = variant == Variant::kAdamNoBiasCorrection ? 1e-3 : 1e-2;
  hyper.weight_decay = 0.1;
  hyper.decoupled = variant != Variant::kAdamL2;
  hyper.bias_correction = variant != Variant::kAdamNoBiasCorrection;
  hyper.step = step;
  return hyper;
}

LionHyper lion_hyper() {
  LionHyper hyper;
  hyper.lr = 1e-3;
  hyper.weight_decay = 0.1;
  return hyper;
}

SgdHyper sgd_hyper() {
  SgdHyper hyper;
  hyper.lr = 1e-2;
  hyper.momentum = 0.9;
  hyper.weight_decay = 0.1;
  return hyper;
}

// The float64 reference, and beside each quantity its magnitude floor: the same recurrence run on the
// absolute values of every term (e.g. m' = b1*|m| + (1-b1)*|g|). Why that floor: each fp32 operation errs
// by at most 2^-24 of the magnitudes of its operands, so a correct fp32 update differs from float64 by a
// few 2^-24 of the floor, however much the terms cancel. Where they do not cancel (v always; p and m
// mostly) the floor is |reference| itself. A tensor-wide floor (say 1e-3 of the rms) does not work: when
// beta1*m and (1-beta1)*g nearly cancel, m is tiny but its rounding error is that of its terms (measured
// on 10^6 random elements over 5 steps: errors up to 3e-4 of a floor at 1e-3 of the rms, 5e-6 of one at
// 0.1 of the rms; at most 4e-7 of this floor). 1e-6 is 16.8 x 2^-24; the worst bound after 5 steps is
// about 12 x 2^-24 (about two roundings plus a rounded constant per quantity per step, accumulating).
struct ReferenceState {
  std::vector<double> p, m, v, p_floor, m_floor, v_floor;
  // Lion: elements whose sign(beta1*m + (1-beta1)*g) is within rounding of 0 in this step, so the fp32
  // result may take either sign; p before its sign step, to settle on the sign the fp32 result took.
  std::map<int64_t, double> lion_ambiguous;

  explicit ReferenceState(const Problem& problem) {
    p.assign(problem.param.begin(), problem.param.end());
    m.assign(problem.exp_avg.begin(), problem.exp_avg.end());
    v.assign(problem.exp_avg_sq.begin(), problem.exp_avg_sq.end());
    p_floor.resize(p.size());
    m_floor.resize(m.size());
    std::transform(p.begin(), p.end(), p_floor.begin(), [](double x) { return std::fabs(x); });
    std::transform(m.begin(), m.end(), m_floor.begin(), [](double x) { return std::fabs(x); });
    v_floor = v;
  }

  void adam_step(const AdamHyper& h, const std::vector<double>& grad) {
    const double bc1 = h.bias_correction ? 1 - std::pow(h.beta1, static_cast<double>(h.step)) : 1;
    const double bc2 = h.bias_correction ? 1 - std::pow(h.beta2, static_cast<double>(h.step)) : 1;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i];
      double g_floor = std::fabs(g);
      if (h.decoupled) {
        p[i] *= 1 - h.lr * h.weight_decay;
        p_floor[i] *= 1 - h.lr * h.weight_decay;
      } else {
        g += h.weight_decay * p[i];
        g_floor += h.weight_decay * p_floor[i];
      }
      m[i] = h.beta1 * m[i] + (1 - h.beta1) * g;
      m_floor[i] = h.beta1 * m_floor[i] + (1 - h.beta1) * g_floor;
      v[i] = h.beta2 * v[i] + (1 - h.beta2) * g * g;
      v_floor[i] = h.beta2 * v_floor[i] + (1 - h.beta2) * g_floor * g_floor;
      const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + h.eps;
      p[i] -= h.lr / bc1 * m[i] / denom;
      p_floor[i] += h.lr / bc1 * m_floor[i] / denom;
    }
  }

  void lion_step(const LionHyper& h, const std::vector<double>& grad) {
    lion_ambiguous.clear();
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = grad[i];
      p[i] *= 1 - h.lr * h.weight_decay;
      p_floor[i] *= 1 - h.lr * h.weight_decay;
      const double direction = h.beta1 * m[i] + (1 - h.beta1) * g;
      const double direction_floor = h.beta1 * m_floor[i] + (1 - h.beta1) * std::fabs(g);
      if (std::fabs(direction) <= kRelativeTolerance * direction_floor) {
        lion_ambiguous[static_cast<int64_t>(i)] = p[i];
      }
      p[i] -= h.lr * ((direction > 0) - (direction < 0));
      p_floor[i] += h.lr;
      m[i] = h.beta2 * m[i] + (1 - h.beta2) * g;
      m_floor[i] = h.beta2 * m_floor[i] + (1 - h.beta2) * std::fabs(g);
    }
  }

  // SGD with momentum and L2 decay; the momentum buffer is m.
  void sgd_step(const SgdHyper& h, const std::vector<double>& grad) {
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = grad[i] + h.weight_decay * p[i];
      const double g_floor = std::fabs(grad[i]) + h.weight_decay * p_floor[i];
      m[i] = h.momentum * m[i] + g;
      m_floor[i] = h.momentum * m_floor[i] + g_floor;
      p[i] -= h.lr * m[i];
      p_floor[i] += h.lr * m_floor[i];
    }
  }

  // Lion: for the ambiguous elements, follow the sign the fp32 result took.
  void settle_lion_signs(const LionHyper& h, const float* param) {
    for (const auto& [i, before] : lion_ambiguous) {
      double best = before;
      for (const double sign : {-1.0, 0.0, 1.0}) {
        const double candidate = before - h.lr * sign;
        if (std::fabs(candidate - param[i]) < std::fabs(best - param[i])) best = candidate;
      }
      p[static_cast<size_t>(i)] = best;
    }
  }
};

// Counts the elements of `got` off the reference by more than the tolerance; reports the first few.
int64_t count_off(const char* what, const float* got, const std::vector<double>& ref,
                  const std::vector<double>& floor) {
  int64_t off = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double error = std::fabs(static_cast<double>(got[i]) - ref[i]);
    const double allowed = kRelativeTolerance * std::max(std::fabs(ref[i]), floor[i]);
    if (!(error <= allowed)) {
      if (++off <= 3) {
        ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", reference " << ref[i] << ", floor " << floor[i]
                      << ": relative error " << error / std::max(std::fabs(ref[i]), floor[i]);
      }
    }
  }
  return off;
}

// The implementation's buffers for one run.
struct State {
  State(const Problem& problem, Copy16 copy_type)
      : copy16_type(copy_type),
        n(static_cast<int64_t>(problem.param.size())),
        param(n, 1, kFloatSentinel),
        exp_avg(n, 2, kFloatSentinel),
        exp_avg_sq(n, 3, kFloatSentinel),
        copy16(n, 1, kHalfSentinel) {
    std::copy(problem.param.begin(), problem.param.end(), param.data());
    std::copy(problem.exp_avg.begin(), problem.exp_avg.end(), exp_avg.data());
    std::copy(problem.exp_avg_sq.begin(), problem.exp_avg_sq.end(), exp_avg_sq.data());
  }

  void step(Variant variant, int64_t step_count, const Gradient& grad, const StepOptions& options) {
    void* copy = copy16_type == Copy16::kNone ? nullptr : copy16.data();
    if (variant == Variant::kLion) {
      lion_step(lion_hyper(), param.data(), grad.data(), grad.type, exp_avg.data(), copy, copy16_type, n, options);
    } else if (variant == Variant::kSgdMomentum) {
      sgd_step(sgd_hyper(), param.data(), grad.data(), grad.type, exp_avg.data(), copy, copy16_type, n, options);
    } else {
      adam_step(adam_hyper(variant, step_count), param.data(), grad.data(), grad.type, exp_avg.data(),
                exp_avg_sq.data(), copy, copy16_type, n, options);
    }
  }

  bool same_bits(const State& other) const {
    const auto same = [&](const auto& a, const auto& b, size_t bytes) {
      return std::memcmp(a.data(), b.data(), static_cast<size_t>(n) * bytes) == 0;
    };
    return same(param, other.param, 4) && same(exp_avg, other.exp_avg, 4) && same(exp_avg_sq, other.exp_avg_sq, 4) &&
           same(copy16, other.copy16, 2);
  }

  Copy16 copy16_type;
  int64_t n;
  Padded<float> param, exp_avg, exp_avg_sq;
  Padded<uint16_t> copy16;
};

const std::vector<int64_t> kLengths = {1, 7, 15, 16, 17, 33, 1000, 100003};

const Problem& problem_of_length(int64_t n) {
  static std::map<int64_t, Problem> cache;
  auto it = cache.find(n);
  if (it == cache.end()) it = cache.emplace(n, make_problem(n, 1000 + static_cast<uint64_t>(n))).first;
  return it->second;
}

// Runs every length x gradient type x variant x copy type for kSteps steps through `options`, checking
// after the first and the last step against the float64 reference.
void check_against_reference(const StepOptions& options) {
  for (const int64_t n : kLengths) {
    const Problem& problem = problem_of_length(n);
    for (const GradType grad_type : kGradTypes) {
      std::vector<Gradient> grads;
      for (const std::vector<float>& values : problem.grads) grads.emplace_back(grad_type, values);
      for (const Variant variant : kVariants) {
        ReferenceState ref(problem);
        std::vector<State> states;
        for (const Copy16 copy_type : kCopyTypes) states.emplace_back(problem, copy_type);
        for (int step = 1; step <= kSteps; ++step) {
          const Gradient& grad = grads[static_cast<size_t>(step - 1)];
          if (variant == Variant::kLion) {
            ref.lion_step(lion_hyper(), grad.exact);
          } else if (variant == Variant::kSgdMomentum) {
            ref.sgd_step(sgd_hyper(), grad.exact);
          } else {
            ref.adam_step(adam_hyper(variant, step), grad.exact);
          }
          for (State& state : states) state.step(variant, step, grad, options);
          if (variant == Variant::kLion) {
            ref.settle_lion_signs(lion_hyper(), states[0].param.data());
            EXPECT_LE(static_cast<int64_t>(ref.lion_ambiguous.size()), 1 + n / 100000)
                << "more Lion signs within rounding of 0 than random data should give";
          }
          if (step != 1 && step != kSteps) continue;
          for (const State& state : states) {
            std::ostringstream where;
            where << variant_name(variant) << ", grad " << grad_name(grad_type) << ", copy "
                  << copy_name(state.copy16_type) << ", n " << n << ", after step " << step;
            SCOPED_TRACE(where.str());
            int64_t off = count_off("param", state.param.data(), ref.p, ref.p_floor);
            off += count_off("exp_avg", state.exp_avg.data(), ref.m, ref.m_floor);
            if (variant != Variant::kLion && variant != Variant::kSgdMomentum) {
              off += count_off("exp_avg_sq", state.exp_avg_sq.data(), ref.v, ref.v_floor);
            }
            EXPECT_EQ(off, 0);
            int64_t copies_off = 0;
            for (int64_t i = 0; state.copy16_type != Copy16::kNone && i < n; ++i) {
              copies_off += state.copy16[i] != round_to(state.copy16_type, state.param[i]);
            }
            EXPECT_EQ(copies_off, 0) << "16-bit copies not the correctly rounded fp32 result";
            EXPECT_TRUE(state.param.guards_intact() && state.exp_avg.guards_intact() &&
                        state.exp_avg_sq.guards_intact() && state.copy16.guards_intact())
                << "wrote outside its buffers";
            if (::testing::Test::HasFailure()) return;  // one broken case is enough to read
          }
        }
      }
    }
  }
}

using zhost::testing::ScopedEnv;

std::string skip_message(Isa isa) {
  return std::string("this CPU lacks ") + isa_name(isa) + " (best here: " + isa_name(best_isa()) + ")";
}

// ---- The math, per ISA path ----

// Path::kViaEnv: no StepOptions.isa; ZHOST_CPU_ISA=scalar picks the path (scalar: never the default on a
// SIMD CPU, and always supported).
enum class Path { kScalar, kAvx2, kAvx512, kViaEnv };

class CpuOptimizerMath : public ::testing::TestWithParam<Path> {};

TEST_P(CpuOptimizerMath, MatchesFloat64ReferenceForEveryTypeAndLength) {
  StepOptions options;
  std::optional<ScopedEnv> env;
  switch (GetParam()) {
    case Path::kScalar:
      options.isa = Isa::kScalar;
      break;
    case Path::kAvx2:
      options.isa = Isa::kAvx2;
      break;
    case Path::kAvx512:
      options.isa = Isa::kAvx512;
      break;
    case Path::kViaEnv:
      env.emplace("ZHOST_CPU_ISA", "scalar");
      ASSERT_EQ(selected_isa(), Isa::kScalar);
      break;
  }
  if (options.isa && !isa_supported(*options.isa)) GTEST_SKIP() << skip_message(*options.isa);
  check_against_reference(options);
}

std::string path_name(const ::testing::TestParamInfo<Path>& info) {
  switch (info.param) {
    case Path::kScalar:
      return "scalar";
    case Path::kAvx2:
      return "avx2";
    case Path::kAvx512:
      return "avx512";
    case Path::kViaEnv:
      return "via_env";
  }
  return "unknown";
}

void PrintTo(Path path, std::ostream* out) { *out << path_name(::testing::TestParamInfo<Path>(path, 0)); }

INSTANTIATE_TEST_SUITE_P(Paths, CpuOptimizerMath,
                         ::testing::Values(Path::kScalar, Path::kAvx2, Path::kAvx512, Path::kViaEnv), path_name);

// ---- Agreement: paths, threads ----

std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (const Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

// Runs kSteps steps of every variant x type combination once per option set, comparing the bits after
// each step with the first option set's.
void expect_same_bits(int64_t n, const std::vector<StepOptions>& option_sets) {
  const Problem& problem = problem_of_length(n);
  for (const Variant variant : kVariants) {
    for (const GradType grad_type : kGradTypes) {
      std::vector<Gradient> grads;
      for (const std::vector<float>& values : problem.grads) grads.emplace_back(grad_type, values);
      for (const Copy16 copy_type : kCopyTypes) {
        std::vector<State> states;
        for (size_t k = 0; k < option_sets.size(); ++k) states.emplace_back(problem, copy_type);
        for (int step = 1; step <= kSteps; ++step) {
          for (size_t k = 0; k < option_sets.size(); ++k) {
            states[k].step(variant, step, grads[static_cast<size_t>(step - 1)], option_sets[k]);
            EXPECT_TRUE(states[k].same_bits(states[0]))
                << variant_name(variant) << ", grad " << grad_name(grad_type) << ", copy " << copy_name(copy_type)
                << ", step " << step << ": option set " << k << " differs";
          }
        }
      }
    }
  }
}

// The paths perform the same IEEE operations in the same order (no FMA contraction), so they agree to
// the bit, which is tighter than agreeing within fp32 rounding.
TEST(CpuOptimizerAgreement, IsaPathsGiveIdenticalBits) {
  const std::vector<Isa> isas = supported_isas();
  if (isas.size() < 2) GTEST_SKIP() << "only the scalar path runs on this CPU";
  std::vector<StepOptions> option_sets;
  for (const Isa isa : isas) {
    StepOptions options;
    options.isa = isa;
    option_sets.push_back(options);
  }
  expect_same_bits(100003, option_sets);
}

TEST(CpuOptimizerAgreement, OneAndTwoThreadsGiveIdenticalBits) {
  for (const Isa isa : supported_isas()) {
    SCOPED_TRACE(isa_name(isa));
    std::vector<StepOptions> option_sets(3);
    for (StepOptions& options : option_sets) options.isa = isa;
    option_sets[0].threads = 1;
    option_sets[1].threads = 2;
    option_sets[1].tile = 4099;  // uneven tiles, many per thread
    option_sets[2].threads = 2;
    option_sets[2].tile = 17;
    expect_same_bits(100003, option_sets);
  }
}

// grad_scale folds averaging and clipping into the pass: stepping g with grad_scale 0.25 gives the bits
// of stepping g * 0.25 (exact in fp32) with grad_scale 1, on every path, for Adam, AdamW and Lion.
TEST(CpuOptimizerGradScale, EqualsAPreScaledGradient) {
  constexpr int64_t n = 1037;
  std::vector<float> grad(n), scaled(n), init(n);
  for (int64_t i = 0; i < n; ++i) {
    grad[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
    scaled[i] = grad[i] * 0.25f;
    init[i] = std::cos(0.11f * static_cast<float>(i));
  }
  for (const Isa isa : supported_isas()) {
    SCOPED_TRACE(isa_name(isa));
    StepOptions options;
    options.isa = isa;
    for (const bool decoupled : {true, false}) {
      std::vector<float> p1 = init, m1(n), v1(n), p2 = init, m2(n), v2(n);
      AdamHyper with_scale;
      with_scale.weight_decay = 0.1;
      with_scale.decoupled = decoupled;
      with_scale.grad_scale = 0.25;
      AdamHyper plain = with_scale;
      plain.grad_scale = 1.0;
      adam_step(with_scale, p1.data(), grad.data(), GradType::kF32, m1.data(), v1.data(), nullptr, Copy16::kNone, n,
                options);
      adam_step(plain, p2.data(), scaled.data(), GradType::kF32, m2.data(), v2.data(), nullptr, Copy16::kNone, n,
                options);
      EXPECT_EQ(p1, p2) << (decoupled ? "AdamW" : "Adam");
      EXPECT_EQ(v1, v2) << (decoupled ? "AdamW" : "Adam");
    }
    std::vector<float> p1 = init, m1(n), p2 = init, m2(n);
    LionHyper lion;
    lion.grad_scale = 0.25;
    lion_step(lion, p1.data(), grad.data(), GradType::kF32, m1.data(), nullptr, Copy16::kNone, n, options);
    lion.grad_scale = 1.0;
    lion_step(lion, p2.data(), scaled.data(), GradType::kF32, m2.data(), nullptr, Copy16::kNone, n, options);
    EXPECT_EQ(m1, m2) << "Lion";
  }
}

// Lion's sign: sign(0) = 0 (for +0 and -0) and, as torch's sign, sign(NaN) = 0, so those elements keep
// their parameter; random data almost never gives an exact 0, so this checks it directly.
TEST(CpuOptimizerLion, ZeroAndNanDirectionsLeaveTheParameter) {
  const int64_t n = 37;  // two AVX-512 blocks and a tail
  for (const Isa isa : supported_isas()) {
    SCOPED_TRACE(isa_name(isa));
    std::vector<float> param(n), grad(n), m(n, 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      param[static_cast<size_t>(i)] = 1.0f + static_cast<float>(i);
      const float pattern[] = {0.0f, -0.0f, 2.0f, -3.0f, std::numeric_limits<float>::quiet_NaN()};
      grad[static_cast<size_t>(i)] = pattern[i % 5];
    }
    LionHyper hyper;
    hyper.lr = 0.5;
    StepOptions options;
    options.isa = isa;
    lion_step(hyper, param.data(), grad.data(), GradType::kF32, m.data(), nullptr, Copy16::kNone, n, options);
    for (int64_t i = 0; i < n; ++i) {
      const float before = 1.0f + static_cast<float>(i);
      const float expected = i % 5 == 2 ? before - 0.5f : (i % 5 == 3 ? before + 0.5f : before);
      EXPECT_EQ(param[static_cast<size_t>(i)], expected) << "element " << i;
    }
  }
}

// Two host threads stepping their own buffers at once share the one pool (one job at a time) and get
// the bits of a lone call.
TEST(CpuOptimizerAgreement, ConcurrentCallersGetTheBitsOfLoneCalls) {
  const Problem& problem = problem_of_length(100003);
  const Gradient grad(GradType::kF32, problem.grads[0]);
  StepOptions options;
  options.threads = 2;
  options.tile = 1000;
  std::vector<State> states(4, State(problem, Copy16::kBf16));
  std::vector<std::thread> callers;
  for (State& state : states) {
    callers.emplace_back([&state, &grad, &options] {
      for (int step = 1; step <= 3; ++step) state.step(Variant::kAdamW, 1, grad, options);
    });
  }
  for (std::thread& caller : callers) caller.join();
  State alone(problem, Copy16::kBf16);
  for (int step = 1; step <= 3; ++step) alone.step(Variant::kAdamW, 1, grad, options);
  for (const State& state : states) EXPECT_TRUE(state.same_bits(alone));
}

// ---- The 16-bit copies on special values ----

// Values chosen for the conversions: zeros, fp32 subnormals, fp16 subnormals and the edge of its range,
// exact ties for bf16 and fp16 (odd and even), the largest finite values, infinities and NaNs, then
// random bit patterns (NaNs included).
std::vector<float> special_values() {
  std::vector<uint32_t> patterns = {
      0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000,  // zeros, fp32 subnormals, smallest normal
      0x33000000, 0x33000001, 0x337FFFFF, 0x33800000, 0x33C00000,  // 2^-25 (tie to 0), around 2^-24
      0x387FC000, 0x387FE000, 0x38800000, 0x38801000, 0x38803000,  // fp16 subnormal/normal boundary, ties
      0x3F800000, 0x3F808000, 0x3F818000, 0x3F800001, 0x3F807FFF,  // bf16 ties to even, below a tie
      0x3F801000, 0x3F803000, 0x3F800FFF, 0x3F801001,              // fp16 ties, around a tie
      0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FFFFF, 0x47800000,  // 65504, just below/at 65520, 65536
      0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0xFF7FFFFF,              // bf16 rounding to its max, to inf
      0x7F800000, 0xFF800000,                                      // infinities
      0x7FC00000, 0xFFC00000, 0x7FC12345, 0x7FBFFFFF, 0x7F800001,  // quiet and signaling NaNs
  };
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) patterns.push_back(rng());
  std::vector<float> values;
  for (const uint32_t pattern : patterns) values.push_back(float_of(pattern));
  return values;
}

// A step with lr = 0 and zero gradient and moments leaves p as it is (p*1 + (-0)*(0/1)), so the copy of
// p is the conversion of the special values themselves.
TEST(CpuOptimizerCopies, SpecialValuesRoundCorrectlyOnEveryPath) {
  const std::vector<float> values = special_values();
  const int64_t n = static_cast<int64_t>(values.size());
  AdamHyper hyper;
  hyper.lr = 0;
  hyper.eps = 1;
  for (const Isa isa : supported_isas()) {
    for (const Copy16 copy_type : {Copy16::kBf16, Copy16::kF16}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + ", copy " + copy_name(copy_type));
      std::vector<float> param = values, grad(values.size(), 0.0f), m(values.size(), 0.0f), v = m;
      std::vector<uint16_t> copy(values.size());
      StepOptions options;
      options.isa = isa;
      adam_step(hyper, param.data(), grad.data(), GradType::kF32, m.data(), v.data(), copy.data(), copy_type, n,
                options);
      int64_t off = 0;
      for (size_t i = 0; i < values.size(); ++i) {
        if (std::isnan(values[i])) {
          EXPECT_TRUE(std::isnan(param[i]));
        } else {
          EXPECT_EQ(bits_of(param[i]), bits_of(values[i])) << "lr = 0 changed element " << i;
        }
        if (copy[i] != round_to(copy_type, param[i]) && ++off <= 5) {
          ADD_FAILURE() << "element " << i << " (bits 0x" << std::hex << bits_of(param[i]) << "): copy 0x" << copy[i]
                        << ", correctly rounded 0x" << round_to(copy_type, param[i]) << std::dec;
        }
      }
      EXPECT_EQ(off, 0);
    }
  }
}

// The test's own conversions against a few values known by heart.
TEST(CpuOptimizerCopies, ReferenceConversionsKnownValues) {
  EXPECT_EQ(round_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(round_to_bf16(float_of(0x3F808000)), 0x3F80);  // tie, to even
  EXPECT_EQ(round_to_bf16(float_of(0x3F818000)), 0x3F82);  // tie, to even (up)
  EXPECT_EQ(round_to_bf16(float_of(0x7F7FFFFF)), 0x7F80);  // overflows to inf
  EXPECT_EQ(round_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(round_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(round_to_f16(65519.996f), 0x7BFF);
  EXPECT_EQ(round_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(round_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(round_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie, to even (zero)
  EXPECT_EQ(round_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // tie, to even
  EXPECT_EQ(round_to_f16(-std::ldexp(1.0f, -14)), 0x8400);
  EXPECT_EQ(decode_f16(0x3555), 0.333251953125);  // (1024 + 0x155) * 2^(13 - 25)
}

// ---- bf16 master weights and moments (Note [bf16 master weights]) ----

// adam_step_typed on 16-bit masters is, step after step, the fp32 step of the widened values rounded to nearest even
// (the test's own rounding), on every path: the arithmetic is unchanged, only the loads widen and the stores round.
// The 16-bit copy is the master's bits. bf16 masters with fp32 or bf16 moments; with kF32AsBf16 the gradient used is
// its bf16 rounding, and a bf16 gradient buffer (kBf16) steps to the same bits as that rounding held in fp32. fp16
// masters (DeepSpeed's fp16_master_weights_and_grads) with fp32 moments and an fp32 gradient buffer.
TEST(CpuOptimizerBf16Master, IsTheFp32StepRoundedOnEveryPath) {
  constexpr int64_t n = 1001;  // a masked or scalar tail on every path
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> initial(n);
  for (float& x : initial) x = 0.1f * normal(rng);
  std::vector<std::vector<float>> grads(kSteps, std::vector<float>(n));
  for (auto& g : grads)
    for (float& x : g) x = normal(rng);
  AdamHyper hyper;
  hyper.lr = 1e-2;
  hyper.weight_decay = 0.01;
  hyper.grad_scale = 0.5;
  struct Case {
    StateType master, states;
    GradType grad_type;
    const char* name;
  };
  const Case cases[] = {
      {StateType::kBf16, StateType::kF32, GradType::kF32, "bf16 masters, fp32 moments, fp32 grads"},
      {StateType::kBf16, StateType::kF32, GradType::kF32AsBf16, "bf16 masters, fp32 moments, grads as bf16"},
      {StateType::kBf16, StateType::kF32, GradType::kBf16, "bf16 masters, fp32 moments, bf16 grads"},
      {StateType::kBf16, StateType::kBf16, GradType::kF32, "bf16 masters, bf16 moments, fp32 grads"},
      {StateType::kBf16, StateType::kBf16, GradType::kF32AsBf16, "bf16 masters, bf16 moments, grads as bf16"},
      {StateType::kBf16, StateType::kBf16, GradType::kBf16, "bf16 masters, bf16 moments, bf16 grads"},
      {StateType::kF16, StateType::kF32, GradType::kF32, "fp16 masters, fp32 moments, fp32 grads"},
  };
  for (const Isa isa : supported_isas()) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(isa_name(isa)) + ", " + c.name);
      const bool fp16 = c.master == StateType::kF16;
      const auto round16 = [fp16](float x) { return fp16 ? round_to_f16(x) : round_to_bf16(x); };
      const auto decode16 = [fp16](uint16_t h) { return static_cast<float>(fp16 ? decode_f16(h) : decode_bf16(h)); };
      StepOptions options;
      options.isa = isa;
      std::vector<uint16_t> master(n), m16(n, 0), v16(n, 0), copy(n);
      for (int64_t i = 0; i < n; ++i) master[i] = round16(initial[i]);
      std::vector<float> m32(n, 0.0f), v32(n, 0.0f);
      std::vector<float> ref_p(n), ref_m(n, 0.0f), ref_v(n, 0.0f);
      for (int64_t i = 0; i < n; ++i) ref_p[i] = decode16(master[i]);
      for (int step = 1; step <= kSteps; ++step) {
        hyper.step = step;
        const std::vector<float>& g = grads[step - 1];
        std::vector<uint16_t> g16(n);
        for (int64_t i = 0; i < n; ++i) g16[i] = round_to_bf16(g[i]);
        const void* grad = c.grad_type == GradType::kBf16 ? static_cast<const void*>(g16.data()) : g.data();
        void* m = c.states == StateType::kBf16 ? static_cast<void*>(m16.data()) : m32.data();
        void* v = c.states == StateType::kBf16 ? static_cast<void*>(v16.data()) : v32.data();
        adam_step_typed(hyper, master.data(), c.master, grad, c.grad_type, m, v, c.states, copy.data(),
                        fp16 ? Copy16::kF16 : Copy16::kBf16, n, options);
        // The reference: the plain fp32 step, then everything kept in 16 bits rounded.
        std::vector<float> used = g;
        if (c.grad_type != GradType::kF32)
          for (float& x : used) x = static_cast<float>(decode_bf16(round_to_bf16(x)));
        adam_step(hyper, ref_p.data(), used.data(), GradType::kF32, ref_m.data(), ref_v.data(), nullptr, Copy16::kNone,
                  n, options);
        int64_t off = 0;
        for (int64_t i = 0; i < n; ++i) {
          const uint16_t p = round16(ref_p[i]);
          ref_p[i] = decode16(p);
          bool same = master[i] == p && copy[i] == p;
          if (c.states == StateType::kBf16) {
            const uint16_t rm = round_to_bf16(ref_m[i]), rv = round_to_bf16(ref_v[i]);
            ref_m[i] = static_cast<float>(decode_bf16(rm));
            ref_v[i] = static_cast<float>(decode_bf16(rv));
            same = same && m16[i] == rm && v16[i] == rv;
          } else {
            same = same && bits_of(m32[i]) == bits_of(ref_m[i]) && bits_of(v32[i]) == bits_of(ref_v[i]);
          }
          if (!same && ++off <= 3)
            ADD_FAILURE() << "step " << step << ", element " << i << ": master 0x" << std::hex << master[i]
                          << ", reference 0x" << p << std::dec;
        }
        ASSERT_EQ(off, 0) << "step " << step;
      }
    }
  }
}

// Rounding a master to bf16 loses what fp32 keeps: an update below half a bf16 ulp leaves the bf16 master as
// it is, where the fp32 master moves (the test fails if a "bf16" master were kept in fp32 and rounded only
// in the copy).
TEST(CpuOptimizerBf16Master, SmallUpdatesVanishInBf16) {
  AdamHyper hyper;
  hyper.lr = 1e-4;  // |update| ~ lr, far below 1/256 (half a bf16 ulp at 1.0)
  std::vector<uint16_t> master(64, round_to_bf16(1.0f)), copy(64);
  std::vector<float> grad(64, 1.0f), m(64, 0.0f), v(64, 0.0f);
  for (int step = 1; step <= 3; ++step) {
    hyper.step = step;
    adam_step_typed(hyper, master.data(), StateType::kBf16, grad.data(), GradType::kF32, m.data(), v.data(),
                    StateType::kF32, copy.data(), Copy16::kBf16, 64);
  }
  for (const uint16_t p : master) EXPECT_EQ(p, round_to_bf16(1.0f));
  EXPECT_GT(m[0], 0.0f);  // the moments moved
}

TEST(CpuOptimizerBf16Master, ConversionsRoundToNearestEven) {
  const std::vector<float> values = special_values();
  std::vector<uint16_t> halves(values.size());
  bf16_from_floats(values.data(), halves.data(), static_cast<int64_t>(values.size()));
  std::vector<float> back(values.size());
  floats_from_bf16(halves.data(), back.data(), static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(halves[i], round_to_bf16(values[i])) << "element " << i;
    if (!std::isnan(back[i])) {
      EXPECT_EQ(static_cast<double>(back[i]), decode_bf16(halves[i])) << "element " << i;
    }
  }
}

TEST(CpuOptimizerBf16Master, RefusesWhatItDoesNotBuild) {
  uint16_t p = 0, m16 = 0;
  float g = 0, m = 0, v = 0;
  EXPECT_THROW(adam_step_typed(AdamHyper{}, &m, StateType::kF32, &g, GradType::kF32, &m16, &m16, StateType::kBf16,
                               nullptr, Copy16::kNone, 1),
               std::invalid_argument);  // bf16 moments, fp32 master
  EXPECT_THROW(adam_step_typed(AdamHyper{}, &p, StateType::kBf16, &m16, GradType::kF16, &m, &v, StateType::kF32,
                               nullptr, Copy16::kNone, 1),
               std::invalid_argument);  // an fp16 gradient buffer
  EXPECT_THROW(lion_step(LionHyper{}, &m, &g, GradType::kF32AsBf16, &v, nullptr, Copy16::kNone, 1),
               std::invalid_argument);
  EXPECT_THROW(adam_step_typed(AdamHyper{}, &p, StateType::kF16, &g, GradType::kF32, &m16, &m16, StateType::kF16,
                               nullptr, Copy16::kNone, 1),
               std::invalid_argument);  // fp16 moments
  EXPECT_THROW(adam_step_typed(AdamHyper{}, &p, StateType::kF16, &m16, GradType::kBf16, &m, &v, StateType::kF32,
                               nullptr, Copy16::kNone, 1),
               std::invalid_argument);  // a 16-bit gradient buffer with fp16 masters
}

// ---- ISA selection and arguments ----

TEST(CpuOptimizerIsa, EnvironmentVariablePicksThePath) {
  {
    ScopedEnv env("ZHOST_CPU_ISA", nullptr);
    EXPECT_EQ(selected_isa(), best_isa());
  }
  {
    ScopedEnv env("ZHOST_CPU_ISA", "");
    EXPECT_EQ(selected_isa(), best_isa());
  }
  for (const Isa isa : supported_isas()) {
    ScopedEnv env("ZHOST_CPU_ISA", isa_name(isa));
    EXPECT_EQ(selected_isa(), isa);
  }
}

// What selected_isa() throws, or "" when it does not.
std::string selected_isa_error() {
  try {
    selected_isa();
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "";
}

TEST(CpuOptimizerIsa, UnknownNameThrowsOneLine) {
  ScopedEnv env("ZHOST_CPU_ISA", "avx9000");
  const std::string message = selected_isa_error();
  ASSERT_FALSE(message.empty()) << "no exception";
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find("ZHOST_CPU_ISA=avx9000"), std::string::npos) << message;
  EXPECT_NE(message.find(std::string("supports scalar")), std::string::npos) << message;
  EXPECT_NE(message.find(isa_name(best_isa())), std::string::npos) << message;
  // The step itself reports it too, when no ISA is given.
  float x = 0, g = 0, m = 0, v = 0;
  EXPECT_THROW(adam_step(AdamHyper{}, &x, &g, GradType::kF32, &m, &v, nullptr, Copy16::kNone, 1), std::runtime_error);
}

TEST(CpuOptimizerIsa, MissingIsaThrowsOneLine) {
  std::optional<Isa> missing;
  for (const Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (!isa_supported(isa)) missing = isa;
  }
  if (!missing) GTEST_SKIP() << "this CPU has every ISA, so none can be missing";
  ScopedEnv env("ZHOST_CPU_ISA", isa_name(*missing));
  const std::string message = selected_isa_error();
  ASSERT_FALSE(message.empty()) << "no exception";
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find("supports scalar"), std::string::npos) << message;
  StepOptions options;
  options.isa = *missing;
  float x = 0, g = 0, m = 0, v = 0;
  EXPECT_THROW(adam_step(AdamHyper{}, &x, &g, GradType::kF32, &m, &v, nullptr, Copy16::kNone, 1, options),
               std::runtime_error);
}

TEST(CpuOptimizerArguments, BadArgumentsThrowAndEmptyIsANoOp) {
  float x = 1, g = 0, m = 0, v = 0;
  EXPECT_NO_THROW(
      adam_step(AdamHyper{}, nullptr, nullptr, GradType::kF32, nullptr, nullptr, nullptr, Copy16::kNone, 0));
  EXPECT_THROW(adam_step(AdamHyper{}, &x, nullptr, GradType::kF32, &m, &v, nullptr, Copy16::kNone, 1),
               std::invalid_argument);
  EXPECT_THROW(adam_step(AdamHyper{}, &x, &g, GradType::kF32, &m, &v, nullptr, Copy16::kBf16, 1),
               std::invalid_argument);
  EXPECT_THROW(adam_step(AdamHyper{}, &x, &g, GradType::kF32, &m, &v, nullptr, Copy16::kNone, -1),
               std::invalid_argument);
  AdamHyper step0;
  step0.step = 0;
  EXPECT_THROW(adam_step(step0, &x, &g, GradType::kF32, &m, &v, nullptr, Copy16::kNone, 1), std::invalid_argument);
  StepOptions no_tile;
  no_tile.tile = 0;
  EXPECT_THROW(lion_step(LionHyper{}, &x, &g, GradType::kF32, &m, nullptr, Copy16::kNone, 1, no_tile),
               std::invalid_argument);
  EXPECT_EQ(x, 1.0f);
}

}  // namespace
}  // namespace zhost::cpu_optim
