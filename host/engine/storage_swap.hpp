// host/engine/storage_swap.hpp: hot swap, at a step boundary and on every rank at the same step, of the storage
// that keeps the optimizer's states under the tier that runs the optimizer, and of the storage of stage 3's
// parameter shards: by zero.offload_optimizer.swap_schedule / zero.offload_param.swap_schedule and by
// `zhost control RUN_DIR swap --optimizer NAME | --param NAME` (Note [Control channel]).
//
// Note [Storage swap]: a swap of role R (optimizer states, or parameter shards) to storage T after step N, on
// every rank:
//   1. T's plugin: "cpu" is host memory (optimizer states: the computing tier's own; parameter shards: the CPU
//      tier's buffers); any other name is the first plugin providing offload:T on the job's search path, looked
//      up again at the swap when the job did not find it at start (a tier built while the job runs), through the
//      same trust checks and negotiation as at start; its keys are validated then against the job's config
//      (defaults where the config has none).
//   2. A new instance of it for R's role (unless T is the CPU tier that runs the optimizer, which stores
//      parameter shards itself), placed so that it is destroyed after the plugins that will use it.
//   3. COPY (optimizer states: the computing tier's optimizer_move_storage; parameter shards: the partition's
//      move_param_storage): every state or shard into T, chunk by chunk; the old storage stays in use and
//      untouched.
//   4. The ranks agree (rank_agreement.hpp). All succeeded: COMMIT everywhere, T is the storage from step N + 1
//      on, and the old storage's instance is destroyed when no other role uses it (its code stays mapped,
//      docs/abi.md "The host never unloads a plugin"). Any failed (a full disk, a tier failing mid-copy, a plugin
//      that does not load): ABORT everywhere, T's new instance is destroyed, and the job goes on with the old
//      storage, unchanged, after one warning line with the first failing rank's reason.
// Each swap is a line of RUN_DIR/swaps.jsonl (rank 0's time and bytes) and every step's record names the
// storages it ran with (metrics.jsonl "optimizer_storage", "param_storage").
// With zero.offload_optimizer.delayed_update the tier's step of step N may still run when step() returns
// (Note [Delayed parameter update]), so a swap after step N needs that step drained: the trainer marks it
// ZHOST_EXT_DRAIN when drains_after(N) says so (a scheduled swap), and the last step and the steps before the
// first delayed one are drained already. A control request that reaches the ranks after a step that was not
// drained is served one step later, after a step marked to drain.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "host/comm/comm.hpp"
#include "host/config/schema/host_rules.hpp"
#include "host/job/control_channel.hpp"
#include "host/job/job_setup.hpp"

namespace zhost::engine {

class StorageSwaps {
 public:
  // `instances`: the job's live instances (the partition and the tiers among them); `delayed_from`: the first
  // delayed step of zero.offload_optimizer.delayed_update, 0 without it; `store_timeout_s`: how long a rank
  // waits for rank 0's copy of a control request (comm.timeout_s). Rank 0 opens the control channel.
  StorageSwaps(const JobSetup& job, PluginInstances& instances, HostServices& services, comm::Comm& world,
               const std::string& run_path, int64_t delayed_from, double store_timeout_s);
  // Takes the swapped-in storages back from the host services (the instances are destroyed by their owner).
  ~StorageSwaps();
  StorageSwaps(const StorageSwaps&) = delete;
  StorageSwaps& operator=(const StorageSwaps&) = delete;

  // Where the optimizer's states are now ("cpu" or a storing tier's name); "" without a computing tier.
  const std::string& optimizer_storage() const { return optimizer_.storage; }
  // Where stage 3's parameter shards are now; "" without parameter offload.
  const std::string& param_storage() const { return params_.storage; }
  // Rank 0: the number of the oldest control request waiting (0 on other ranks and when none); the trainer
  // all-reduces it with the step's loss.
  int64_t waiting_request() const { return channel_ ? channel_->pending() : 0; }
  // Whether step `step` must carry ZHOST_EXT_DRAIN: a swap follows it in a job whose tier steps in the
  // background (a scheduled one, or a control request held over from the step before).
  bool drains_after(int64_t step) const;
  // Collective, at the boundary after `step`: the swaps the schedules put there, then control request `request`
  // (the all-reduced waiting_request(); 0: none), or, when the tier may still be stepping, a drain of the next
  // step to serve it after.
  void after_step(int64_t step, int64_t request);

 private:
  // One role's storage: the optimizer's states, or the parameter shards.
  struct Role {
    zhost_tier_role role;
    const char* name;  // "optimizer", "param": the key of swaps.jsonl, the control command and the schedule
    std::string storage;
    const PluginInstance* stored_in = nullptr;  // the storing instance; nullptr: the computing tier's memory
    std::vector<config::StorageSwapPoint> schedule;
  };
  struct Outcome {
    bool ok = false;
    std::string error;
    uint64_t bytes = 0;
    double seconds = 0;
  };
  Outcome swap(Role& role, int64_t step, const std::string& to, const std::string& origin);
  // The instance of `plugin` that will hold `role`'s storage: the CPU tier that runs the optimizer keeps
  // parameter shards itself; any other storage gets a new instance (`created`).
  const PluginInstance* storage_instance(const Role& role, const LoadedPlugin* plugin, bool* created);
  // Throws, saying why, when `role` cannot be moved in this job (no such storage, or a plugin without the ABI
  // 0.7 move function).
  void check_movable(const Role& role) const;
  // COPY, COMMIT or ABORT of `role`'s move, through the plugin that moves it (check_movable first).
  uint64_t move(const Role& role, zhost_storage_move_phase phase, const zhost_tier_ref* storage);
  // The plugin for storage `name` (nullptr: "cpu" for the optimizer), looking on the search path again if need be.
  const LoadedPlugin* find_storage(const std::string& name);
  std::map<std::string, ConfigValue> config_for(const LoadedPlugin& plugin) const;
  void serve_request(int64_t step, int64_t request);

  const JobSetup& job_;
  PluginInstances& instances_;
  HostServices& services_;
  comm::Comm& world_;
  std::string run_path_;
  bool scheduled_after(int64_t step) const;
  // Whether nothing of the tiers runs after `step` returned (Note [Delayed parameter update]).
  bool tiers_idle_after(int64_t step) const;

  int64_t delayed_from_;  // the first delayed step; 0: no delayed update
  int64_t last_step_;
  bool drain_next_ = false;  // a control request waits for the next step to drain
  double store_timeout_s_;
  const PluginInstance* partition_ = nullptr;
  const PluginInstance* compute_ = nullptr;  // the tier running the optimizer, or none
  Role optimizer_{ZHOST_TIER_FOR_OPTIMIZER_STORAGE, "optimizer", {}, nullptr, {}};
  Role params_{ZHOST_TIER_FOR_PARAMS, "param", {}, nullptr, {}};
  std::deque<Discovery> found_later_;  // plugins found on the search path after start; kept for their instances
  std::unique_ptr<control::ControlChannel> channel_;  // rank 0
};

}  // namespace zhost::engine
