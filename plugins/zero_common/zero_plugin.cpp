// plugins/zero_common/zero_plugin.cpp: descriptor, config reading and the ABI tables of the stage 1 and 2
// plugins around ZeroPartition.
#include "plugins/zero_common/zero_plugin.hpp"

#include "plugins/zero_common/zero_partition.hpp"
#include "zhost/kit/format.hpp"

namespace zhost::zero {
namespace {

// DeepSpeed's keys with DeepSpeed's meaning and defaults, each declared once (Note [Each key declared once],
// host/job/job_setup.cpp): stage 1 declares the keys both stages take and stage 2 reads them. Keys that only
// mean something in stage 2 (contiguous_gradients) are declared by stage 2 alone, so that the host rejects them
// in a stage 1 config.
void declare_keys(sdk::DescriptorBuilder& builder, int stage) {
  if (stage == 1) {
    declare_gradient_keys(builder);
    builder
        .config_int("zero.allgather_bucket_size", 500000000,
                    "elements per all-gather of updated parameters (all ranks together)", 1, 1e15)
        .config_bool("zero.round_robin_gradients", false,
                     "DeepSpeed: interleave gradient partitions for CPU offload; no effect without it");
  } else {
    read_gradient_keys(builder);
    builder.reads_keys({"zero.allgather_bucket_size", "zero.round_robin_gradients"});
  }
  read_delayed_update_keys(builder);
  read_master_keys(builder);  // Note [bf16 masters without offload]
  if (stage == 2)
    builder.config_bool("zero.contiguous_gradients", true,
                        "keep reduced gradients in one contiguous partition (zhost always does)");
}

ZeroOptions read_options(const sdk::Host& host, int stage) {
  ZeroOptions o;
  o.stage = stage;
  o.reduce_bucket_size = host.config_int("zero.reduce_bucket_size");
  o.allgather_bucket_size = host.config_int("zero.allgather_bucket_size");
  o.overlap_comm = host.config_bool("zero.overlap_comm");
  note_reduce_scatter_key(host);
  o.ignore_unused_parameters = host.config_bool("zero.ignore_unused_parameters");
  o.step_chunk = host.config_int("zero.offload_optimizer.step_chunk_size");
  o.delayed = read_delayed_update_options(host);
  if (host.config_bool("zero.round_robin_gradients"))
    host.warn(
        "zero.round_robin_gradients = true has no effect: DeepSpeed uses it to interleave gradient "
        "partitions for CPU offload, and this job does not offload the optimizer");
  if (stage == 2 && !host.config_bool("zero.contiguous_gradients"))
    host.warn(
        "zero.contiguous_gradients = false: zhost keeps each rank's reduced gradients in one contiguous "
        "partition regardless, as with true");
  return o;
}

// The instance type of stage N: a ZeroPartition configured from the job's keys.
template <int kStage>
struct StageOf : ZeroPartition {
  explicit StageOf(const sdk::Host& host) : ZeroPartition(host, read_options(host, kStage)) {}
};

template <int kStage>
const zhost_plugin_api kApi = sdk::partition_api<StageOf<kStage>>();

}  // namespace

const zhost_plugin_descriptor* describe(int stage) {
  auto* builder = new sdk::DescriptorBuilder(stage == 1 ? "stage1" : "stage2", "0.1.0", ZHOST_KIND_PARTITION);
  builder
      ->summary(stage == 1 ? "ZeRO stage 1: optimizer states and fp32 master weights partitioned over ranks"
                           : "ZeRO stage 2: optimizer states, master weights and gradients partitioned over ranks")
      .provides({stage == 1 ? "partition:stage1" : "partition:stage2"})
      .flags(ZHOST_PLUGIN_FLAG_TAKES_GRADIENTS);  // stage 1: Note [Stage 1 accumulates in its flat staging]
  declare_keys(*builder, stage);
  return builder->build();  // the builder owns the descriptor's strings: kept for the plugin's lifetime
}

const zhost_plugin_api* api(int stage) { return stage == 1 ? &kApi<1> : &kApi<2>; }

}  // namespace zhost::zero
