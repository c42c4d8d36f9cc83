// plugins/stage3/stage3_context.hpp: what every piece of stage 3 reads: the host, the options, this rank's
// place, the parameters and their fetch units, and the micro-batch being run. Stage3Partition owns it,
// fills it in setup() and begin_micro_batch(); the pieces hold it by const reference (design:
// stage3_partition.hpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "plugins/stage3/fetch_units.hpp"
#include "plugins/stage3/rank_agreement.hpp"
#include "zhost/cpp/partition.hpp"
#include "zhost/zero/delayed_update.hpp"
#include "zhost/zero/plugin_calls.hpp"

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
  int64_t offload_max_in_cpu = 1000000000;       // elements kept by the optimizer's tier (Note [max_in_cpu])
  int64_t step_chunk = zero::kDefaultStepChunk;  // offloaded step from a device: elements per copied chunk
  bool agree_each_collective = true;             // experimental.stage3_rank_agreement
  zero::DelayedUpdateOptions delayed;            // zero.offload_optimizer.delayed_update and its keys
};

struct Stage3Context {
  Stage3Context(const sdk::Host& host_in, const Stage3Options& options_in) : host(host_in), options(options_in) {}
  Stage3Context(const Stage3Context&) = delete;  // the pieces refer to it
  Stage3Context& operator=(const Stage3Context&) = delete;

  const FetchUnit& unit(int u) const { return layout.units()[static_cast<size_t>(u)]; }
  int units() const { return static_cast<int>(layout.units().size()); }
  bool persistent(int u) const { return unit(u).persistent; }
  // "unit 3 ('h.2.attn.w_qkv' and 5 more)", or "the persistent parameters".
  std::string unit_name(int u) const;
  // Elements of all parameters (the model's, unpadded).
  int64_t model_numel() const;
  // The host's parameter storage services; throws when the host has none.
  const zhost_param_services& params() const;

  sdk::Host host;
  Stage3Options options;
  int rank = 0, world_size = 1;
  at::ScalarType compute_dtype = at::kFloat;
  at::TensorOptions on_device;           // compute dtype, on the parameters' device
  std::vector<std::string> param_names;  // per parameter id
  std::vector<int64_t> param_numels;     // per parameter id
  FetchUnits layout;
  RankAgreement agreement;
  int64_t step = 0;  // of the current (or last) micro-batch
  int32_t micro_step = 0;
};

}  // namespace zhost::stage3
