// plugins/stage3/param_offload_staging.hpp: zero.offload_param: this rank's parameter shards kept in a tier
// (under key param_key(unit)), and the buffer_count device staging buffers they are loaded into for their
// gather; the hot swap of that tier (Note [Storage swap]). Design: stage3_partition.hpp.
//
// A slot is free, or serves the gather in flight of one unit: the tier's load into it (until the gather
// completes), then the all-gather that sends it. Which gathers to complete to free a slot is the gatherer's
// call (gatherer.hpp); this class only keeps the slots and talks to the tier.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "plugins/stage3/stage3_context.hpp"
#include "zhost/offload.h"

namespace zhost::stage3 {

class ParamOffloadStaging {
 public:
  struct Slot {
    at::Tensor buffer;                 // [largest shard] compute dtype, on the device
    int unit = -1;                     // the unit whose gather uses it, -1 when free
    zhost_tier_event* load = nullptr;  // the tier's load into it, until the gather completes
  };
  // Completes the gather in flight of a unit (the gatherer's finish_gather).
  using FinishGather = std::function<void(int unit)>;

  explicit ParamOffloadStaging(const Stage3Context& context) : context_(context) {}
  ~ParamOffloadStaging();  // waits for the loads still in flight
  ParamOffloadStaging(const ParamOffloadStaging&) = delete;
  ParamOffloadStaging& operator=(const ParamOffloadStaging&) = delete;

  // Setup: asks the host for zero.offload_param's tier; throws when it is set without an optimizer tier
  // (`optimizer_offloaded`) or cannot store.
  void find_tier(bool optimizer_offloaded);
  bool active() const { return params_tier_.instance != nullptr; }
  // Setup: throws when zero.offload_param.buffer_size is below the largest shard.
  void check_buffer_size() const;
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
  using TierIo = zhost_status* (*)(zhost_plugin_instance*, zhost_tier_io_args*);
  // One store or load with `tier`: started (its event, or null when done), or started and waited for.
  zhost_tier_event* tier_io_start(const zhost_tier_ref& tier, TierIo io, uint64_t key, DLTensor& data);
  void tier_io(const zhost_tier_ref& tier, TierIo io, uint64_t key, DLTensor& data);
  void finish_load(Slot& slot);
  // Drops every unit's shard from `tier` (a storage swap's old or abandoned copy); failures are logged.
  void drop_shards(const zhost_tier_ref& tier) noexcept;
  void copy_to_pending(zhost_tier_storage_move& args, const FinishGather& finish_gather);

  const Stage3Context& context_;
  zhost_tier_ref params_tier_{};          // zero.offload_param's tier
  zhost_tier_ref pending_params_tier_{};  // between a storage move's COPY and its COMMIT or ABORT
  std::vector<Slot> staging_;
};

}  // namespace zhost::stage3
