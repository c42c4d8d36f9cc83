// sdk/kit/src/optimizer.cpp: AdamW, Adam, SGD, Lion and Lamb steps of fp32 tensors (Adam kinds: bf16 too, Note
// [bf16 masters without offload]): on the CPU through the fused CPU optimizer (Note [One optimizer arithmetic],
// zhost/kit/cpu_optimizer.hpp), elsewhere (CUDA) as in-place ATen updates with the same formulas; Lamb as ATen
// updates everywhere.
//
// Every update but Lamb's is elementwise, so stepping a flat buffer in slices gives the same bits as stepping
// it whole. Scalars (lr, betas, bias corrections) are computed on the host in double.
#include "zhost/kit/optimizer.hpp"

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/zeros_like.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kit_error.hpp"
#include "zhost/kit/cpu_optimizer.hpp"

namespace zhost::kit {
namespace {

// "fp32 [3, 5] on cpu", for error messages.
std::string describe(const at::Tensor& tensor) {
  std::string shape;
  for (const int64_t size : tensor.sizes()) shape += (shape.empty() ? "" : ", ") + std::to_string(size);
  return std::string(c10::toString(tensor.scalar_type())) + " [" + shape + "] on " + tensor.device().str();
}

}  // namespace

std::string_view optimizer_kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdamW:
      return "AdamW";
    case OptimizerKind::kAdam:
      return "Adam";
    case OptimizerKind::kSgd:
      return "SGD";
    case OptimizerKind::kLion:
      return "Lion";
    case OptimizerKind::kLamb:
      return "Lamb";
  }
  return "unknown";
}

OptimizerSpec OptimizerSpec::defaults(OptimizerKind kind) {
  OptimizerSpec spec;
  spec.kind = kind;
  if (kind == OptimizerKind::kLion) spec.beta2 = 0.99;
  return spec;
}

// ---- OptimizerState ----

OptimizerState::OptimizerState() = default;
OptimizerState::~OptimizerState() = default;
OptimizerState::OptimizerState(OptimizerState&&) noexcept = default;
OptimizerState& OptimizerState::operator=(OptimizerState&&) noexcept = default;

bool OptimizerState::contains(std::string_view name) const {
  return std::find(names_.begin(), names_.end(), name) != names_.end();
}

const at::Tensor& OptimizerState::get(std::string_view name) const {
  const auto it = std::find(names_.begin(), names_.end(), name);
  if (it == names_.end()) {
    detail::fail(ZHOST_ERR_INVALID_ARGUMENT, "optimizer state has no tensor '{}' (it has: {})", name,
                 detail::join(names_));
  }
  return tensors_[static_cast<size_t>(it - names_.begin())];
}

int64_t OptimizerState::bytes() const {
  int64_t total = 0;
  for (const at::Tensor& tensor : tensors_) total += tensor.numel() * tensor.element_size();
  return total;
}

void OptimizerState::clear() {
  names_.clear();
  tensors_.clear();
}

// ---- Optimizer ----

Optimizer::~Optimizer() = default;

int64_t Optimizer::state_bytes_per_param() const { return static_cast<int64_t>(state_names().size() * sizeof(float)); }

namespace {

void check_state_tensor_matches(std::string_view name, const at::Tensor& tensor, const at::Tensor& param) {
  if (tensor.scalar_type() != param.scalar_type() || tensor.sizes() != param.sizes() ||
      tensor.device() != param.device()) {
    detail::fail(ZHOST_ERR_INVALID_ARGUMENT,
                 "optimizer state '{}' is {} but its parameter is {}: they must match (was the state made for "
                 "another partitioning?)",
                 name, describe(tensor), describe(param));
  }
}

}  // namespace

at::Tensor Optimizer::state_tensor(OptimizerState& state, std::string_view name, const at::Tensor& param) {
  const auto it = std::find(state.names_.begin(), state.names_.end(), name);
  if (it == state.names_.end()) {
    state.names_.emplace_back(name);
    state.tensors_.push_back(at::zeros_like(param, at::MemoryFormat::Contiguous));
    return state.tensors_.back();
  }
  const at::Tensor& tensor = state.tensors_[static_cast<size_t>(it - state.names_.begin())];
  check_state_tensor_matches(name, tensor, param);
  return tensor;
}

