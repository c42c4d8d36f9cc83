// sdk/zero/src/delayed_update.cpp: the delayed parameter update: its background step and its mechanism over a
// tier's groups (Note [Delayed parameter update] in the header).
#include "zhost/zero/delayed_update.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <utility>

#include "zhost/kit/format.hpp"
#include "zhost/kit/optimizer.hpp"
#include "zhost/kit/state_io.hpp"

namespace zhost::zero {
namespace {

// extrapolated = now + k (now - before), cast to its dtype, and before = now: one pass over the group, as it
// shares the cores with the next step's forward and backward.
template <typename Out>
void extrapolate_into(const float* now, float* before, Out* extrapolated, float k, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float w = now[i];
    extrapolated[i] = static_cast<Out>(w + k * (w - before[i]));
    before[i] = w;
  }
}

void extrapolate(const at::Tensor& now, const at::Tensor& before, const at::Tensor& extrapolated, float k) {
  const int64_t n = now.numel();
  switch (extrapolated.scalar_type()) {
    case at::kFloat:
      return extrapolate_into(now.data_ptr<float>(), before.data_ptr<float>(), extrapolated.data_ptr<float>(), k, n);
    case at::kBFloat16:
      return extrapolate_into(now.data_ptr<float>(), before.data_ptr<float>(), extrapolated.data_ptr<at::BFloat16>(), k,
                              n);
    case at::kHalf:
      return extrapolate_into(now.data_ptr<float>(), before.data_ptr<float>(), extrapolated.data_ptr<at::Half>(), k, n);
    default:
      throw sdk::PluginError(ZHOST_ERR_INTERNAL, "delayed update: no extrapolation into this compute dtype");
  }
}

// P = E - factor * gradients in fp32 (in place: `prediction` is scratch or, in fp32 jobs, `out` itself), then
// cast into `out`; no arithmetic with a factor of 0, as the gradients of an overflowed step are not finite.
void look_ahead(const at::Tensor& prediction, const at::Tensor& gradients, const at::Tensor& out, double factor) {
  if (factor != 0) prediction.sub_(gradients, factor);
  if (!out.is_same(prediction)) out.copy_(prediction);
}

}  // namespace

void read_delayed_update_keys(sdk::DescriptorBuilder& builder) {
  builder.reads_keys({"zero.offload_optimizer.delayed_update", "zero.offload_optimizer.delayed_update_start_step",
                      "experimental.delayed_update_extrapolation", "experimental.delayed_update_lookahead"});
}

DelayedUpdateOptions read_delayed_update_options(const sdk::Host& host) {
  DelayedUpdateOptions o;
  o.enabled = host.config_bool("zero.offload_optimizer.delayed_update");
  o.start_step = host.config_int("zero.offload_optimizer.delayed_update_start_step");
  o.extrapolation = host.config_float("experimental.delayed_update_extrapolation");
  o.lookahead = host.config_float("experimental.delayed_update_lookahead");
  return o;
}

void check_delayed_update_setup(const DelayedUpdateOptions& options, const OptimizerTier& tier,
                                const zhost_optimizer_desc& optimizer) {
  if (!options.enabled) return;
  if (!tier.active())
    throw sdk::PluginError(ZHOST_ERR_CONFIG,
                           "zero.offload_optimizer.delayed_update = true needs a tier that runs the optimizer; set "
                           "zero.offload_optimizer.device = \"cpu\" or \"nvme\"");
  if (options.lookahead != 0 && optimizer.kind != ZHOST_OPTIMIZER_ADAM && optimizer.kind != ZHOST_OPTIMIZER_ADAMW)
    throw sdk::PluginError(ZHOST_ERR_CONFIG,
                           "experimental.delayed_update_lookahead takes a step of Adam's size, and this job's "
                           "optimizer is not Adam or AdamW; set it to 0");
}

std::string delayed_update_summary(const DelayedUpdateOptions& options) {
  std::string summary = kit::format(", delayed parameter update from step {}", options.start_step);
  if (options.extrapolation != 0) summary += kit::format(", weights extrapolated by {}", options.extrapolation);
  if (options.lookahead != 0) summary += kit::format(", lookahead {}", options.lookahead);
  return summary;
}

DelayedUpdate::~DelayedUpdate() {
  if (thread_.joinable()) thread_.join();
}

void DelayedUpdate::start(std::function<void()> step) {
  if (thread_.joinable())
    throw sdk::PluginError(ZHOST_ERR_INTERNAL, "delayed update: a step started while the previous one runs");
  failure_ = nullptr;
  thread_ = std::thread([this, step = std::move(step)] {
    try {
      step();
    } catch (...) {
      failure_ = std::current_exception();
    }
  });
}

bool DelayedUpdate::wait() {
  if (!thread_.joinable()) return false;
  thread_.join();
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
  return true;
}

