// zhost/kit/optimizer.hpp: the optimizers that step fp32 master weights (AdamW, Adam, SGD, Lion, Lamb), for the
// host's stage 0 and every plugin that steps an optimizer on flat fp32 shards (Lamb: whole parameters only,
// Note [Lamb steps whole parameters]).
//
// One Optimizer steps one fp32 tensor at a time: a model parameter, or a flat 1-D shard of a flattened
// parameter group (ZeRO stage 1/2 partitions, stage 3 shards, offload sub-groups); Adam and AdamW also step bf16
// tensors (Note [bf16 masters without offload]). Its moments live in an OptimizerState owned by the caller, one
// per stepped tensor, allocated on first use like the tensor (same shape, device and dtype). The Optimizer itself holds
// only hyper-parameters, so one object can step every tensor of a run, from any thread. CPU tensors are stepped by the
// fused CPU optimizer, with the arithmetic of the CPU-offload tier (Note [One optimizer arithmetic],
// zhost/kit/cpu_optimizer.hpp); CUDA tensors by in-place ATen ops. No autograd.
//
// The caller hands over gradients checked for overflow, and the one factor (grad_scale) that makes them
// final: averaging over the data-parallel world, unscaling by the loss scale and clipping (see
// grad_numerics.hpp), applied as the first operation of the step, g * grad_scale, as every tier does. A skipped step
// (overflow) must not call step() at all, and does not count: `step` is the 1-based count of applied optimizer steps,
// which is what DeepSpeed's optimizers use for bias correction.
//
// Errors: sdk::PluginError (zhost/cpp/error.hpp), ZHOST_ERR_CONFIG for a setting out of range,
// ZHOST_ERR_INVALID_ARGUMENT for tensors or counts that do not fit the call.
#pragma once

#include <ATen/core/ATen_fwd.h>  // at::Tensor, forward-declared: no torch internals in this header

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "zhost/optimizer.h"

namespace zhost::kit {

// Note [bf16 masters without offload]: DeepSpeed's bf16_master_weights_and_grads with bf16_optimizer_states and no
// ZeRO-Offload keeps a rank's master partition, its gradients and Adam's moments on the device in bf16: 2 + 2 + 4
// bytes per owned parameter where fp32 masters and moments take 4 + 8 (the gradient partition is in the compute
// dtype either way). The kit's Adam and AdamW step such a bf16 tensor: its moments are then bf16 as well (the
// tensor's dtype, as torch's optimizers keep them), its gradient bf16 or fp32; each element is widened to fp32,
// updated with the arithmetic of Note [One optimizer arithmetic] and stored rounded to nearest even, as DeepSpeed's
// fused Adam does (Note [bf16 master weights] in zhost/kit/cpu_optimizer.hpp). On the CPU that is the fused
// kernel's adam_step_typed, so a bf16 partition steps to the same bits as the CPU tier's bf16 masters and moments;
// on CUDA, ATen ops on fp32 copies of one piece at a time (same formulas, not the same bits; never run on a GPU). Every
// other kind steps fp32 tensors only. Checkpoints hold the bf16 values widened to fp32 (exact), and loading rounds to
// nearest even (state_io.hpp), so a job resumes across fp32 and bf16 masters.

enum class OptimizerKind {
  kAdamW,  // torch.optim.AdamW: decoupled weight decay, p *= 1 - lr*wd
  kAdam,   // torch.optim.Adam: L2 weight decay, g += wd*p
  kSgd,    // torch.optim.SGD with momentum (dampening 0, no Nesterov), L2 weight decay
  kLion,   // Lion (DeepSpeed's FusedLion): sign update, decoupled weight decay
  kLamb,   // Lamb (DeepSpeed's FusedLamb): Adam's update scaled by a per-parameter trust ratio
};

std::string_view optimizer_kind_name(OptimizerKind kind);

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double lr = 1e-3;             // base lr; the lr of each step comes from the host's schedule
  double beta1 = 0.9;           // Adam*: first-moment decay; Lion: interpolation for the update
  double beta2 = 0.999;         // Adam*: second-moment decay; Lion: momentum decay (DeepSpeed: 0.99)
  double eps = 1e-8;            // Adam*
  double weight_decay = 0.0;    // DeepSpeed's FusedAdam/FusedLion default 0 (torch's AdamW says 0.01)
  double momentum = 0.0;        // SGD; 0 keeps no state
  bool bias_correction = true;  // Adam*, Lamb: DeepSpeed's FusedAdam/FusedLamb bias_correction
  double max_coeff = 10.0;      // Lamb: trust ratio clamped to [min_coeff, max_coeff] (DeepSpeed's defaults)
  double min_coeff = 0.01;

  // DeepSpeed's defaults for `kind` (Lion: betas 0.9, 0.99).
  static OptimizerSpec defaults(OptimizerKind kind);
};

// The ABI's optimizer description (zhost_optimizer_desc) to and from a spec. from_abi throws
// ZHOST_ERR_INVALID_ARGUMENT for a kind this kit does not know.
OptimizerSpec optimizer_spec_from_abi(const zhost_optimizer_desc& desc);
zhost_optimizer_desc optimizer_desc_to_abi(const OptimizerSpec& spec);