void Optimizer::check_step_arguments(const at::Tensor& param, const at::Tensor& grad, const StepScalars& scalars,
                                     bool bf16_params) {
  const int64_t step = scalars.step;
  const double lr = scalars.lr;
  const double grad_scale = scalars.grad_scale;
  if (!param.defined() || !grad.defined())
    detail::fail(ZHOST_ERR_INVALID_ARGUMENT, "optimizer step needs a parameter and its gradient");
  const bool bf16 = bf16_params && param.scalar_type() == at::kBFloat16;  // Note [bf16 masters without offload]
  const bool types = bf16 ? (grad.scalar_type() == at::kBFloat16 || grad.scalar_type() == at::kFloat)
                          : (param.scalar_type() == at::kFloat && grad.scalar_type() == at::kFloat);
  if (bf16 && !param.is_contiguous())
    detail::fail(ZHOST_ERR_INVALID_ARGUMENT, "optimizer step: a bf16 parameter must be contiguous, got {}",
                 describe(param));
  if (!types || param.sizes() != grad.sizes() || param.device() != grad.device()) {
    detail::fail(ZHOST_ERR_INVALID_ARGUMENT,
                 "optimizer step needs an fp32 parameter{} and an fp32 gradient{} of one shape on one device, got "
                 "parameter {} and gradient {}",
                 bf16_params ? " (or bf16)" : "", bf16_params ? " (or bf16)" : "", describe(param), describe(grad));
  }
  if (step < 1) detail::fail(ZHOST_ERR_INVALID_ARGUMENT, "optimizer step count must start at 1, got {}", step);
  if (!std::isfinite(lr) || lr < 0)
    detail::fail(ZHOST_ERR_INVALID_ARGUMENT, "optimizer step: learning rate must be finite and >= 0, got {}", lr);
  if (!std::isfinite(grad_scale))
    detail::fail(ZHOST_ERR_INVALID_ARGUMENT, "optimizer step: gradient scale must be finite, got {}", grad_scale);
  for (const double beta : {scalars.beta1, scalars.beta2}) {
    if (!(beta >= 0 && beta < 1))
      detail::fail(ZHOST_ERR_INVALID_ARGUMENT, "optimizer step: betas must be in [0, 1), got {}", beta);
  }
}

namespace {

// Whether the fused CPU optimizer can step these tensors in place (CPU, contiguous).
bool fused(std::initializer_list<const at::Tensor*> tensors) {
  for (const at::Tensor* tensor : tensors)
    if (!tensor->device().is_cpu() || !tensor->is_contiguous()) return false;
  return true;
}

cpu_optim::StepOptions fused_options() {
  cpu_optim::StepOptions options;
  options.threads = std::max(1, at::get_num_threads());  // the rank's intra-op threads
  return options;
}

// Runs `call`, turning the fused optimizer's std::exceptions into the kit's error idiom.
template <class Call>
void run_fused(Call&& call) {
  try {
    call();
  } catch (const std::exception& e) {
    detail::fail(ZHOST_ERR_INVALID_ARGUMENT, "{}", e.what());
  }
}

}  // namespace

void Optimizer::allocate_state(OptimizerState& state, const at::Tensor& param) const {
  for (const std::string& name : state_names()) state_tensor(state, name, param);
}

void Optimizer::import_state(OptimizerState& state, std::string_view name, const at::Tensor& value,
                             const at::Tensor& param) const {
  const std::vector<std::string> expected = state_names();
  if (std::find(expected.begin(), expected.end(), name) == expected.end()) {
    detail::fail(ZHOST_ERR_INVALID_ARGUMENT, "{} keeps no state named '{}' (it keeps: {})", optimizer_kind_name(kind()),
                 name, detail::join(expected));
  }
  if (value.scalar_type() != at::kFloat || value.sizes() != param.sizes()) {  // param's dtype: rounded by copy_
    detail::fail(ZHOST_ERR_INVALID_ARGUMENT, "optimizer state '{}' to import is {} but its parameter is {}", name,
                 describe(value), describe(param));
  }
  at::NoGradGuard no_grad;
  state_tensor(state, name, param).copy_(value);
}

namespace {

// AdamW (kind kAdamW: p *= 1 - lr*wd) and Adam (kind kAdam: g += wd*p), then
// m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g^2;
// p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)  with bc_i = 1 - beta_i^step (1 without bias correction).
// A bf16 param and its bf16 moments are updated in fp32 and stored rounded (Note [bf16 masters without offload]).
class Adam final : public Optimizer {
  static constexpr int64_t kBf16Piece = int64_t{1} << 22;  // elements per fp32 piece of a bf16 step off the CPU

