// host/engine/checkpointing.hpp: a job's checkpoints (docs/checkpoints.md). The partition plugin hands over its
// masters and optimizer states as fragments (zhost_state_io) and loads them back whatever world size
// and stage saved them; the host adds its own position (step counters, loss scaler, every rank's RNG). Files
// and folder protocol: host/checkpoint (Note [Checkpoint layout], Note [Checkpoint atomicity]).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "host/checkpoint/checkpoint_format.hpp"
#include "host/comm/comm.hpp"
#include "host/engine/settings.hpp"
#include "host/optim/loss_scaler.hpp"
#include "host/plugins/instances.hpp"

namespace zhost::engine {

// Where training stands after `step` steps: what the host's part of a checkpoint restores.
struct TrainingPosition {
  int64_t step = 0;  // steps done, applied or skipped (the data position: the next batch is step + 1's)
  int64_t applied_steps = 0;
  int64_t skipped_steps = 0;
  optim::LossScaler::State scaler;
  std::string precision;  // the precision the position was saved in (the scaler means something in fp16 only)
};

// An asynchronous save's snapshot: one fragment of state copied out of the plugin.
struct SnapshotFragment {
  uint32_t param;
  std::string state;
  int64_t offset;
  std::vector<float> values;
};

class Checkpointer {
 public:
  // `params`: the model's parameters by id (names, shapes); `states`: "master" and the optimizer's state names;
  // `job`: what the checkpoint records of the job (model, optimizer, stage, batch...) and checks on resume.
  Checkpointer(const CheckpointSettings& settings, comm::Comm& world, const PluginInstance& partition,
               std::vector<checkpoint::ParamShape> params, std::vector<std::string> states, nlohmann::json job);
  ~Checkpointer();

  // Whether a checkpoint is due after `step` of `last_step` (checkpoint.interval, checkpoint.at_end).
  bool due(int64_t step, int64_t last_step) const;
  // Collective: every rank writes its shard, rank 0 publishes (Note [Checkpoint atomicity]). Throws
  // zhost::Error on every rank when any rank failed; the previous checkpoints stay as they were. With
  // experimental.checkpoint_async the shard is a snapshot in host memory, written on a thread while training goes on,
  // and the checkpoint is published by a later progress() or drain().
  void save(const TrainingPosition& position);
  // Collective, at every step boundary: publishes an asynchronous save once every rank has written its shard
  // (one small all-reduce while one is in flight; nothing otherwise).
  void progress();
  // Collective: waits for an asynchronous save in flight and publishes it (before another save and at the end).
  void drain();
  // Collective, after the partition's setup and before the first step: restores the partition plugin's states
  // and this rank's RNG from checkpoint.resume; returns the host's position.
  TrainingPosition load();

 private:
  struct PendingSave {
    TrainingPosition position;
    std::chrono::steady_clock::time_point start;
    double snapshot_s = 0;
    std::vector<SnapshotFragment> snapshot;
    std::thread writer;
    std::atomic<bool> written{false};
    std::string error;  // this rank's failure, "" when none
    uint64_t bytes = 0;
  };
  uint64_t collect_state(checkpoint::ShardWriter* writer, std::vector<SnapshotFragment>* snapshot);
  void complete(PendingSave& save);

  std::unique_ptr<PendingSave> pending_;
  CheckpointSettings settings_;
  comm::Comm& world_;
  const PluginInstance& partition_;
  std::vector<checkpoint::ParamShape> params_;
  std::vector<std::string> states_;
  nlohmann::json job_;
};

}  // namespace zhost::engine
