// plugins/stage3/stage3.cpp: the ZeRO stage 3 plugin: descriptor (DeepSpeed's
// stage 3 keys with DeepSpeed's defaults), config reading and the partition
// table around Stage3Partition.
#include "plugins/stage3/stage3_partition.hpp"
#include "zhost/cpp/plugin.hpp"
#include "zhost/kit/format.hpp"

namespace zhost::stage3 {
namespace {

Stage3Options read_options(const sdk::Host& host) {
  Stage3Options o;
  o.prefetch_bucket_size = host.config_int("zero.stage3_prefetch_bucket_size");
  o.max_live_parameters = host.config_int("zero.stage3_max_live_parameters");
  o.max_reuse_distance = host.config_int("zero.stage3_max_reuse_distance");
  o.persistence_threshold = host.config_int("zero.stage3_param_persistence_threshold");
  o.sub_group_size = host.config_int("zero.sub_group_size");
  o.reduce_bucket_size = host.config_int("zero.reduce_bucket_size");
  o.overlap_comm = host.config_bool("zero.overlap_comm");
  zero::note_reduce_scatter_key(host);
  o.ignore_unused_parameters = host.config_bool("zero.ignore_unused_parameters");
  o.offload_buffer_count = host.config_int("zero.offload_param.buffer_count");
  o.offload_buffer_size = host.config_int("zero.offload_param.buffer_size");
  o.offload_max_in_cpu = host.config_int("zero.offload_param.max_in_cpu");
  o.step_chunk = host.config_int("zero.offload_optimizer.step_chunk_size");
  o.agree_each_collective = host.config_string("experimental.stage3_rank_agreement") == "each_collective";
  o.delayed = zero::read_delayed_update_options(host);
  if (!host.config_bool("zero.contiguous_gradients"))
    host.warn(
        "zero.contiguous_gradients = false: zhost keeps each rank's reduced gradients in contiguous sub-group buffers "
        "regardless, as with true");
  if (!host.config_bool("zero.stage3_gather_16bit_weights_on_model_save"))
    host.info(
        "zero.stage3_gather_16bit_weights_on_model_save = false: zhost's checkpoints keep every rank's shards "
        "(docs/checkpoints.md), and run.save_final_weights gathers the weights regardless (unit by unit)");
  return o;
}

struct Stage3 : Stage3Partition {
  explicit Stage3(const sdk::Host& host) : Stage3Partition(host, read_options(host)) {}
};

// The config check (Note [Plugin config checks] in the host): with the parameter shards in a tier,
// zero.offload_param.buffer_size against the largest shard, from the model's shapes and the world size the
// host gives, on the same layout setup builds (FetchUnits), so that `zhost config check --nproc N` refuses what
// setup would.
void check_config(const sdk::ConfigCheck& check) {
  const zhost_config_check_args& args = check.args();
  if (!((args.job_tier_roles >> ZHOST_TIER_FOR_PARAMS) & 1u) || args.world_size <= 0 || args.num_params == 0 ||
      !args.param_numels || !args.param_blocks)
    return;
  const sdk::Host& host = check.host();
  const FetchUnits layout(std::vector<int64_t>(args.param_numels, args.param_numels + args.num_params),
                          std::vector<int32_t>(args.param_blocks, args.param_blocks + args.num_params),
                          static_cast<int32_t>(args.num_blocks), static_cast<int>(args.world_size),
                          host.config_int("zero.stage3_param_persistence_threshold"),
                          host.config_int("zero.sub_group_size"));
  const int64_t buffer_size = host.config_int("zero.offload_param.buffer_size");
  if (layout.largest_shard() > buffer_size)
    check.refuse("zero.offload_param.buffer_size", buffer_size_refusal(buffer_size, layout.largest_shard()));
}

const zhost_plugin_api kApi = sdk::partition_api<Stage3>(sdk::check_config_entry<check_config>);

const zhost_plugin_descriptor* describe() {
  static const zhost_plugin_descriptor* descriptor = [] {
    auto* builder = new sdk::DescriptorBuilder("stage3", "0.1.0", ZHOST_KIND_PARTITION);  // kept: owns the strings
    builder->summary("ZeRO stage 3: parameters, gradients, master weights and optimizer states partitioned over ranks")
        .provides({"partition:stage3"})
        .flags(ZHOST_PLUGIN_FLAG_TAKES_GRADIENTS | ZHOST_PLUGIN_FLAG_PARTITIONS_PARAMETERS)
        .config_int("zero.stage3_prefetch_bucket_size", 50000000,
                    "parameter elements gathered ahead of the blocks that need them (0: no prefetch)", 0, 1e15)
        .config_int("zero.stage3_max_live_parameters", 1000000000,
                    "parameter elements gathered at once, beyond which prefetching waits", 0, 1e15)
        .config_int("zero.stage3_max_reuse_distance", 1000000000,
                    "keep a gathered unit when it is read again within this many elements of other units", 0, 1e15)
        .config_int("zero.stage3_param_persistence_threshold", 100000,
                    "parameters of at most this many elements stay gathered (never released)", 0, 1e15)
        .config_int("zero.sub_group_size", 1000000000,
                    "elements per optimizer sub-group (stepped one at a time); 0 = each unit its own, as DeepSpeed", 0,
                    1e15)
        .config_int("zero.offload_param.buffer_count", 5,
                    "staging buffers for parameter shards fetched from the tier (gathers in flight at once)", 1, 1e6)
        .config_int("zero.offload_param.buffer_size", 100000000,
                    "elements per staging buffer (at least the largest shard; allocated no larger)", 1, 1e15)
        .config_int("zero.offload_param.max_in_cpu", 1000000000,
                    "with device = \"nvme\" (or another storing tier): this rank's first shard elements kept in "
                    "host memory by the optimizer's tier, the rest in the parameter tier (Note [max_in_cpu])",
                    0, 1e15)
        .config_bool("zero.stage3_gather_16bit_weights_on_model_save", false,
                     "gather the full 16-bit weights when the model is saved")
        .config_string("experimental.stage3_rank_agreement", "each_collective",
                       "zhost: when ranks check they walk the blocks alike: before each gather and reduction (a "
                       "blocking exchange of 16 bytes; divergence stops at the first collective where ranks part), or "
                       "once per micro-batch (no host wait before collectives; divergence found at the end of "
                       "backward, if the collectives of different sizes did not fail first)",
                       {"each_collective", "each_micro_batch"});
    zero::read_gradient_keys(*builder);
    builder->reads_keys({"zero.contiguous_gradients"});  // stage 2's
    zero::read_delayed_update_keys(*builder);
    zero::read_master_keys(*builder);  // Note [bf16 masters without offload]
    return builder->build();
  }();
  return descriptor;
}

}  // namespace
}  // namespace zhost::stage3

ZHOST_PLUGIN_ENTRY(zhost::stage3::describe(), &zhost::stage3::kApi)
