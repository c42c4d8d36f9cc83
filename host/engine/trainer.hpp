// host/engine/trainer.hpp: the training loop of one rank. It runs the model block by block and drives
// the partition contract (zhost/partition.h) through whichever partition instance the config chose: the
// host's own stage 0 or a ZeRO plugin. See docs/architecture.md for the step flow; what a run does around its
// steps (metrics, checkpoints, stops, swaps) is its observers' (Note [Step observers], observers/).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "host/comm/comm.hpp"
#include "host/engine/settings.hpp"
#include "host/plugins/instances.hpp"
#include "host/telemetry/telemetry.hpp"

namespace zhost::engine {

struct TrainResult {
  std::vector<StepRecord> records;  // one per printed step (and the last step)
  double final_loss = 0;
  int64_t applied_steps = 0;
  int64_t skipped_steps = 0;
  bool stopped_early = false;  // a signal stopped the job at a step boundary (Note [Stop at a step boundary])
};

class Trainer {
 public:
  // `services`: its abort flag is polled every step (a plugin's request_abort() stops the job).
  // `services` also serves the parameter storage (params) to a plugin that partitions parameters.
  // `trace` (may be null): the rank's trace (Note [Trace file]), outliving the trainer.
  Trainer(const TrainSettings& settings, comm::Comm& world, const PluginInstance& partition, RunDirectory& run_dir,
          HostServices& services, class TraceWriter* trace = nullptr);
  ~Trainer();
  // The job's storage swaps (Note [Storage swap], storage_swap.hpp), served at every step boundary; outlives
  // run(). Without it, there are none.
  void set_storage_swaps(class StorageSwaps* swaps);
  // The job's collective transform (Note [Collective transforms]), whose parameter copies count in the
  // model-state figures; outlives run(). Without it, there is none.
  void set_transform(const PluginInstance* transform);
  TrainResult run();
  int64_t num_parameters() const;

  // Writes every parameter as fp32 to DIR/weights.bin with an index DIR/weights.json (rank 0 writes; with
  // partitioned parameters every rank takes part in gathering them, so call it on every rank).
  void save_weights(const std::string& dir) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  HostServices& services_;
};

}  // namespace zhost::engine
