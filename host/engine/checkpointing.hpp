// host/engine/checkpointing.hpp: a job's checkpoints (docs/checkpoints.md). The partition plugin hands over its
// masters and optimizer states as fragments (zhost_state_io, ABI 0.5) and loads them back whatever world size
// and stage saved them; the host adds its own position (step counters, loss scaler, every rank's RNG). Files
// and folder protocol: host/checkpoint (Note [Checkpoint layout], Note [Checkpoint atomicity]).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
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
  // zhost::Error on every rank when any rank failed; the previous checkpoints stay as they were.
  void save(const TrainingPosition& position);
  // Collective, after the partition's setup and before the first step: restores the partition plugin's states
  // and this rank's RNG from checkpoint.resume; returns the host's position.
  TrainingPosition load();

 private:
  CheckpointSettings settings_;
  comm::Comm& world_;
  const PluginInstance& partition_;
  std::vector<checkpoint::ParamShape> params_;
  std::vector<std::string> states_;
  nlohmann::json job_;
};

}  // namespace zhost::engine
