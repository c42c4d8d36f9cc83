// plugins/stage3/stage3_partition.hpp: ZeRO stage 3 behind the partition contract (zhost/partition.h):
// parameters, gradients, fp32 masters and optimizer states all partitioned, 1/N of each per rank.
//
// The host builds the model without storage (ZHOST_PLUGIN_FLAG_PARTITIONS_PARAMETERS); setup() binds each
// fetch unit's parameters to one flat storage (host services `params`) and fills this rank's shards from
// the parameters' initial values, so no rank ever holds the whole model.
//
// One micro-batch:
//   pre_forward(b), pre_backward(b)    the units block b reads are gathered (all-gather of the N shards into
//                                      the unit's materialised storage) unless live or prefetched; then,
//                                      while the micro-batch follows the recorded block order, the units
//                                      the next blocks need are gathered ahead, asynchronously, within
//                                      stage3_prefetch_bucket_size elements in flight and
//                                      stage3_max_live_parameters live
//   post_forward(b), post_backward(b)  units no open block reads are released unless persistent or read
//                                      again within stage3_max_reuse_distance elements (a block's reads of
//                                      tied weights it does not own end at the next pre_backward)
//   grad_ready(p)                      copied into its unit's gradient staging; a unit whose gradients are
//                                      all in is reduce-scattered at once (asynchronously with
//                                      overlap_comm, at most reduce_bucket_size elements in flight) and
//                                      added into this rank's shard
//   backward_end()                     remaining units reduced, all reductions complete, gathered units
//                                      released, block order checked across ranks
//   step()                             unscale, global norm, clip; the optimizer steps sub-group by
//                                      sub-group on the fp32 masters (or the offload tier does); 16-bit
//                                      shards refreshed; the persistent unit gathered again
//
// Ranks check that they walk the blocks alike (rank_agreement.hpp): before every gather and reduction by
// default, or once per micro-batch; at backward_end in both modes.
//
// Offload: with zero.offload_optimizer each sub-group is one group of the tier (masters, states and the
// fp32 gradient accumulator there); with zero.offload_param too, the shards live in the tier and are loaded
// into one of buffer_count staging buffers for their gather. On a device with memory of its own (CUDA) the
// tier is reached by staged copies through pinned host memory: a unit's reduced gradient shard leaves for
// the host as its reduction completes, while backward goes on, and is added into the tier's accumulator
// when drained (within reduce_bucket_size elements in flight, and at backward_end); at the step, each chunk
// of updated shards (step_chunk_size elements) is copied back to the device while the next chunk steps.
// With zero.offload_optimizer.delayed_update (not with zero.offload_param) the tier steps every sub-group in the
// background while the next step's forward and backward gather the shards as they were; the new shards are
// written at the next boundary (Note [Delayed parameter update]).
//
// The pieces, each in a file of its own, all reading the shared Stage3Context (stage3_context.hpp):
//   fetch_units.hpp          how parameters are grouped into units, sharded and sub-grouped
//   block_trace.hpp          the recorded block order
//   unit_residency.hpp       a unit's Released -> Gathering -> Live state machine, transitions checked
//   gatherer.hpp             gathers, prefetch along the block trace, releases (the pre_/post_ hooks)
//   zhost/zero/gradient_reducer.hpp  the stages' one gradient reduction (the SDK), a range per unit (grad_ready,
//                            backward_end)
//   sub_group_optimizer.hpp  the sub-grouped step on the masters or in the tier; checkpointed states
//   param_offload_staging.hpp  zero.offload_param: shards in a tier, device staging buffers, storage swap
//   staging_pool.hpp         pinned host buffers reused for the copies to and from a tier
//   rank_agreement.hpp       ranks checking they walk the blocks alike
// Stage3Partition wires them together in the order the hooks call for.
#pragma once

#include <ATen/core/Tensor.h>

#include "plugins/stage3/block_trace.hpp"
#include "plugins/stage3/gatherer.hpp"
#include "plugins/stage3/param_offload_staging.hpp"
#include "plugins/stage3/stage3_context.hpp"
#include "plugins/stage3/staging_pool.hpp"
#include "plugins/stage3/sub_group_optimizer.hpp"
#include "zhost/cpp/partition.hpp"
#include "zhost/zero/gradient_reducer.hpp"

namespace zhost::stage3 {

class Stage3Partition : public sdk::PartitionHooks {
 public:
  Stage3Partition(const sdk::Host& host, const Stage3Options& options);
  Stage3Partition(const Stage3Partition&) = delete;  // the pieces refer to context_ and to each other
  Stage3Partition& operator=(const Stage3Partition&) = delete;

  void setup(const zhost_partition_setup& setup);
  void begin_micro_batch(const zhost_micro_batch_args& args);
  void pre_forward(int32_t block) { gatherer_.enter(BlockEvent{false, block}); }
  void post_forward(int32_t block) { gatherer_.leave(block, false); }
  void pre_backward(int32_t block) { gatherer_.enter(BlockEvent{true, block}); }
  void post_backward(int32_t block) { gatherer_.leave(block, true); }
  void grad_ready(uint32_t id, const DLTensor& grad);
  void backward_end();
  void step(zhost_step_args& args);
  void memory(zhost_model_state_bytes& out) const;
  void gather_param(uint32_t id, DLTensor& out);
  void save_state(const zhost_state_io& io);
  void load_state(const zhost_state_io& io);
  // Hot swap (Note [Storage swap]): the shards from the params tier into another storing tier, phase by phase.
  void move_param_storage(zhost_tier_storage_move& args);

 private:
  // Unit u's parameter group and this rank's shard of it (a view into its sub-group's buffers, built
  // already): the shard starts from the parameters' initial values (the padding stays zero), in the compute
  // dtype, as the unpartitioned model holds them; the fp32 master starts from those values.
  void init_unit(int u);
  void delay_updates(const zhost_optimizer_desc& optimizer);
  void setup_reducer(const zero::HostCopies& copies);
  void log_setup(const zhost_partition_setup& setup) const;

  // Destroyed in reverse: gathers, then reductions and their copies, then parameter loads are completed.
  Stage3Context context_;
  HostStagingPool pool_;
  ParamOffloadStaging offload_;
  SubGroupOptimizer optimizer_;
  zero::GradientReducer reducer_;
  Gatherer gatherer_;
  bool in_micro_batch_ = false;
};

}  // namespace zhost::stage3