 public:
  using Optimizer::Optimizer;
  using Optimizer::step;
  void step(const at::Tensor& param, const at::Tensor& grad, OptimizerState& state,
            const StepScalars& scalars) const override {
    check_step_arguments(param, grad, scalars, /*bf16_params=*/true);
    at::NoGradGuard no_grad;
    const at::Tensor exp_avg = state_tensor(state, "exp_avg", param);
    const at::Tensor exp_avg_sq = state_tensor(state, "exp_avg_sq", param);
    if (fused({&param, &grad, &exp_avg, &exp_avg_sq})) return step_fused(param, grad, exp_avg, exp_avg_sq, scalars);
    if (param.scalar_type() == at::kFloat) return step_aten(param, grad, exp_avg, exp_avg_sq, scalars);
    // bf16 off the CPU: fp32 copies of one piece at a time (the update is elementwise), so that the step holds
    // 16 bytes per element of a piece, not of the whole partition the bf16 masters were chosen to shrink.
    const at::Tensor p = param.view(-1), g = grad.reshape(-1), m = exp_avg.view(-1), v = exp_avg_sq.view(-1);
    for (int64_t start = 0; start < p.numel(); start += kBf16Piece) {
      const int64_t length = std::min(kBf16Piece, p.numel() - start);
      const at::Tensor p32 = p.narrow(0, start, length).to(at::kFloat);
      const at::Tensor m32 = m.narrow(0, start, length).to(at::kFloat);
      const at::Tensor v32 = v.narrow(0, start, length).to(at::kFloat);
      step_aten(p32, g.narrow(0, start, length).to(at::kFloat), m32, v32, scalars);
      p.narrow(0, start, length).copy_(p32);  // rounded to nearest even
      m.narrow(0, start, length).copy_(m32);
      v.narrow(0, start, length).copy_(v32);
    }
  }
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }

 private:
  // CPU tensors, fp32 or (Note [bf16 masters without offload]) a bf16 param and moments with a bf16 or fp32 grad.
  void step_fused(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                  const at::Tensor& exp_avg_sq, const StepScalars& scalars) const {
    const OptimizerSpec& hyper = spec();
    cpu_optim::AdamHyper fused_hyper;
    fused_hyper.lr = scalars.lr;
    fused_hyper.beta1 = scalars.beta1;
    fused_hyper.beta2 = scalars.beta2;
    fused_hyper.eps = hyper.eps;
    fused_hyper.weight_decay = hyper.weight_decay;
    fused_hyper.decoupled = kind() == OptimizerKind::kAdamW;
    fused_hyper.bias_correction = hyper.bias_correction;
    fused_hyper.step = scalars.step;
    fused_hyper.grad_scale = scalars.grad_scale;
    const cpu_optim::StateType type =
        param.scalar_type() == at::kBFloat16 ? cpu_optim::StateType::kBf16 : cpu_optim::StateType::kF32;
    const cpu_optim::GradType grad_type =
        grad.scalar_type() == at::kBFloat16 ? cpu_optim::GradType::kBf16 : cpu_optim::GradType::kF32;
    run_fused([&] {
      cpu_optim::adam_step_typed(fused_hyper, param.data_ptr(), type, grad.data_ptr(), grad_type, exp_avg.data_ptr(),
                                 exp_avg_sq.data_ptr(), type, nullptr, cpu_optim::Copy16::kNone, param.numel(),
                                 fused_options());
    });
  }
  // fp32 tensors on any device, by in-place ATen ops.
  void step_aten(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                 const at::Tensor& exp_avg_sq, const StepScalars& scalars) const {
    const OptimizerSpec& hyper = spec();
    const auto [step, lr, grad_scale, beta1, beta2] = scalars;
    at::Tensor effective_grad = grad_scale == 1.0 ? grad : grad.mul(grad_scale);
    if (hyper.weight_decay != 0) {
      if (kind() == OptimizerKind::kAdamW) {
        param.mul_(1.0 - lr * hyper.weight_decay);
      } else {
        effective_grad = effective_grad.add(param, hyper.weight_decay);
      }
    }
    const double steps = static_cast<double>(step);
    const double bias_correction1 = hyper.bias_correction ? 1.0 - std::pow(beta1, steps) : 1.0;
    const double bias_correction2 = hyper.bias_correction ? 1.0 - std::pow(beta2, steps) : 1.0;
    exp_avg.mul_(beta1).add_(effective_grad, 1.0 - beta1);
    exp_avg_sq.mul_(beta2).addcmul_(effective_grad, effective_grad, 1.0 - beta2);
    at::Tensor denom = exp_avg_sq.sqrt();
    denom.mul_(1.0 / std::sqrt(bias_correction2)).add_(hyper.eps);
    param.addcdiv_(exp_avg, denom, -lr / bias_correction1);
  }
};

