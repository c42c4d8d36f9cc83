// plugins/stage3/sub_group_optimizer.cpp: sub-group buffers, the sharded step and its checkpointed states (see
// the header).
#include "plugins/stage3/sub_group_optimizer.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <utility>

#include "zhost/kit/format.hpp"
#include "zhost/kit/grad_numerics.hpp"
#include "zhost/kit/state_io.hpp"
#include "zhost/zero/step_prologue.hpp"

namespace zhost::stage3 {

bool SubGroupOptimizer::find_tier(const zhost_optimizer_desc& optimizer) {
  tier_ = zero::OptimizerTier::find(context_.host);
  state_names_ = kit::checkpoint_state_names(kit::optimizer_spec_from_abi(optimizer));
  return tier_.active();
}

void SubGroupOptimizer::stage_through(const zero::HostCopies& copies) {
  copies_ = copies;
  staged_ = copies.separate();
  if (staged_) staged_step_ = zero::StagedStep(tier_, copies, context_.options.step_chunk, context_.compute_dtype);
}

void SubGroupOptimizer::set_optimizer(const zhost_optimizer_desc& optimizer, bool steps_here) {
  optimizer_spec_ = kit::optimizer_spec_from_abi(optimizer);
  kit::require_elementwise(optimizer_spec_, "zero.stage = 3");
  master_dtype_ = zero::master_dtype(context_.host, tier_, optimizer_spec_);
  if (steps_here) optimizer_ = kit::make_optimizer(optimizer_spec_);
}

// Sub-group buffers; each unit's shard, master and gradient are views into its sub-group's. When the master is
// in the compute dtype (fp32 runs; bf16 masters in bf16 runs, Note [bf16 masters without offload]) the shard is
// the master, unless a tier keeps the master. With a tier the master only passes through here, in fp32, on its
// way to host memory: it is kept off the device.
void SubGroupOptimizer::add_sub_group(size_t g) {
  const int64_t numel = context_.layout.sub_groups()[g].numel;
  const bool offloaded = tier_.active();
  SubGroupState s;
  s.master = at::zeros({numel}, (offloaded ? at::TensorOptions() : context_.on_device).dtype(master_dtype_));
  if (context_.compute_dtype != master_dtype_ || offloaded) s.shard = at::zeros({numel}, context_.on_device);
  if (!offloaded) {
    s.grad = at::zeros({numel}, context_.on_device);
    optimizer_->allocate_state(s.state, s.master);
  }
  sub_groups_.push_back(std::move(s));
}

at::Tensor SubGroupOptimizer::shard_of(int unit) const {
  const FetchUnit& layout = context_.unit(unit);
  const SubGroupState& group = group_of(unit);
  return (group.shard.defined() ? group.shard : group.master).narrow(0, layout.sub_group_offset, layout.shard);
}

void SubGroupOptimizer::master_from_shard(int unit) {
  const FetchUnit& layout = context_.unit(unit);
  const SubGroupState& group = group_of(unit);
  if (group.shard.defined())
    group.master.narrow(0, layout.sub_group_offset, layout.shard)
        .copy_(group.shard.narrow(0, layout.sub_group_offset, layout.shard));
}

// The tier named by zero.offload_optimizer.device takes sub-group g's master and optimizer states (key = the
// sub-group's index); its fp32 gradient accumulator becomes the sub-group's gradient buffer. With parameter
// offload the shards are the parameter tier's from now on.
void SubGroupOptimizer::finish_sub_group(size_t g, const zhost_optimizer_desc& optimizer) {
  SubGroupState& group = sub_groups_[g];
  if (tier_.active()) {
    group.grad = tier_.add_group(g, optimizer, group.master);
    group.master = at::Tensor();
  }
  if (offload_.active()) group.shard = at::Tensor();
}

// The step in flight writes every sub-group's weights into host buffers of the delayed update's; at the boundary
// they are copied into the shards the gathers read (staged: to the device).
void SubGroupOptimizer::delay_updates() {
  std::vector<at::Tensor> tier_accumulators;
  for (const SubGroupState& g : sub_groups_) tier_accumulators.push_back(g.grad);
  delayed_ = std::make_unique<zero::DelayedTierStep>(
      tier_, copies_, context_.options.delayed, context_.model_numel(), context_.compute_dtype,
      std::move(tier_accumulators), std::vector<at::Tensor>{},
      [this](const std::vector<at::Tensor>& weights) { write_shards(weights); });
  for (size_t g = 0; g < sub_groups_.size(); ++g) sub_groups_[g].grad = delayed_->accumulator(g);
}

void SubGroupOptimizer::write_shards(const std::vector<at::Tensor>& weights) {
  for (size_t g = 0; g < sub_groups_.size(); ++g) {
    if (staged_)
      copies_.start(weights[g], sub_groups_[g].shard).wait();
    else
      sub_groups_[g].shard.copy_(weights[g]);
  }
}

std::string SubGroupOptimizer::summary() const {
  if (tier_.active())
    return kit::format("; optimizer offloaded to tier '{}'{}", tier_.name(),
                       delayed_ ? zero::delayed_update_summary(context_.options.delayed) : std::string());
  return master_dtype_ == at::kBFloat16 ? zero::kBf16MastersSummary : "";
}

at::Tensor SubGroupOptimizer::grad_of(int unit) const {
  const FetchUnit& layout = context_.unit(unit);
  return group_of(unit).grad.narrow(0, layout.sub_group_offset, layout.shard);
}

// With the delayed update the gradients stay in its accumulators (the tier is busy with the step in flight).
void SubGroupOptimizer::grad_finished(int unit) {
  if (!tier_.active() || tier_keeps_grads_ || delayed_) return;
  const FetchUnit& layout = context_.unit(unit);
  if (layout.shard == 0) return;
  finished_max_ = std::max(finished_max_, kit::max_abs({grad_of(unit)}));  // +inf for an inf or NaN
  if (tier_.grad_done(static_cast<uint64_t>(layout.sub_group), layout.sub_group_offset, layout.shard))
    grads_moved_ = true;
  else
    tier_keeps_grads_ = true;  // it keeps every gradient in host memory: the step reads them there
}

kit::SquareSumLimbs SubGroupOptimizer::tier_grad_limbs(float global_max) const {
  int64_t largest = 0;
  for (const SubGroup& group : context_.layout.sub_groups()) largest = std::max(largest, group.numel);
  const at::Tensor buffer = at::empty({std::min<int64_t>(int64_t{1} << 22, largest)}, at::kFloat);  // <= 16 MiB
  kit::SquareSumLimbs sum;
  for (size_t g = 0; g < sub_groups_.size(); ++g) {
    const int64_t numel = context_.layout.sub_groups()[g].numel;
    for (int64_t offset = 0; offset < numel; offset += buffer.numel()) {
      const at::Tensor piece = buffer.narrow(0, 0, std::min(buffer.numel(), numel - offset));
      tier_.read_state(g, "grad", offset, piece);
      const kit::SquareSumLimbs part = kit::square_sum_limbs({piece}, global_max);
      for (int i = 0; i < kit::kSquareSumLimbs; ++i) sum.limb[i] += part.limb[i];  // exact: integers
    }
  }
  return sum;
}

bool SubGroupOptimizer::step(zhost_step_args& args) {
  // Note [Step prologue]: overflow, exact norm and the one gradient factor, over every sub-group's shard (a
  // tier's accumulators are in host memory, the collectives' scalars on the device). Gradients a tier moved
  // out (Note [Gradients in storage]) give their max as they finished and their limbs read back from the tier.
  zero::StepDecision decision;
  if (grads_moved_) {
    decision = zero::step_prologue(
        context_.host, finished_max_, [this](float global_max) { return tier_grad_limbs(global_max); },
        context_.world_size, context_.on_device.device(), args);
  } else {
    std::vector<at::Tensor> grads;
    for (const SubGroupState& g : sub_groups_) grads.push_back(g.grad);
    decision = zero::step_prologue(context_.host, grads, context_.world_size, context_.on_device.device(), args);
  }
  const kit::StepScalars scalars = zero::step_scalars(args, decision, optimizer_spec_);
  if (delayed_)
    return delayed_->step(args, decision, scalars, [this](const kit::StepScalars& now) { step_offloaded(now); });
  if (!decision.overflow) {
    if (tier_.active()) {
      step_offloaded(scalars);
    } else {
      for (SubGroupState& g : sub_groups_) {  // one sub-group at a time: at most one fp32 copy of 16-bit gradients
        const at::Tensor grad = g.grad.scalar_type() == g.master.scalar_type() ? g.grad : g.grad.to(at::kFloat);
        optimizer_->step(g.master, grad, g.state, scalars);
        if (g.shard.defined()) kit::copy_master_to_model(g.shard, g.master);
      }
      store_shards_from_masters();
    }
  }
  if (decision.overflow || !tier_.active()) {
    for (size_t i = 0; i < sub_groups_.size(); ++i) {
      if (grads_moved_)
        tier_.grad_zero(i);
      else
        sub_groups_[i].grad.zero_();
    }
  }
  grads_moved_ = false;
  finished_max_ = 0;
  return !decision.overflow;
}

// The tier steps each sub-group (unscale and clipping in its one pass, which also zeroes its accumulator)
// and writes the updated shard: into the device shard directly when training in host memory; staged, into
// pinned host memory, chunk by chunk (zero.offload_optimizer.step_chunk_size), each chunk's copy to the
// device running while the next chunk steps; with parameter offload, back into the parameter tier.
void SubGroupOptimizer::step_offloaded(const kit::StepScalars& scalars) {
  for (size_t i = 0; i < sub_groups_.size(); ++i) {
    SubGroupState& g = sub_groups_[i];
    if (offload_.active()) {
      step_into_parameter_tier(i, scalars);
    } else if (staged_) {  // chunk by chunk, each copied while the next steps
      staged_step_.step(i, scalars, g.shard);
    } else {
      tier_.step(i, scalars, g.shard);
    }
  }
  staged_step_.finish();
}

// Parameter offload: the updated shards go back to the parameter tier, unit by unit through one host
// buffer of a shard's size (kept in the staging pool between steps); a tier that steps whole groups only
// writes the whole sub-group first.
void SubGroupOptimizer::step_into_parameter_tier(size_t sub_group, const kit::StepScalars& scalars) {
  const SubGroup& group = context_.layout.sub_groups()[sub_group];
  if (!tier_.steps_ranges()) {
    at::Tensor buffer = pool_.take(group.numel);
    tier_.step(sub_group, scalars, buffer.narrow(0, 0, group.numel));
    for (int unit : group.units) {
      const FetchUnit& layout = context_.unit(unit);
      offload_.store(unit, buffer.narrow(0, layout.sub_group_offset, layout.shard));
    }
    pool_.give(std::move(buffer));
    return;
  }
  for (int unit : group.units) {
    const FetchUnit& layout = context_.unit(unit);
    at::Tensor buffer = pool_.take(layout.shard);
    const at::Tensor shard = buffer.narrow(0, 0, layout.shard);
    tier_.step_range(sub_group, layout.sub_group_offset, scalars, shard);
    offload_.store(unit, shard);
    pool_.give(std::move(buffer));
  }
}

void SubGroupOptimizer::memory(zhost_model_state_bytes& out) const {
  for (const SubGroupState& g : sub_groups_) {
    if (g.shard.defined()) {  // 16-bit shards (or any shards next to a tier's masters)
      out.params += g.shard.nbytes();
      if (g.master.defined()) out.master += g.master.nbytes();
    } else if (g.master.defined()) {  // in the compute dtype: the master is the parameter shard; an fp32 master in
      // 16-bit runs with parameter offload alone: the shard is the params tier's (Note [Parameter offload alone]),
      // the master only a master
      (offload_.active() && context_.compute_dtype != master_dtype_ ? out.master : out.params) += g.master.nbytes();
    }
    if (!tier_.active()) out.grads += g.grad.nbytes();
    out.optimizer += static_cast<uint64_t>(g.state.bytes());
  }
  if (tier_.active())  // masters, states and gradient accumulators (and, offloaded, the shards) are the tier's
    out.offloaded = delayed_ ? delayed_->tier_bytes() : tier_.bytes();  // one instance serves both roles with "cpu";
                                                                        // a busy tier is not called
}

// Each run of this rank's shards that belongs to one parameter, state by state: put into the checkpoint
// (save) or got from it (loading fills them from whatever ranks and stage saved them).
void SubGroupOptimizer::copy_states(const zhost_state_io& io, bool save) {
  const sdk::Host& host = context_.host;
  for (const FetchUnit& unit : context_.layout.units()) {
    const auto group = static_cast<size_t>(unit.sub_group);
    for_each_shard_run(unit, context_.rank, context_.param_numels,
                       [&](uint32_t param, int64_t param_offset, int64_t shard_offset, int64_t length) {
                         const int64_t offset = unit.sub_group_offset + shard_offset;
                         if (tier_.active()) {
                           for (const std::string& name : state_names_) {
                             const at::Tensor values = at::empty({length}, at::kFloat);
                             if (save) {
                               tier_.read_state(group, name, offset, values);
                               host.check(kit::put_state(io, param, name, param_offset, values));
                             } else {
                               host.check(kit::get_state(io, param, name, param_offset, values));
                               tier_.write_state(group, name, offset, values);
                             }
                           }
                           return;
                         }
                         const SubGroupState& g = sub_groups_[group];
                         for (const auto& [name, values] : kit::flat_states(g.master, g.state)) {
                           const at::Tensor run = values.narrow(0, offset, length);
                           host.check(save ? kit::put_state(io, param, name, param_offset, run)
                                           : kit::get_state(io, param, name, param_offset, run));
                         }
                       });
  }
}

void SubGroupOptimizer::load_states(const zhost_state_io& io) {
  if (delayed_) {
    delayed_->drain();
    delayed_->states_replaced();
  }
  copy_states(io, false);
}

void SubGroupOptimizer::refresh_shards() {
  if (tier_.active()) {
    refresh_shards_from_tier();
    return;
  }
  for (SubGroupState& g : sub_groups_)
    if (g.shard.defined()) kit::copy_master_to_model(g.shard, g.master);
  store_shards_from_masters();
}

// Note [Parameter offload alone]
// zero.offload_param without zero.offload_optimizer (DeepSpeed supports it: axolotl's
// zero3_bf16_cpuoffload_params, HF accelerate's model-only config): the optimizer steps on the device as without
// offload, over fp32 masters, states and gradients kept there; only the parameter shards the gathers read live in
// the params tier. After each step (and after a checkpoint's load) every unit's shard is written to the tier
// from its master, rounded to the compute dtype as copy_master_to_model rounds it, so the gathers see exactly
// what stage 3 without offload would gather. The device keeps no 16-bit shard (finish_sub_group dropped it):
// the saving is that shard, 2 bytes per owned parameter in bf16 (4 in fp32, where the master doubles as the
// shard and the tier holds a copy of it).
void SubGroupOptimizer::store_shards_from_masters() {
  if (tier_.active() || !offload_.active()) return;
  for (size_t g = 0; g < sub_groups_.size(); ++g) {
    const at::Tensor& master = sub_groups_[g].master;
    for (int unit : context_.layout.sub_groups()[g].units) {
      const FetchUnit& u = context_.unit(unit);
      const at::Tensor run = master.narrow(0, u.sub_group_offset, u.shard);
      offload_.store(unit, run.scalar_type() == context_.compute_dtype ? run.contiguous()
                                                                       : run.to(context_.compute_dtype).contiguous());
    }
  }
}

// The 16-bit shards from the tier's masters, sub-group by sub-group: into the device shards, or with parameter
// offload into the parameter tier, unit by unit.
void SubGroupOptimizer::refresh_shards_from_tier() {
  for (size_t g = 0; g < sub_groups_.size(); ++g) {
    const at::Tensor master = at::empty({context_.layout.sub_groups()[g].numel}, at::kFloat);
    tier_.read_state(g, kit::kMasterState, 0, master);
    if (!offload_.active()) {
      sub_groups_[g].shard.copy_(master);
      continue;
    }
    for (int unit : context_.layout.sub_groups()[g].units) {
      const FetchUnit& u = context_.unit(unit);
      offload_.store(unit, master.narrow(0, u.sub_group_offset, u.shard).to(context_.compute_dtype).contiguous());
    }
  }
}

}  // namespace zhost::stage3
