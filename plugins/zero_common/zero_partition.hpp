// plugins/zero_common/zero_partition.hpp: ZeRO stages 1 and 2 behind the partition contract
// (zhost/partition.h), one class for both as in the ZeRO paper: they differ only in when gradients are
// reduced and where they wait for the step.
//
//   stage 1 (optimizer states partitioned): gradients accumulate in one flat buffer of the model's size
//     (Note [Stage 1 accumulates in its flat staging]); during the boundary micro-batch's backward they are
//     reduced in buckets from there, each rank keeping its partition's slice.
//   stage 2 (+ gradients partitioned): every micro-batch's gradients are reduced from the gradient-ready
//     hooks in buckets and accumulated into the rank's gradient partition; the host frees each .grad at
//     once (ZHOST_PLUGIN_FLAG_TAKES_GRADIENTS), so no rank holds full-size gradients.
//
// Gradients are reduced by the GradientReducer (gradient_reducer.hpp) into this rank's gradient partition.
// step() runs the step prologue (Note [Step prologue]: overflow, exact global norm, one gradient factor),
// steps the optimizer on the rank's master partition (fp32, or bf16 with bf16.master_weights_and_grads: Note [bf16
// masters without offload] in zhost/kit/optimizer.hpp), and all-gathers the updated partitions back into
// every rank's parameters in chunks of allgather_bucket_size elements.
//
// With zero.offload_optimizer.device set, the host hands over the tier serving it (tier_for): the tier
// keeps the master partition, the optimizer states and an fp32 gradient accumulator, into which the
// reduced gradients go; its step writes the updated partition, in the compute dtype, into the buffer
// the all-gather sends from. On a device with memory of its own (CUDA) the tier's memory is reached by
// staged copies: the reducer stages each bucket's reduced elements through pinned host memory while backward
// goes on; the tier writes the updated partition to pinned host memory chunk by chunk
// (zero.offload_optimizer.step_chunk_size), each chunk's copy to the device running while the next chunk
// steps, all before the all-gather.
//
// Note [Stage 1 accumulates in its flat staging]: stage 1 takes the gradients too (the host frees each .grad
// after grad_ready) and accumulates them at their places in a flat buffer that is also the reduction's staging
// (Note [Gradients accumulated where they are reduced] in zhost/zero/gradient_reducer.hpp): one full-size copy
// of the gradients instead of .grad plus a staged copy, and it is given back once the boundary's reductions
// finish, before the step's all-gather takes its buffers. x + y as autograd adds, so stage 1 still equals
// stage 0 bit for bit.
//
// Note [Transient communication buffers]: stages 1 and 2 hold no communication buffer between steps. A
// range's staging buffer is taken when its first gradient arrives and given back once the micro-batch's
// reductions finish (ReducerOptions::keep_buffers false); the sums are received straight into the gradient
// partition, or a tier's accumulator, where the dtypes match (Note [Sums written in place]); the all-gather's
// buffers live for the gather. So the
// staging of the backward and the gather of the step are never held at once, and neither adds to the memory
// between steps; the price is an allocation per reduction and per gather (pages faulted in again on the CPU).
// memory() reports the most held at once: the larger of the two.
//
// With zero.offload_optimizer.delayed_update, from step zero.offload_optimizer.delayed_update_start_step on,
// the tier's step runs in the background while the next step's forward and backward run, and its weights are
// all-gathered at the next step boundary (Note [Delayed parameter update], delayed_update.hpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "zhost/cpp/partition.hpp"
#include "zhost/kit/optimizer.hpp"
#include "zhost/zero/delayed_update.hpp"
#include "zhost/zero/flat_layout.hpp"
#include "zhost/zero/gradient_reducer.hpp"
#include "zhost/zero/plugin_calls.hpp"

namespace zhost::zero {

// DeepSpeed's zero_optimization keys as the stage plugins read them (see zero_plugin.cpp).
struct ZeroOptions {
  int stage = 1;                              // 1 or 2
  int64_t reduce_bucket_size = 500000000;     // elements per gradient bucket
  int64_t allgather_bucket_size = 500000000;  // elements per parameter all-gather (all ranks together)
  bool overlap_comm = false;
  bool ignore_unused_parameters = true;
  int64_t step_chunk = kDefaultStepChunk;  // offloaded step from a device: elements per copied chunk
  DelayedUpdateOptions delayed;            // zero.offload_optimizer.delayed_update and its keys (needs a tier)
};

class ZeroPartition : public sdk::PartitionHooks {
 public:
  ZeroPartition(const sdk::Host& host, const ZeroOptions& options);
  ~ZeroPartition();

  void setup(const zhost_partition_setup& setup);
  void begin_micro_batch(const zhost_micro_batch_args& args);
  void grad_ready(uint32_t id, const DLTensor& grad);
  void backward_end();
  void step(zhost_step_args& args);
  void memory(zhost_model_state_bytes& out) const;
  void save_state(const zhost_state_io& io);
  void load_state(const zhost_state_io& io);

 private:
  // A tier, and device memory apart from host memory: copies stage the data (copies_ is found with a tier).
  bool staged() const { return copies_.separate(); }
  struct Param {
    std::string name;
    at::Tensor model;  // the host's parameter (compute dtype)
  };

  bool reduces_now() const { return options_.stage == 2 || boundary_; }
  void attach_optimizer_tier(const zhost_partition_setup& setup);
  void gather_updated_partitions(const at::Tensor& updated);
  uint64_t gather_bytes() const;
  at::Tensor ensure_grad_partition();
  void release_gradients();
  void step_tier(const kit::StepScalars& scalars);
  void apply_weights(const at::Tensor& weights);

  sdk::Host host_;
  ZeroOptions options_;
  int rank_ = 0, world_size_ = 1;
  FlatLayout layout_;
  std::vector<Param> params_;
  at::ScalarType compute_dtype_ = at::kFloat;
  kit::OptimizerSpec optimizer_spec_;          // the job's, whoever steps it
  std::unique_ptr<kit::Optimizer> optimizer_;  // none when a tier runs the optimizer
  at::Tensor master_;                          // [S] fp32 or bf16: this rank's partition of the parameters
  kit::OptimizerState state_;
  std::vector<std::string> state_names_;  // what a checkpoint holds: "master" and the optimizer's states
  at::Tensor grad_partition_;  // [S] compute dtype: this rank's reduced gradients (stage 1: boundary to step)
  at::Tensor flat_grads_;      // stage 1: [N*S] compute dtype, the step's accumulated gradients until reduced
  GradientReducer reducer_;
  OptimizerTier tier_;      // the optimizer's offload tier (inactive without one)
  at::Tensor updated_;      // [S] compute dtype: the tier's updated partition, sent by the all-gather
  HostCopies copies_;       // to and from the tier's host memory
  StagedStep staged_step_;  // staged: the tier's step, chunk by chunk through pinned buffers
  int64_t gather_chunk_ = 0;
  bool boundary_ = true;
  // Delayed update (Note [Delayed parameter update]): grad_partition_ is then its accumulator, and the step in
  // flight writes updated_ (unstaged) or its own pinned buffer. Last: its step is joined before the buffers and
  // the tier ref it uses are destroyed.
  std::unique_ptr<DelayedTierStep> delayed_;
};

}  // namespace zhost::zero