// d = g + wd*p;  buf = momentum*buf + d (buf starts at d, which zeros-then-update gives exactly);
// p -= lr * (momentum != 0 ? buf : d).
class Sgd final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  using Optimizer::step;
  void step(const at::Tensor& param, const at::Tensor& grad, OptimizerState& state,
            const StepScalars& scalars) const override {
    check_step_arguments(param, grad, scalars);
    at::NoGradGuard no_grad;
    const double lr = scalars.lr, grad_scale = scalars.grad_scale;
    const bool momentum = spec().momentum != 0;
    const at::Tensor momentum_buffer = momentum ? state_tensor(state, "momentum_buffer", param) : at::Tensor();
    if (fused({&param, &grad}) && (!momentum || fused({&momentum_buffer}))) {
      cpu_optim::SgdHyper fused_hyper;
      fused_hyper.lr = lr;
      fused_hyper.momentum = spec().momentum;
      fused_hyper.weight_decay = spec().weight_decay;
      fused_hyper.grad_scale = grad_scale;
      run_fused([&] {
        cpu_optim::sgd_step(fused_hyper, param.data_ptr<float>(), grad.data_ptr<float>(), cpu_optim::GradType::kF32,
                            momentum ? momentum_buffer.data_ptr<float>() : nullptr, nullptr, cpu_optim::Copy16::kNone,
                            param.numel(), fused_options());
      });
      return;
    }
    at::Tensor direction = grad_scale == 1.0 ? grad : grad.mul(grad_scale);
    if (spec().weight_decay != 0) direction = direction.add(param, spec().weight_decay);
    if (momentum) {
      momentum_buffer.mul_(spec().momentum).add_(direction);
      direction = momentum_buffer;
    }
    param.add_(direction, -lr);
  }
  std::vector<std::string> state_names() const override {
    if (spec().momentum == 0) return {};
    return {"momentum_buffer"};
  }
};

// p *= 1 - lr*wd;  p -= lr * sign(beta1*m + (1-beta1)*g);  m = beta2*m + (1-beta2)*g.
class Lion final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  using Optimizer::step;
  void step(const at::Tensor& param, const at::Tensor& grad, OptimizerState& state,
            const StepScalars& scalars) const override {
    check_step_arguments(param, grad, scalars);
    at::NoGradGuard no_grad;
    const double lr = scalars.lr, grad_scale = scalars.grad_scale, beta1 = scalars.beta1, beta2 = scalars.beta2;
    const at::Tensor exp_avg = state_tensor(state, "exp_avg", param);
    if (fused({&param, &grad, &exp_avg})) {
      cpu_optim::LionHyper fused_hyper;
      fused_hyper.lr = lr;
      fused_hyper.beta1 = beta1;
      fused_hyper.beta2 = beta2;
      fused_hyper.weight_decay = spec().weight_decay;
      fused_hyper.grad_scale = grad_scale;
      run_fused([&] {
        cpu_optim::lion_step(fused_hyper, param.data_ptr<float>(), grad.data_ptr<float>(), cpu_optim::GradType::kF32,
                             exp_avg.data_ptr<float>(), nullptr, cpu_optim::Copy16::kNone, param.numel(),
                             fused_options());
      });
      return;
    }
    const at::Tensor g = grad_scale == 1.0 ? grad : grad.mul(grad_scale);
    if (spec().weight_decay != 0) param.mul_(1.0 - lr * spec().weight_decay);
    at::Tensor update = exp_avg.mul(beta1);
    update.add_(g, 1.0 - beta1).sign_();
    param.add_(update, -lr);
    exp_avg.mul_(beta2).add_(g, 1.0 - beta2);
  }
  std::vector<std::string> state_names() const override { return {"exp_avg"}; }
};

