// plugins/stage3/param_offload_staging.hpp: zero.offload_param: this rank's parameter shards kept in a tier
// (under key param_key(unit)), and the buffer_count device staging buffers they are loaded into for their
// gather; the hot swap of that tier (Note [Storage swap]). Design: stage3_partition.hpp.
//
// A slot is free, or serves the gather in flight of one unit: the tier's load into it (until the gather
// completes), then the all-gather that sends it. Which gathers to complete to free a slot is the gatherer's
// call (gatherer.hpp); this class only keeps the slots and talks to the tiers.
//
// Note [max_in_cpu]: with zero.offload_param.device = "nvme", DeepSpeed keeps the first
// offload_param.max_in_cpu elements of each rank's 16-bit partitions in (pinned) CPU memory and puts only
// the rest on NVMe; its default, 1e9, keeps all of a model below a billion elements per rank in CPU memory.
// Stage 3 does the same with whole units' shards: walking this rank's units in order, every unit whose shard
// still fits within max_in_cpu elements (counted from the first) is kept by the optimizer's tier, which holds
// host memory (the CPU tier), and the units from the first that does not fit on by the parameter tier. Both
// load into the same staging buffers for the gathers. zhost applies the rule whenever the parameter tier is
// another instance than the optimizer's (device = "nvme", or a third-party storing tier); with device = "cpu"
// they are one and every shard is in host memory anyway. The split is made once, at setup; a storage swap
// (Note [Storage swap]) moves the units the parameter tier keeps and leaves the others where they are.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "plugins/stage3/stage3_context.hpp"
#include "zhost/zhost.h"

namespace zhost::stage3 {

// The refusal of a zero.offload_param.buffer_size below the largest shard (elements), for setup and for the
// config check (stage3.cpp): every unit's shard is loaded into one staging buffer.
std::string buffer_size_refusal(int64_t buffer_size, int64_t largest_shard);

class ParamOffloadStaging {
 public:
  struct Slot {
    at::Tensor buffer;                 // [largest shard] compute dtype, on the device
    int unit = -1;                     // the unit whose gather uses it, -1 when free
    zhost_tier_event* load = nullptr;  // the tier's load into it, until the gather completes
    zhost_tier_ref tier{};             // the tier `load` belongs to
  };
  // Completes the gather in flight of a unit (the gatherer's finish_gather).
  using FinishGather = std::function<void(int unit)>;

  explicit ParamOffloadStaging(const Stage3Context& context) : context_(context) {}
  ~ParamOffloadStaging();  // waits for the loads still in flight
  ParamOffloadStaging(const ParamOffloadStaging&) = delete;
  ParamOffloadStaging& operator=(const ParamOffloadStaging&) = delete;

  // Setup: asks the host for zero.offload_param's tier; throws when it cannot store. Without an optimizer tier
  // the fp32 masters stay on the device and only the compute-dtype shards are offloaded (Note [Parameter offload
  // alone], sub_group_optimizer.cpp).
  void find_tier();
  bool active() const { return params_tier_.instance != nullptr; }
  // Setup: throws when zero.offload_param.buffer_size is below the largest shard.
  void check_buffer_size() const;
  // Setup, before any shard is stored: which units the optimizer's tier keeps in host memory (Note
  // [max_in_cpu]); logs the split.
  void keep_within_max_in_cpu();
  // Setup, after every shard is stored: min(buffer_count, units) buffers of the largest shard's size.
  void allocate();
  // Stores `shard` ([S] compute dtype) as the unit's (at setup, after a step, after a checkpoint load).
  void store(int unit, const at::Tensor& shard);

  // Gathers: a free slot or none; the unit of the first slot (the one to complete when none is free).
  Slot* free_slot();
  int first_slot_unit() const { return staging_.front().unit; }
  bool slot_available() const;  // true without parameter offload
  // Loads the unit's shard into `dst` (a view of slot's buffer) for its gather: the gather is ordered after
  // the load on the device when the tier can order compute after its events; otherwise the host waits here.
  void load(Slot& slot, int unit, DLTensor& dst);
  // The unit's gather completed: its slot's load is waited for and the slot free.
  void release_slot_of(int unit);

  uint64_t buffer_bytes() const;
  // One phase of a hot swap of the shards' tier (Note [Storage swap]); COPY first completes the gathers that
  // still load from the old tier.
  void move_storage(zhost_tier_storage_move& args, const FinishGather& finish_gather);

 private:
  static uint64_t param_key(int unit) { return (1ull << 63) | static_cast<uint64_t>(unit); }
  bool in_host_tier(int unit) const { return !in_host_tier_.empty() && in_host_tier_[static_cast<size_t>(unit)]; }
  // The tier keeping the unit's shard: the host tier for the units within max_in_cpu, else the parameter tier.
  const zhost_tier_ref& tier_of(int unit) const { return in_host_tier(unit) ? host_tier_ : params_tier_; }
  using TierIo = zhost_status* (*)(zhost_plugin_instance*, zhost_tier_io_args*);
  // One store or load with `tier`: started (its event, or null when done), or started and waited for.
  zhost_tier_event* tier_io_start(const zhost_tier_ref& tier, TierIo io, uint64_t key, DLTensor& data);
  void tier_io(const zhost_tier_ref& tier, TierIo io, uint64_t key, DLTensor& data);
  void finish_load(Slot& slot);
  // Drops the shard of every unit the parameter tier keeps from `tier` (a storage swap's old or abandoned copy);
  // failures are logged.
  void drop_shards(const zhost_tier_ref& tier) noexcept;
  void copy_to_pending(zhost_tier_storage_move& args, const FinishGather& finish_gather);

  const Stage3Context& context_;
  zhost_tier_ref params_tier_{};          // zero.offload_param's tier
  zhost_tier_ref pending_params_tier_{};  // between a storage move's COPY and its COMMIT or ABORT
  zhost_tier_ref host_tier_{};            // the optimizer's tier, keeping the units within max_in_cpu
  std::vector<char> in_host_tier_;        // by unit; empty when no unit is kept there
  std::vector<Slot> staging_;
};

}  // namespace zhost::stage3
