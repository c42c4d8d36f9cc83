// plugins/stage3/stage3_partition.cpp: ZeRO stage 3, the pieces wired together (see the header for the
// design).
#include "plugins/stage3/stage3_partition.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "zhost/kit/dlpack_views.hpp"
#include "zhost/kit/format.hpp"

namespace zhost::stage3 {

using sdk::PluginError;

Stage3Partition::Stage3Partition(const sdk::Host& host, const Stage3Options& options)
    : context_(host, options),
      offload_(context_),
      optimizer_(context_, pool_, offload_),
      gatherer_(context_, offload_) {}

void Stage3Partition::setup(const zhost_partition_setup& setup) {
  Stage3Context& c = context_;
  const zhost_group_info_args world = c.host.group_info();
  c.rank = world.rank;
  c.world_size = world.size;
  if (setup.num_params == 0) throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "the model has no parameters to partition");
  const bool offloaded = optimizer_.find_tier(setup.optimizer);
  offload_.find_tier();

  std::vector<int32_t> owners;
  for (size_t i = 0; i < setup.num_params; ++i) {
    const DLTensor& t = setup.params[i].tensor;
    int64_t numel = 1;
    for (int d = 0; d < t.ndim; ++d) numel *= t.shape[d];
    c.param_names.emplace_back(setup.params[i].name);
    c.param_numels.push_back(numel);
    owners.push_back(setup.params[i].block);
  }
  const DLTensor& first = setup.params[0].tensor;
  c.compute_dtype = kit::scalar_type(first.dtype);
  c.on_device = at::TensorOptions().dtype(c.compute_dtype);
  if (first.device.device_type == kDLCUDA)
    c.on_device = c.on_device.device(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(first.device.device_id)));
  zero::HostCopies copies;  // to and from the tier's host memory
  if (offloaded) {
    copies = zero::HostCopies::find(c.host, c.on_device.device());
    optimizer_.stage_through(copies);
  }
  pool_ = HostStagingPool(copies, c.compute_dtype);
  c.layout = FetchUnits(c.param_numels, owners, setup.num_blocks, c.world_size, c.options.persistence_threshold,
                        c.options.sub_group_size);
  c.agreement = RankAgreement(c.host, c.on_device.device(), c.options.agree_each_collective, c.units(),
                              [&c](int unit) { return c.unit_name(unit); });
  gatherer_.setup(setup);

  // One sub-group at a time: with the optimizer (and the shards) in tiers, each sub-group's master (and
  // shards) go there before the next is built, so start-up holds one sub-group of them, not the whole model's.
  optimizer_.set_optimizer(setup.optimizer, /*steps_here=*/!offloaded);
  if (offload_.active()) {
    offload_.check_buffer_size();
    offload_.keep_within_max_in_cpu();
  }
  for (size_t g = 0; g < c.layout.sub_groups().size(); ++g) {
    optimizer_.add_sub_group(g);
    for (int u : c.layout.sub_groups()[g].units) init_unit(u);
    optimizer_.finish_sub_group(g, setup.optimizer);
  }
  if (offload_.active()) offload_.allocate();
  if (c.options.delayed.enabled) delay_updates(setup.optimizer);
  setup_reducer(copies);
  gatherer_.gather_persistent();
  log_setup(setup);
}

// Note [Delayed parameter update] at stage 3: the tier steps the sub-groups in the background while the shards
// the gathers read stay as they were until the boundary. Parameter shards kept in a tier are refused: the forward
// would load them from the tier that is stepping.
void Stage3Partition::delay_updates(const zhost_optimizer_desc& optimizer) {
  zero::check_delayed_update_setup(context_.options.delayed, optimizer_.tier(), optimizer);
  if (offload_.active())
    throw PluginError(ZHOST_ERR_CONFIG,
                      "zero.offload_optimizer.delayed_update = true at stage 3 keeps the parameter shards in device "
                      "memory; set zero.offload_param.device = \"none\", or remove delayed_update");
  optimizer_.delay_updates();
}

// One reduction per unit, split equally over the ranks: each rank's sums are its shard of the unit's gradient
// (a view into its sub-group's gradient, or the tier's fp32 accumulator). Units are launched as their
// gradients complete, each after the ranks agree on it (rank_agreement.hpp); the staging of a unit lives
// only while it fills and reduces.
void Stage3Partition::setup_reducer(const zero::HostCopies& copies) {
  const Stage3Context& c = context_;
  std::vector<zero::ReductionRange> ranges;
  std::vector<at::Tensor> unit_grads;
  for (int u = 0; u < c.units(); ++u) {
    const FetchUnit& unit = c.unit(u);
    zero::ReductionRange range;
    range.params = unit.params;
    range.offsets = unit.offsets;
    for (uint32_t id : unit.params) range.lengths.push_back(c.param_numels[id]);
    range.numel = unit.padded();
    range.block = unit.block;
    range.segment_starts = unit.segment_starts;
    ranges.push_back(std::move(range));
    unit_grads.push_back(optimizer_.grad_of(u));
  }
  zero::ReducerOptions options;
  options.owner = "stage3";
  options.param_names = c.param_names;
  options.fixed_order = false;
  options.in_flight_elements = c.options.overlap_comm ? c.options.reduce_bucket_size : 0;
  options.ignore_unused_parameters = c.options.ignore_unused_parameters;
  options.local_sum_on_one_rank = false;  // a transform (ZeRO++ qgZ) may serve even one rank's reductions
  options.keep_buffers = false;
  // The sub-groups' gradients (a tier's accumulators) are zeros after setup and after every step: this rank's
  // first sums of a step are received there in place (Note [Sums written in place]).
  options.write_first_sums = true;
  options.prefault_targets = optimizer_.offloaded();
  options.before_launch = [this](int unit) {
    context_.agreement.before(RankAgreement::Collective::kReduce, unit, context_.step);
  };
  options.finished = [this](int unit) { optimizer_.grad_finished(unit); };
  reducer_ =
      zero::GradientReducer(c.host, std::move(ranges), c.rank, c.world_size, c.on_device, std::move(options), copies,
                            [grads = std::move(unit_grads)](int unit) { return grads[static_cast<size_t>(unit)]; });
}

