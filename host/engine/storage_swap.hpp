// host/engine/storage_swap.hpp: hot swap of the storage that keeps the optimizer's states under the tier that
// runs the optimizer, at a step boundary, on every rank at the same step: by zero.offload_optimizer.swap_schedule
// and by `zhost control RUN_DIR swap --optimizer NAME` (Note [Control channel]).
//
// Note [Storage swap]: a swap to storage T after step N, on every rank:
//   1. T's plugin: "cpu" is the computing tier's own host memory; any other name is the first plugin providing
//      offload:T on the job's search path, looked up again at the swap when the job did not find it at start
//      (a tier built while the job runs), through the same trust checks and negotiation as at start; its keys
//      are validated then against the job's config (defaults where the config has none).
//   2. A new instance of it for the optimizer-storage role, placed so that it is destroyed after the computing
//      tier that will use it.
//   3. The computing tier's optimizer_move_storage COPY: each group's master and states, chunk by chunk through
//      the tier's staging, into T; the old storage stays in use and untouched.
//   4. The ranks agree (rank_agreement.hpp). All succeeded: COMMIT everywhere, T is the storage from step N + 1
//      on, and the old storage's instance is destroyed (nothing refers to it any more; its code stays mapped,
//      docs/abi.md "The host never unloads a plugin"). Any failed (a full disk, a tier failing mid-copy, a plugin
//      that does not load): ABORT everywhere, T's instance is destroyed, and the job goes on with the old
//      storage, unchanged, after one warning line with the first failing rank's reason.
// Each swap is a line of RUN_DIR/swaps.jsonl (rank 0's time and bytes) and every step's record names the storage
// it ran with (metrics.jsonl "optimizer_storage").
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "host/comm/comm.hpp"
#include "host/config/host_rules.hpp"
#include "host/job/control_channel.hpp"
#include "host/job/job_setup.hpp"

namespace zhost::engine {

class StorageSwaps {
 public:
  // `instances`: the job's live instances (the computing tier among them); `delayed_update`: the job runs
  // zero.offload_optimizer.delayed_update, which a swap cannot drain (refused); `store_timeout_s`: how long a
  // rank waits for rank 0's copy of a control request (comm.timeout_s). Rank 0 opens the control channel.
  StorageSwaps(const JobSetup& job, PluginInstances& instances, HostServices& services, comm::Comm& world,
               const std::string& run_path, bool delayed_update, double store_timeout_s);
  // Takes the swapped-in storage back from the host services (the instances are destroyed by their owner).
  ~StorageSwaps();
  StorageSwaps(const StorageSwaps&) = delete;
  StorageSwaps& operator=(const StorageSwaps&) = delete;

  // The storage the optimizer's states are in now ("cpu", "nvme", a tier's name); "" without a computing tier.
  const std::string& storage() const { return storage_; }
  // Rank 0: the number of the oldest control request waiting (0 on other ranks and when none); the trainer
  // all-reduces it with the step's loss.
  int64_t waiting_request() const { return channel_ ? channel_->pending() : 0; }
  // Collective, at the boundary after `step`: the swap the schedule puts there, then control request `request`
  // (the all-reduced waiting_request(); 0: none).
  void after_step(int64_t step, int64_t request);

 private:
  struct Outcome {
    bool ok = false;
    std::string error;
    uint64_t bytes = 0;
    double seconds = 0;
  };
  Outcome swap(int64_t step, const std::string& to, const std::string& origin);
  // The plugin for storage `name` (nullptr: "cpu"), looking on the search path again if need be.
  const LoadedPlugin* find_storage(const std::string& name);
  std::map<std::string, ConfigValue> config_for(const LoadedPlugin& plugin) const;
  void serve_request(int64_t step, int64_t request);

  const JobSetup& job_;
  PluginInstances& instances_;
  HostServices& services_;
  comm::Comm& world_;
  std::string run_path_;
  bool delayed_update_;
  double store_timeout_s_;
  std::vector<config::StorageSwapPoint> schedule_;
  const PluginInstance* compute_ = nullptr;    // the tier running the optimizer, or none
  const PluginInstance* stored_in_ = nullptr;  // the storage tier's instance; nullptr: the computing tier's memory
  std::string storage_;
  std::deque<Discovery> found_later_;  // plugins found on the search path after start; kept for their instances
  std::unique_ptr<control::ControlChannel> channel_;  // rank 0
};

}  // namespace zhost::engine