// Extrapolation (and the lookahead, which starts from it) reads the tier's master where the step's own output is
// not the fp32 master (16-bit jobs: every delayed step) and where no step has left it here (the first delayed
// step, after a load), so the tier must give its states back: asked once here, so that a tier that cannot stops
// the job at setup.
DelayedTierStep::DelayedTierStep(const OptimizerTier& tier, const HostCopies& copies,
                                 const DelayedUpdateOptions& options, int64_t model_numel, at::ScalarType compute_dtype,
                                 std::vector<at::Tensor> tier_accumulators, std::vector<at::Tensor> outputs,
                                 WriteWeights write_weights)
    : tier_(tier),
      options_(options),
      sqrt_model_numel_(std::sqrt(static_cast<double>(model_numel))),
      compute_dtype_(compute_dtype),
      write_weights_(std::move(write_weights)),
      tier_accumulators_(std::move(tier_accumulators)),
      outputs_(std::move(outputs)) {
  const size_t groups = tier_accumulators_.size();
  if (outputs_.empty()) outputs_.resize(groups);
  for (size_t g = 0; g < groups; ++g) {
    const int64_t numel = tier_accumulators_[g].numel();
    accumulators_.push_back(at::zeros({numel}, at::kFloat));
    if (!outputs_[g].defined()) {
      outputs_[g] = copies.host_empty(numel, compute_dtype_);
      allocated_output_bytes_ += outputs_[g].nbytes();
    }
    if (!options_.predicts()) continue;
    master_before_.push_back(at::empty({numel}, at::kFloat));
    try {
      tier_.read_state(g, kit::kMasterState, 0, master_before_.back());
    } catch (const sdk::PluginError& e) {
      throw sdk::PluginError(
          ZHOST_ERR_CONFIG,
          kit::format("zero.offload_optimizer.delayed_update_{} needs the tier to read its master weights back ({}); "
                      "set it to 0 or use a tier that can",
                      options_.extrapolation != 0 ? "extrapolation" : "lookahead", e.what()));
    }
    master_after_.push_back(compute_dtype_ != at::kFloat ? at::empty({numel}, at::kFloat) : at::Tensor());
    extrapolated_.push_back(copies.host_empty(numel, compute_dtype_));
  }
  tier_bytes_ = tier_.bytes();
}

// Note [Delayed parameter update]: the previous step's weights are applied, then this step's gradients move
// into the tier's (zeroed) accumulators; before the start step the tier steps at once, from it on its step
// starts in the background. On the job's last step and on one before a storage swap (docs/abi.md 8) the
// optimizer's own weights are applied before returning, also when the step overflowed (the boundary may have
// applied extrapolated ones).
bool DelayedTierStep::step(const zhost_step_args& args, const StepDecision& decision, const kit::StepScalars& scalars,
                           const StepNow& step_now) {
  bool written = apply(Weights::kBoundary, lookahead_factor(args, decision));
  if (decision.overflow) {  // dropped, as without the delay; nothing starts
    for (const at::Tensor& a : accumulators_) a.zero_();
  } else {
    for (size_t g = 0; g < accumulators_.size(); ++g) {
      tier_accumulators_[g].copy_(accumulators_[g]);
      accumulators_[g].zero_();
    }
    if (args.step < options_.start_step) {  // not delayed yet: as without the delay
      master_before_current_ = false;
      step_now(scalars);
      tier_bytes_ = tier_.bytes();
      written = true;
    } else {
      start(scalars);
    }
  }
  if (zhost_ext_find(args.ext, ZHOST_EXT_LAST_STEP) || zhost_ext_find(args.ext, ZHOST_EXT_DRAIN))
    written = apply(Weights::kExact, 0) || written;
  return written;
}

// ||g_t|| of the accumulators' elements (the sum over ranks of loss-scaled gradients) is args.grad_norm, the
// averaged unscaled norm, over decision.unscale.
double DelayedTierStep::lookahead_factor(const zhost_step_args& args, const StepDecision& decision) const {
  if (options_.lookahead == 0 || decision.overflow || !(args.grad_norm > 0)) return 0;
  return options_.lookahead * args.lr * sqrt_model_numel_ * decision.unscale / args.grad_norm;
}

// The tier's step of every group on the background thread; with extrapolation it also writes E_t = W_t + k (W_t -
// W_{t-1}), computed in fp32, into extrapolated_ (with the lookahead: in fp32, fp32_prediction, which the
// boundary completes). W_{t-1} is kept from the step before (master_before_); W_t is the step's own output in
// fp32 jobs, else read from the tier.
void DelayedTierStep::start(const kit::StepScalars& scalars) {
  thread_.start([this, scalars] {
    for (size_t g = 0; g < outputs_.size(); ++g) {
      if (options_.predicts() && !master_before_current_) tier_.read_state(g, kit::kMasterState, 0, master_before_[g]);
      tier_.step(g, scalars, outputs_[g]);
      if (!options_.predicts()) continue;
      at::Tensor master = outputs_[g];  // W_t
      if (compute_dtype_ != at::kFloat) {
        tier_.read_state(g, kit::kMasterState, 0, master_after_[g]);
        master = master_after_[g];
      }
      extrapolate(master, master_before_[g], options_.lookahead != 0 ? fp32_prediction(g) : extrapolated_[g],
                  static_cast<float>(options_.extrapolation));
    }
    master_before_current_ = true;
  });
}

// Waits for the step in flight, if any, and writes its weights into the parameters: at a boundary the
// extrapolated ones if so set, else the optimizer's own, also when the parameters still hold an extrapolation
// of a step already waited for (a skipped step since).
bool DelayedTierStep::apply(Weights how, double lookahead) {
  const bool waited = thread_.wait();
  if (waited) tier_bytes_ = tier_.bytes();
  const bool extrapolated = how == Weights::kBoundary && options_.predicts();
  if (!waited && !(how == Weights::kExact && extrapolated_applied_)) return false;
  if (extrapolated && options_.lookahead != 0)
    for (size_t g = 0; g < extrapolated_.size(); ++g)
      look_ahead(fp32_prediction(g), accumulators_[g], extrapolated_[g], lookahead);
  write_weights_(extrapolated ? extrapolated_ : outputs_);
  extrapolated_applied_ = extrapolated;
  return true;
}

uint64_t DelayedTierStep::buffer_bytes() const {
  uint64_t bytes = allocated_output_bytes_;
  for (const auto* buffers : {&accumulators_, &master_before_, &master_after_, &extrapolated_})
    for (const at::Tensor& t : *buffers)
      if (t.defined()) bytes += t.nbytes();
  return bytes;
}

}  // namespace zhost::zero
