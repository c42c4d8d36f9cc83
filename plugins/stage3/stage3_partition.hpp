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
#pragma once

#include <ATen/core/Tensor.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "plugins/stage3/block_trace.hpp"
#include "plugins/stage3/fetch_units.hpp"
#include "plugins/stage3/rank_agreement.hpp"
#include "plugins/zero_common/plugin_calls.hpp"
#include "zhost/cpp/partition.hpp"
#include "zhost/kit/optimizer.hpp"
#include "zhost/offload.h"

namespace zhost::stage3 {

// DeepSpeed's zero_optimization keys as stage 3 reads them (see stage3.cpp),
// counts in elements.
struct Stage3Options {
  int64_t prefetch_bucket_size = 50000000;
  int64_t max_live_parameters = 1000000000;
  int64_t max_reuse_distance = 1000000000;
  int64_t persistence_threshold = 100000;
  int64_t sub_group_size = 1000000000;
  int64_t reduce_bucket_size = 500000000;
  bool overlap_comm = false;
  bool ignore_unused_parameters = true;
  int64_t offload_buffer_count = 5;              // zero.offload_param: staging buffers for parameter shards
  int64_t offload_buffer_size = 100000000;       // elements each (at most; sized to the largest shard)
  int64_t step_chunk = zero::kDefaultStepChunk;  // offloaded step from a device: elements per copied chunk
  bool agree_each_collective = true;             // zero.stage3_rank_agreement
};

class Stage3Partition : public sdk::PartitionHooks {
 public:
  Stage3Partition(const sdk::Host& host, const Stage3Options& options);
  ~Stage3Partition();

  void setup(const zhost_partition_setup& setup);
  void begin_micro_batch(const zhost_micro_batch_args& args);
  void pre_forward(int32_t block) { enter(BlockEvent{false, block}); }
  void post_forward(int32_t block) { leave(block, false); }
  void pre_backward(int32_t block) { enter(BlockEvent{true, block}); }
  void post_backward(int32_t block) { leave(block, true); }
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
  // A tier, and device memory apart from host memory: copies stage the data (copies_ is found with a tier).
  bool staged() const { return copies_.separate(); }
  enum class Residency { kReleased, kGathering, kLive };
  struct UnitState {
    Residency residency = Residency::kReleased;
    zhost_param_group* group = nullptr;
    at::Tensor flat;   // [N*S] compute dtype: the materialised storage (while
                       // gathering or live)
    at::Tensor shard;  // [S] compute dtype: this rank's shard (fp32 runs: a view
                       // of the master)
    at::Tensor grad;   // [S] compute dtype view into the sub-group's reduced gradients
    at::Tensor send;   // what the gather in flight sends: the shard, or its staging buffer
    DLTensor send_dl{}, recv_dl{};
    zhost_work* gather_work = nullptr;
    int open_uses = 0;        // blocks between their pre_ and post_ hooks that read this unit
    bool prefetched = false;  // gathered ahead of the event that needs it, not yet used
    // gradients of the current micro-batch
    at::Tensor grad_staging;  // [N*S] compute dtype, from the first gradient to
                              // the reduction's end
    at::Tensor reduced;       // [S] this rank's reduced elements
    DLTensor staging_dl{}, reduced_dl{};
    zhost_work* reduce_work = nullptr;
    int grads_pending = 0;
    bool reduced_this_micro_batch = false;
  };
  struct SubGroupState {
    at::Tensor master;  // [G] fp32 (none with a tier: it keeps the masters)
    at::Tensor shard;   // [G] compute dtype (16-bit runs; fp32 runs use master)
    at::Tensor grad;    // [G] compute dtype (with a tier: its fp32 accumulator)
    kit::OptimizerState state;
  };