void Stage3Partition::init_unit(int u) {
  const at::Tensor shard = optimizer_.shard_of(u);
  gatherer_.add_unit(u, offload_.active() ? at::Tensor() : shard);
  const zhost_param_services& store = context_.params();
  for_each_shard_run(context_.unit(u), context_.rank, context_.param_numels,
                     [&](uint32_t param, int64_t param_offset, int64_t shard_offset, int64_t length) {
                       at::Tensor part = shard.narrow(0, shard_offset, length);
                       DLTensor part_dl = kit::dl_view(part);
                       zhost_initial_values_args args{sizeof(args), nullptr, param, param_offset, &part_dl};
                       context_.host.check(store.initial_values(context_.host.context(), &args));
                     });
  optimizer_.master_from_shard(u);
  if (offload_.active()) offload_.store(u, shard);  // the tier keeps it; gathers load it from there
}

void Stage3Partition::log_setup(const zhost_partition_setup& setup) const {
  const Stage3Context& c = context_;
  int64_t largest = 0;
  for (const FetchUnit& unit : c.layout.units()) largest = std::max(largest, unit.padded());
  c.host.info(
      kit::format("stage 3: {} parameters in {} fetch units{} ({} elements per rank, largest unit {} elements "
                  "gathered), {} optimizer sub-group(s); prefetch {} / live {} / reuse distance {} elements{}",
                  setup.num_params, c.units(),
                  c.layout.persistent_unit() >= 0
                      ? kit::format(", {} of them persistent (at most {} elements each)",
                                    c.unit(c.layout.persistent_unit()).params.size(), c.options.persistence_threshold)
                      : "",
                  c.layout.shard_elements(), largest, c.layout.sub_groups().size(), c.options.prefetch_bucket_size,
                  c.options.max_live_parameters, c.options.max_reuse_distance, optimizer_.summary()));
}

void Stage3Partition::begin_micro_batch(const zhost_micro_batch_args& args) {
  context_.step = args.step;
  context_.micro_step = args.micro_step;
  in_micro_batch_ = true;
  gatherer_.begin_micro_batch();
  reducer_.begin_micro_batch(args.micro_step == 0, args.is_boundary != 0);
}

void Stage3Partition::grad_ready(uint32_t id, const DLTensor& grad) { reducer_.add(id, kit::tensor_view(grad)); }

void Stage3Partition::backward_end() {
  reducer_.finish();
  gatherer_.end_micro_batch();
  in_micro_batch_ = false;
}

void Stage3Partition::step(zhost_step_args& args) {
  // Its shards changed: the persistent unit is gathered again; the other units are gathered when next needed.
  // Applied or skipped, the step leaves every gradient zero (Note [Sums written in place]).
  if (optimizer_.step(args)) gatherer_.gather_persistent();
}

void Stage3Partition::gather_param(uint32_t id, DLTensor& out) {
  if (in_micro_batch_)
    throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "stage3: gather_param called inside a micro-batch");
  if (id >= context_.param_numels.size())
    throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, kit::format("stage3: no parameter {}", id));
  const at::Tensor& flat = gatherer_.gather_alone(context_.layout.unit_of(id));
  const int64_t numel = context_.param_numels[id];
  at::Tensor target = kit::tensor_view(out);
  if (target.numel() != numel)
    throw PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                      kit::format("stage3: gather_param: parameter {} has {} elements, the output {}",
                                  context_.param_names[id], numel, target.numel()));
  target.view({-1}).copy_(flat.narrow(0, context_.layout.offset_of(id), numel));
}

void Stage3Partition::memory(zhost_model_state_bytes& out) const {
  optimizer_.memory(out);
  // Gradient staging lives only while a unit fills and reduces; parameter staging and the delayed update's
  // buffers stay.
  out.buffers = offload_.buffer_bytes() + reducer_.buffer_bytes() + optimizer_.buffer_bytes();
}

// A checkpoint holds the last step's states (Note [Delayed parameter update]): a step in flight is completed
// first, and its shards gathered where they stay gathered.
void Stage3Partition::save_state(const zhost_state_io& io) {
  if (optimizer_.drain()) gatherer_.gather_persistent();
  optimizer_.save_state(io);
}

// Checkpoints (docs/checkpoints.md): loading fills the masters and states from whatever ranks and stage saved
// them, refreshes the 16-bit shards (in the parameter tier with parameter offload) and gathers the persistent
// unit again (the others are gathered when next needed).
void Stage3Partition::load_state(const zhost_state_io& io) {
  if (in_micro_batch_) throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "stage3: load_state called inside a micro-batch");
  optimizer_.load_states(io);
  gatherer_.release_live();
  optimizer_.refresh_shards();
  gatherer_.gather_persistent();
}

void Stage3Partition::move_param_storage(zhost_tier_storage_move& args) {
  offload_.move_storage(args, [this](int unit) { gatherer_.finish_gather(unit); });
}

}  // namespace zhost::stage3