// Note [Lamb steps whole parameters]: DeepSpeed's FusedLamb (0.19.8, csrc/lamb), per parameter:
//   m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g^2;  u = m / (sqrt(v) + eps) + wd*p
//   ratio = |p| / |u|, clamped to [min_coeff, max_coeff]; 1 when either norm is 0 (|.|: L2 norm, p before the step)
//   p -= lr * sqrt(bc2) / bc1 * ratio * u  with bc_i = 1 - beta_i^step (lr alone without bias correction).
// The ratio is a norm over the whole parameter, so Lamb cannot step a flat shard of a partitioned group or a
// slice of one: only a partition that steps whole parameters may take it (stage 0; the host refuses Lamb at
// zero.stage 1-3, as DeepSpeed refuses it under ZeRO unless zero_allow_untested_optimizer, which then steps
// flat partitions with a different meaning). DeepSpeed after 0.19.8 bias-corrects m and v inside u instead;
// without bias correction (bias_correction = false, what BERT's Lamb configs write) the two agree.
class Lamb final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  using Optimizer::step;
  void step(const at::Tensor& param, const at::Tensor& grad, OptimizerState& state,
            const StepScalars& scalars) const override {
    check_step_arguments(param, grad, scalars);
    at::NoGradGuard no_grad;
    const OptimizerSpec& hyper = spec();
    const at::Tensor exp_avg = state_tensor(state, "exp_avg", param);
    const at::Tensor exp_avg_sq = state_tensor(state, "exp_avg_sq", param);
    const at::Tensor g = scalars.grad_scale == 1.0 ? grad : grad.mul(scalars.grad_scale);
    exp_avg.mul_(scalars.beta1).add_(g, 1.0 - scalars.beta1);
    exp_avg_sq.mul_(scalars.beta2).addcmul_(g, g, 1.0 - scalars.beta2);
    at::Tensor update = exp_avg_sq.sqrt().add_(hyper.eps);
    update = exp_avg.div(update);
    if (hyper.weight_decay != 0) update.add_(param, hyper.weight_decay);
    const double weight_norm = param.norm().item<double>();
    const double update_norm = update.norm().item<double>();
    double ratio = 1.0;
    if (weight_norm != 0 && update_norm != 0)
      ratio = std::clamp(weight_norm / update_norm, hyper.min_coeff, hyper.max_coeff);
    double step_size = scalars.lr;
    if (hyper.bias_correction) {
      const double steps = static_cast<double>(scalars.step);
      step_size *= std::sqrt(1.0 - std::pow(scalars.beta2, steps)) / (1.0 - std::pow(scalars.beta1, steps));
    }
    param.add_(update, -step_size * ratio);
  }
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
};

void check_in_range(std::string_view name, double value, double low, double high, bool high_inclusive) {
  const bool ok = std::isfinite(value) && value >= low && (high_inclusive ? value <= high : value < high);
  if (!ok) {
    detail::fail(ZHOST_ERR_CONFIG, "optimizer setting {} = {} is out of range: it must be in [{}, {}{}", name, value,
                 low, high, high_inclusive ? "]" : ")");
  }
}

void validate(const OptimizerSpec& spec) {
  const double unbounded = std::numeric_limits<double>::max();
  check_in_range("lr", spec.lr, 0.0, unbounded, true);
  check_in_range("weight_decay", spec.weight_decay, 0.0, unbounded, true);
  if (spec.kind == OptimizerKind::kSgd) {
    check_in_range("momentum", spec.momentum, 0.0, unbounded, true);
    return;
  }
  check_in_range("betas[0]", spec.beta1, 0.0, 1.0, false);
  check_in_range("betas[1]", spec.beta2, 0.0, 1.0, false);
  if (spec.kind != OptimizerKind::kLion) check_in_range("eps", spec.eps, 0.0, unbounded, true);
  if (spec.kind == OptimizerKind::kLamb) {
    check_in_range("min_coeff", spec.min_coeff, 0.0, unbounded, true);
    check_in_range("max_coeff", spec.max_coeff, spec.min_coeff, unbounded, true);
  }
}

}  // namespace

void require_elementwise(const OptimizerSpec& spec, const std::string& where) {
  if (spec.kind != OptimizerKind::kLamb) return;
  detail::fail(ZHOST_ERR_CONFIG,
               "{} steps flat shards of parameters, and Lamb's trust ratio needs each parameter whole; use zero.stage "
               "= 0 for Lamb, or another optimizer",
               where);
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec) {
  validate(spec);
  switch (spec.kind) {
    case OptimizerKind::kAdamW:
    case OptimizerKind::kAdam:
      return std::make_unique<Adam>(spec);
    case OptimizerKind::kSgd:
      return std::make_unique<Sgd>(spec);
    case OptimizerKind::kLion:
      return std::make_unique<Lion>(spec);
    case OptimizerKind::kLamb:
      return std::make_unique<Lamb>(spec);
  }
  detail::fail(ZHOST_ERR_INVALID_ARGUMENT, "unknown optimizer kind {}", static_cast<int>(spec.kind));
}

}  // namespace zhost::kit