  void enter(const BlockEvent& event);
  void leave(int32_t block, bool backward);
  void close_tied_reads(int32_t block);
  void start_gather(int unit);
  void finish_gather(int unit);
  void make_live(int unit);
  void prefetch();
  void maybe_release(int unit);
  void release(int unit);
  void launch_reduction(int unit);
  void finish_reduction(int unit);
  struct Staging {  // parameter offload: a buffer the shard is loaded into for its gather
    at::Tensor buffer;
    int unit = -1;                     // the unit whose gather uses it, -1 when free
    zhost_tier_event* load = nullptr;  // the tier's load into it, until the gather completes
  };
  static uint64_t param_key(int unit) { return (1ull << 63) | static_cast<uint64_t>(unit); }
  Staging& free_staging();
  bool staging_available() const;
  using TierIo = zhost_status* (*)(zhost_plugin_instance*, zhost_tier_io_args*);
  // One store or load with `tier` (params_tier_ when not given): started, or started and waited for.
  zhost_tier_event* tier_io_start(const zhost_tier_ref& tier, TierIo io, uint64_t key, DLTensor& data);
  zhost_tier_event* tier_io_start(TierIo io, uint64_t key, DLTensor& data) {
    return tier_io_start(params_tier_, io, key, data);
  }
  void tier_io(const zhost_tier_ref& tier, TierIo io, uint64_t key, DLTensor& data);
  void tier_io(TierIo io, uint64_t key, DLTensor& data) { tier_io(params_tier_, io, key, data); }
  // Drops every unit's shard from `tier` (a storage swap's old or abandoned copy); failures are logged.
  void drop_parameter_shards(const zhost_tier_ref& tier) noexcept;
  void load_shard(Staging& slot, int unit, DLTensor& dst);
  void finish_load(Staging& slot);
  void init_unit(int u);
  int64_t largest_shard() const;  // elements of the largest unit's shard
  void check_offload_buffer_size() const;
  void store_parameter_shard(int unit);
  void allocate_parameter_staging();
  void hand_optimizer_to_tier(size_t g, const zhost_optimizer_desc& optimizer);
  void gather_persistent();
  void stage_to_host(int unit, const at::Tensor& mine);
  void drain_oldest_to_host();
  at::Tensor take_host(int64_t numel);
  void give_host(at::Tensor buffer);
  void step_offloaded(double grad_scale, int64_t step, double lr);
  void step_into_parameter_tier(size_t sub_group, double grad_scale, int64_t step, double lr);
  std::string unit_name(int unit) const;
  // Checkpoints: calls visit(param, param_offset, sub_group, offset in the sub-group, length) for each run of
  // this rank's shards that belongs to one parameter.
  template <typename Visit>
  void for_each_shard_run(Visit&& visit) const;
  void refresh_shards_from_tier();
  const zhost_param_services& params() const;

  sdk::Host host_;
  Stage3Options options_;
  int rank_ = 0, world_size_ = 1;
  at::ScalarType compute_dtype_ = at::kFloat;
  at::TensorOptions on_device_;
  std::vector<std::string> param_names_;
  std::vector<int64_t> param_numels_;
  FetchUnits layout_;
  std::vector<UnitState> units_;
  std::vector<SubGroupState> sub_groups_;
  std::vector<std::vector<int>> units_of_block_;
  // Units block b reads but does not own (tied weights, e.g. gpt's head reading the token embedding).
  // post_backward(b) waits for their gradients, which come from other blocks too; the block is done
  // reading them once the backward has moved on to the block before it (see close_tied_reads).
  std::vector<std::vector<int>> tied_units_of_block_;
  std::vector<uint8_t> tied_closed_;  // per block, this micro-batch
  int32_t last_backward_block_ = -1;
  std::unique_ptr<BlockTrace> trace_;
  RankAgreement agreement_;
  std::unique_ptr<kit::Optimizer> optimizer_;  // none when a tier runs the optimizer
  std::vector<std::string> state_names_;       // what a checkpoint holds: "master" and the optimizer's states
  zero::OptimizerTier tier_;                   // zero.offload_optimizer's tier (inactive without one)
  zhost_tier_ref params_tier_{};               // zero.offload_param's tier (with parameter offload)
  zhost_tier_ref pending_params_tier_{};       // between a parameter storage move's COPY and its COMMIT or ABORT
  std::vector<Staging> staging_;               // parameter offload: buffers the shards are gathered from
  zero::HostCopies copies_;                    // to and from the tier's host memory
  struct ToHost {                              // a unit's reduced gradient shard on its way to the tier's accumulator
    int unit;
    zero::HostCopies::Copy copy;
    at::Tensor host;    // pinned, at least the shard's length
    at::Tensor source;  // the device shard, kept until the copy is drained
  };
  std::deque<ToHost> to_host_;
  int64_t to_host_elements_ = 0;
  std::vector<at::Tensor> free_host_;  // pinned staging buffers not in use (compute dtype)
  zero::StagedStep staged_step_;       // staged: the tier's step, chunk by chunk through pinned buffers
  std::vector<uint8_t> arrived_;       // per parameter, this micro-batch
  std::deque<int> reductions_;         // units whose reduction is in flight, oldest first
  int64_t reducing_elements_ = 0;
  int64_t live_elements_ = 0;        // gathered or gathering
  int64_t prefetched_elements_ = 0;  // gathered ahead and not yet used
  int64_t step_ = 0;
  int32_t micro_step_ = 0;
  int64_t order_changes_ = 0;  // micro-batches whose block order differed from the recorded one
  int saving_unit_ = -1;       // gathered for gather_param
  bool in_micro_batch_ = false;
};

}  // namespace zhost::stage3
