// plugins/stage3/gatherer.hpp: which fetch units are gathered when: each block's units made live at its
// pre_ hook, the units the next blocks need gathered ahead along the recorded block order (prefetch, within
// stage3_prefetch_bucket_size and stage3_max_live_parameters elements), and units released once no open
// block reads them and they are not read again within stage3_max_reuse_distance elements. Each unit moves
// through its residency state machine (unit_residency.hpp). Design: stage3_partition.hpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "plugins/stage3/block_trace.hpp"
#include "plugins/stage3/param_offload_staging.hpp"
#include "plugins/stage3/stage3_context.hpp"
#include "plugins/stage3/unit_residency.hpp"

namespace zhost::stage3 {

class Gatherer {
 public:
  Gatherer(const Stage3Context& context, ParamOffloadStaging& offload) : context_(context), offload_(offload) {}
  ~Gatherer();  // never leaves a gather in flight
  Gatherer(const Gatherer&) = delete;
  Gatherer& operator=(const Gatherer&) = delete;

  // Setup, once the layout is known: the units each block reads and the (empty) block trace.
  void setup(const zhost_partition_setup& setup);
  // Setup: the unit's parameter group (host services `params`) and the shard its gathers send (none with
  // parameter offload: the shard is loaded from the tier for each gather).
  void add_unit(int unit, const at::Tensor& shard);

  void begin_micro_batch();
  void enter(const BlockEvent& event);       // pre_forward(b), pre_backward(b)
  void leave(int32_t block, bool backward);  // post_forward(b), post_backward(b)
  // backward_end, after the reductions: every unit but the persistent one released; the block order checked
  // across ranks, and adopted when it changed.
  void end_micro_batch();

  // Gathers the persistent unit (again, in place, once its shards changed).
  void gather_persistent();
  // Outside a micro-batch: the unit's gathered storage ([N*S] compute dtype) holding its exact values,
  // gathered with intent PARAM_READ (no collective transform changes them), releasing the unit read so
  // before (gather_param). A live unit (the persistent one) is gathered again in place, and again for
  // training when the read ends, so that reading changes nothing that training sees.
  const at::Tensor& gather_alone(int unit);
  // Releases every live unit but the persistent one (a checkpoint load changes the shards).
  void release_live();
  // Completes the unit's gather in flight: the unit is live.
  void finish_gather(int unit);

 private:
  struct Unit {
    UnitResidency residency;
    zhost_param_group* group = nullptr;
    at::Tensor flat;   // [N*S] compute dtype: the materialised storage (while gathering or live)
    at::Tensor shard;  // [S] compute dtype: this rank's shard, a view into its sub-group's (none with
                       // parameter offload)
    at::Tensor send;   // what the gather in flight sends: the shard, or its staging buffer
    DLTensor send_dl{}, recv_dl{};
    zhost_segments_ext segments{};  // on the gather in flight
    zhost_work* gather_work = nullptr;
    int open_uses = 0;                     // blocks between their pre_ and post_ hooks that read this unit
    bool prefetched = false;               // gathered ahead of the event that needs it, not yet used
    bool read_exactly = false;             // holds the values of a PARAM_READ gather (gather_alone)
    bool gathered_in_micro_batch = false;  // a later gather in this micro-batch is a PARAM_REGATHER
  };

  Unit& unit_state(int unit) { return units_[static_cast<size_t>(unit)]; }
  void start_gather(int unit, zhost_collective_intent intent = ZHOST_INTENT_PARAM_GATHER);
  void make_live(int unit);
  void prefetch();
  void close_tied_reads(int32_t block);
  void maybe_release(int unit);
  void release(int unit);
  void release_alone();  // the unit gather_alone gathered, unless persistent
  ParamOffloadStaging::Slot& free_slot();

  const Stage3Context& context_;
  ParamOffloadStaging& offload_;
  std::vector<Unit> units_;
  bool in_micro_batch_ = false;
  std::vector<std::vector<int>> units_of_block_;
  // Units block b reads but does not own (tied weights, e.g. gpt's head reading the token embedding).
  // post_backward(b) waits for their gradients, which come from other blocks too; the block is done
  // reading them once the backward has moved on to the block before it (see close_tied_reads).
  std::vector<std::vector<int>> tied_units_of_block_;
  std::vector<uint8_t> tied_closed_;  // per block, this micro-batch
  int32_t last_backward_block_ = -1;
  std::unique_ptr<BlockTrace> trace_;
  int64_t live_elements_ = 0;        // gathered or gathering
  int64_t prefetched_elements_ = 0;  // gathered ahead and not yet used
  int64_t order_changes_ = 0;        // micro-batches whose block order differed from the recorded one
  int alone_unit_ = -1;              // gathered by gather_alone
};

}  // namespace zhost::stage3
