// plugins/stage3/sub_group_optimizer.hpp: the optimizer over this rank's shards, sub-group by sub-group
// (DeepSpeed's sub_group_size; fetch_units.hpp): each sub-group's master (fp32, or bf16: Note [bf16 masters without
// offload] in zhost/kit/optimizer.hpp), 16-bit shard, gradient and
// optimizer states, or, with zero.offload_optimizer, the tier's group of the same index; the step (unscale,
// global norm, clip, then one sub-group at a time), delayed with zero.offload_optimizer.delayed_update (Note
// [Delayed parameter update]: every sub-group is a group of the DelayedTierStep); and the checkpointed states.
// Design: stage3_partition.hpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plugins/stage3/param_offload_staging.hpp"
#include "plugins/stage3/stage3_context.hpp"
#include "plugins/stage3/staging_pool.hpp"
#include "zhost/kit/grad_numerics.hpp"
#include "zhost/kit/optimizer.hpp"
#include "zhost/zero/delayed_update.hpp"

namespace zhost::stage3 {

class SubGroupOptimizer {
 public:
  SubGroupOptimizer(const Stage3Context& context, HostStagingPool& pool, ParamOffloadStaging& offload)
      : context_(context), pool_(pool), offload_(offload) {}
  SubGroupOptimizer(const SubGroupOptimizer&) = delete;
  SubGroupOptimizer& operator=(const SubGroupOptimizer&) = delete;

  // Setup, in this order: the tier named by zero.offload_optimizer (if any) and the checkpoint's state names;
  bool find_tier(const zhost_optimizer_desc& optimizer);  // returns whether a tier runs the optimizer
  bool offloaded() const { return tier_.active(); }
  const zero::OptimizerTier& tier() const { return tier_; }
  // with a tier, the copies that reach its memory (a staged step when they are separate); the job's optimizer,
  // built here when no tier runs it (`steps_here`);
  void stage_through(const zero::HostCopies& copies);
  void set_optimizer(const zhost_optimizer_desc& optimizer, bool steps_here);
  // then each sub-group: its buffers; each unit's shard filled (shard_of) and its master taken from it
  // (master_from_shard); then its master and states handed to the tier, the device shards dropped with
  // parameter offload (finish_sub_group).
  void add_sub_group(size_t g);
  at::Tensor shard_of(int unit) const;  // [S] compute dtype view (a master in the compute dtype: the master's)
  void master_from_shard(int unit);
  void finish_sub_group(size_t g, const zhost_optimizer_desc& optimizer);
  // After the last sub-group, with a tier: delays its steps as zero.offload_optimizer.delayed_update says (Note
  // [Delayed parameter update]); the sub-groups' gradients then wait in the delayed update's accumulators, and
  // its steps write the shards at the boundary.
  void delay_updates();
  at::Tensor grad_of(int unit) const;  // [S] view into its sub-group's gradient (the tier's accumulator)
  // The unit's gradient is complete for this step: with a tier, its largest magnitude is kept for the step's
  // norm and the tier told, so that it may move the range out of host memory (Note [Gradients in storage]).
  void grad_finished(int unit);

  // Unscale, norm, clip and step; the gradients zeroed. Returns whether the shards changed (no overflow; with
  // the delayed update: an update applied at the boundary, or a step taken at once).
  bool step(zhost_step_args& args);
  // Completes a delayed update's step in flight, writing the optimizer's weights into the shards; returns whether
  // it wrote any. Before anything reads or replaces the tier's states.
  bool drain() { return delayed_ && delayed_->drain(); }
  void memory(zhost_model_state_bytes& out) const;  // all but `buffers`
  uint64_t buffer_bytes() const { return delayed_ ? delayed_->buffer_bytes() : 0; }
  // Checkpoints (docs/checkpoints.md): this rank's shards of the masters and optimizer states, parameter by
  // parameter, from the sub-groups or the tier that holds them (save_state) or into them (load_states).
  // save_state after drain(); load_states drains itself (the loaded states replace the step in flight's).
  void save_state(const zhost_state_io& io) { copy_states(io, true); }
  void load_states(const zhost_state_io& io);
  // After load_states: the 16-bit shards from the masters (in the parameter tier with parameter offload).
  void refresh_shards();
  // Where the optimizer runs, for the setup line: "; optimizer offloaded to tier ..." (and the delayed update's
  // summary), the bf16 masters kept here, or "".
  std::string summary() const;

 private:
  struct SubGroupState {
    at::Tensor master;  // [G] master_dtype_ (none with a tier: it keeps the masters)
    at::Tensor shard;   // [G] compute dtype (none when the master is in the compute dtype: it is the shard)
    at::Tensor grad;    // [G] compute dtype (with a tier: its fp32 accumulator)
    kit::OptimizerState state;
  };

  const SubGroupState& group_of(int unit) const {
    return sub_groups_[static_cast<size_t>(context_.unit(unit).sub_group)];
  }
  void step_offloaded(const kit::StepScalars& scalars);
  // The delayed update's weights (one [G] host tensor per sub-group) into the shards the gathers read.
  void write_shards(const std::vector<at::Tensor>& weights);
  // This rank's part of Note [Exact gradient norm] step 2, reading the tier's accumulators piece by piece.
  kit::SquareSumLimbs tier_grad_limbs(float global_max) const;
  void step_into_parameter_tier(size_t sub_group, const kit::StepScalars& scalars);
  void copy_states(const zhost_state_io& io, bool save);
  void refresh_shards_from_tier();
  // Parameter offload without a tier running the optimizer: every unit's shard from its master into the params
  // tier (Note [Parameter offload alone], sub_group_optimizer.cpp); nothing otherwise.
  void store_shards_from_masters();

  const Stage3Context& context_;
  HostStagingPool& pool_;
  ParamOffloadStaging& offload_;
  std::vector<SubGroupState> sub_groups_;
  kit::OptimizerSpec optimizer_spec_;          // the job's, whoever steps it
  std::unique_ptr<kit::Optimizer> optimizer_;  // none when a tier runs the optimizer
  std::vector<std::string> state_names_;       // what a checkpoint holds: "master" and the optimizer's states
  at::ScalarType master_dtype_ = at::kFloat;   // of the masters kept here (zero::master_dtype)
  zero::OptimizerTier tier_;                   // zero.offload_optimizer's tier (inactive without one)
  bool staged_ = false;                        // the tier's memory is reached by copies (a device of its own)
  zero::HostCopies copies_;                    // to and from the tier's host memory
  zero::StagedStep staged_step_;               // staged: the tier's step, chunk by chunk through pinned buffers
  bool grads_moved_ = false;                   // the tier may hold some of this step's gradients outside host memory
  float finished_max_ = 0;                     // max |g| over the units finished this step
  bool tier_keeps_grads_ = false;              // the tier answered that it keeps gradients in host memory
  // Last: its step in flight is joined before the buffers and the tier it uses are destroyed.
  std::unique_ptr<zero::DelayedTierStep> delayed_;
};

}  // namespace zhost::stage3