// The scalars of one step: `step` >= 1 counts applied steps (bias correction), `lr` is this step's lr, the
// gradient used is grad * grad_scale, and beta1/beta2 are this step's betas (Adam kinds, Lion, Lamb): the
// spec's, unless a momentum schedule (DeepSpeed's OneCycle) changes them; Optimizer::scalars gives the spec's.
struct StepScalars {
  int64_t step = 1;
  double lr = 0.0;
  double grad_scale = 1.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
};

// The state tensors of one stepped tensor, by name. Names follow torch.optim's state dicts so that
// checkpoints read the same: AdamW/Adam: exp_avg, exp_avg_sq; SGD: momentum_buffer; Lion: exp_avg.
// Each tensor has the stepped tensor's shape, fp32, on its device; `get` shares storage (no copy).
class OptimizerState {
 public:
  OptimizerState();
  ~OptimizerState();
  OptimizerState(OptimizerState&&) noexcept;
  OptimizerState& operator=(OptimizerState&&) noexcept;
  OptimizerState(const OptimizerState&) = delete;  // would alias the moments; export/import instead
  OptimizerState& operator=(const OptimizerState&) = delete;

  bool empty() const { return names_.empty(); }
  const std::vector<std::string>& names() const { return names_; }
  bool contains(std::string_view name) const;
  // Throws ZHOST_ERR_INVALID_ARGUMENT when the state has no tensor of that name.
  const at::Tensor& get(std::string_view name) const;
  int64_t bytes() const;
  void clear();

 private:
  friend class Optimizer;
  std::vector<std::string> names_;
  std::vector<at::Tensor> tensors_;  // tensors_[i] is named names_[i]
};

class Optimizer {
 public:
  explicit Optimizer(const OptimizerSpec& spec) : spec_(spec) {}
  virtual ~Optimizer();

  const OptimizerSpec& spec() const { return spec_; }
  OptimizerKind kind() const { return spec_.kind; }

  // One optimizer step on `param` in place (shape S, fp32 (Adam kinds: or bf16), any device; a view into a flat
  // buffer is fine, except for Lamb). `grad`: shape S, same device, fp32 (for a bf16 param: or bf16); the step uses
  // grad * grad_scale (see the top of this file). `state`: this param's state, empty before its first step, in
  // param's dtype. `scalars`: this step's.
  virtual void step(const at::Tensor& param, const at::Tensor& grad, OptimizerState& state,
                    const StepScalars& scalars) const = 0;
  // The same with the spec's betas: step >= 1 counts applied steps; lr is this step's.
  void step(const at::Tensor& param, const at::Tensor& grad, OptimizerState& state, int64_t step, double lr,
            double grad_scale = 1.0) const {
    this->step(param, grad, state, scalars(step, lr, grad_scale));
  }
  // The scalars of a step with the spec's betas.
  StepScalars scalars(int64_t step, double lr, double grad_scale = 1.0) const {
    return StepScalars{step, lr, grad_scale, spec_.beta1, spec_.beta2};
  }
  // Whether a flat buffer may be stepped in slices (every kind but Lamb, whose trust ratio is a norm over
  // the whole parameter: Note [Lamb steps whole parameters]).
  bool elementwise() const { return spec_.kind != OptimizerKind::kLamb; }

  // The names of the state tensors this optimizer keeps per stepped tensor (may be none: plain SGD).
  virtual std::vector<std::string> state_names() const = 0;

  // Bytes of optimizer state per fp32 parameter, for ZeRO's memory accounting: Adam*, Lamb: 8, SGD with
  // momentum: 4 (without: 0), Lion: 4.
  int64_t state_bytes_per_param() const;

  // Allocates `param`'s state tensors now (zeros) instead of on its first step, so that memory is
  // accounted for from the start (ZeRO's model-state report).
  void allocate_state(OptimizerState& state, const at::Tensor& param) const;
  // Checkpoint import: copies `value` (any device, fp32, param's shape) into `state` under `name`, which
  // must be one of state_names(); the copy lives on param's device, in param's dtype (rounded to nearest even
  // for a bf16 param).
  void import_state(OptimizerState& state, std::string_view name, const at::Tensor& value,
                    const at::Tensor& param) const;

 protected:
  // The state tensor `name` for `param` (a handle sharing storage): zeros like param on first use,
  // checked against param after.
  static at::Tensor state_tensor(OptimizerState& state, std::string_view name, const at::Tensor& param);
  // Throws unless param and grad are defined fp32 tensors of one shape on one device (with `bf16_params`, param
  // may be bf16 and its grad bf16 or fp32), step >= 1, lr is finite and >= 0, grad_scale finite and the betas in
  // [0, 1).
  static void check_step_arguments(const at::Tensor& param, const at::Tensor& grad, const StepScalars& scalars,
                                   bool bf16_params = false);

 private:
  OptimizerSpec spec_;
};

// For a partition that steps flat shards of parameters: throws ZHOST_ERR_CONFIG, naming `where` (its setting,
// "zero.stage = 2"), when `spec` needs whole parameters (Lamb: Note [Lamb steps whole parameters]).
void require_elementwise(const OptimizerSpec& spec, const std::string& where);

// Whether the optimizer of `spec` steps bf16 tensors (Note [bf16 masters without offload]): Adam and AdamW.
inline bool steps_bf16(const OptimizerSpec& spec) {
  return spec.kind == OptimizerKind::kAdamW || spec.kind == OptimizerKind::kAdam;
}

// Validates the spec (ZHOST_ERR_CONFIG naming the bad setting) and builds the optimizer.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec);

}  // namespace zhost::kit
