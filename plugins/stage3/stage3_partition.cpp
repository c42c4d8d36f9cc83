// plugins/stage3/stage3_partition.cpp: ZeRO stage 3 (see the header for the
// design).
#include "plugins/stage3/stage3_partition.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "plugins/zero_common/step_prologue.hpp"
#include "zhost/kit/dlpack_views.hpp"
#include "zhost/kit/format.hpp"
#include "zhost/kit/grad_numerics.hpp"
#include "zhost/kit/optimizer.hpp"
#include "zhost/kit/state_io.hpp"
#include "zhost/offload.h"

namespace zhost::stage3 {

using kit::dl_view;
using kit::tensor_view;
using sdk::PluginError;
using zero::abandon;
using zero::all_reduce_sum;
using zero::collective_args;
using zero::OptimizerTier;
using zero::wait_for;

namespace {}  // namespace

Stage3Partition::Stage3Partition(const sdk::Host& host, const Stage3Options& options)
    : host_(host), options_(options) {}

Stage3Partition::~Stage3Partition() {
  for (UnitState& u : units_) {
    abandon(host_, u.gather_work);
    abandon(host_, u.reduce_work);
  }
  // Never leave a load in flight; its failure was or will be reported. The tier is still alive: the host
  // destroys tiers after the partition plugin (docs/abi.md "Tier lifetimes").
  for (Staging& slot : staging_)
    if (slot.load)
      if (zhost_status* status = params_tier_.api->wait_event(params_tier_.instance, slot.load))
        host_.services()->status_destroy(status);
}

const zhost_param_services& Stage3Partition::params() const {
  const zhost_host_services* services = host_.services();
  if (!ZHOST_HAS_FIELD(services, zhost_host_services, params) || !services->params)
    throw PluginError(ZHOST_ERR_UNSUPPORTED, "stage3 needs the host's parameter storage services (zhost ABI 0.2)");
  return *services->params;
}

void Stage3Partition::setup(const zhost_partition_setup& setup) {
  const zhost_collectives& collectives = host_.collectives();
  rank_ = collectives.rank(host_.context(), nullptr);
  world_size_ = collectives.world_size(host_.context(), nullptr);
  if (setup.num_params == 0) throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "the model has no parameters to partition");
  tier_ = OptimizerTier::find(host_);
  state_names_ = kit::checkpoint_state_names(kit::optimizer_spec_from_abi(setup.optimizer));
  params_tier_.struct_size = sizeof(params_tier_);
  host_.check(host_.services()->tier_for(host_.context(), ZHOST_TIER_FOR_PARAMS, &params_tier_));
  if (params_tier_.instance && !tier_.active())
    throw PluginError(ZHOST_ERR_UNSUPPORTED,
                      kit::format("zero.offload_param names tier '{}' but zero.offload_optimizer names none: stage 3 "
                                  "offloads parameters together with the optimizer; offload both",
                                  params_tier_.name));
  if (params_tier_.instance && (!params_tier_.api || !params_tier_.api->store || !params_tier_.api->load))
    throw PluginError(ZHOST_ERR_UNSUPPORTED,
                      kit::format("offload tier '{}' cannot store parameters; set zero.offload_param.device = \"cpu\"",
                                  params_tier_.name));

  std::vector<int32_t> owners;
  for (size_t i = 0; i < setup.num_params; ++i) {
    const DLTensor& t = setup.params[i].tensor;
    int64_t numel = 1;
    for (int d = 0; d < t.ndim; ++d) numel *= t.shape[d];
    param_names_.emplace_back(setup.params[i].name);
    param_numels_.push_back(numel);
    owners.push_back(setup.params[i].block);
  }
  const DLTensor& first = setup.params[0].tensor;
  compute_dtype_ = kit::scalar_type(first.dtype);
  on_device_ = at::TensorOptions().dtype(compute_dtype_);
  if (first.device.device_type == kDLCUDA)
    on_device_ = on_device_.device(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(first.device.device_id)));
  if (tier_.active()) {
    copies_ = zero::HostCopies::find(host_, on_device_.device());
    if (staged()) staged_step_ = zero::StagedStep(tier_, copies_, options_.step_chunk, compute_dtype_);
  }
  layout_ = FetchUnits(param_numels_, owners, setup.num_blocks, world_size_, options_.persistence_threshold,
                       options_.sub_group_size);
  units_.resize(layout_.units().size());
  agreement_ = RankAgreement(host_, on_device_.device(), options_.agree_each_collective,
                             static_cast<int>(units_.size()), [this](int unit) { return unit_name(unit); });
  const bool fp32 = compute_dtype_ == at::kFloat;

  // Sub-group buffers; each unit's shard, master and gradient are views into its sub-group's. In fp32
  // runs the shard is the master, unless a tier keeps the master. One sub-group at a time: with the
  // optimizer (and the shards) in tiers, each sub-group's master (and shards) go there before the next is
  // built, so start-up holds one sub-group of them, not the whole model's.
  const bool offloaded = tier_.active();
  if (!offloaded) optimizer_ = kit::make_optimizer(kit::optimizer_spec_from_abi(setup.optimizer));
  if (params_tier_.instance) check_offload_buffer_size();
  for (size_t g = 0; g < layout_.sub_groups().size(); ++g) {
    const SubGroup& sub_group = layout_.sub_groups()[g];
    SubGroupState s;
    // With a tier the master only passes through here on its way to host memory: keep it off the device.
    s.master = at::zeros({sub_group.numel}, (offloaded ? at::TensorOptions() : on_device_).dtype(at::kFloat));
    if (!fp32 || offloaded) s.shard = at::zeros({sub_group.numel}, on_device_);
    if (!offloaded) {
      s.grad = at::zeros({sub_group.numel}, on_device_);
      optimizer_->allocate_state(s.state, s.master);
    }
    sub_groups_.push_back(std::move(s));
    for (int u : sub_group.units) {
      init_unit(u);
      if (params_tier_.instance) store_parameter_shard(u);
    }
    if (offloaded) hand_optimizer_to_tier(g, setup.optimizer);
    if (params_tier_.instance) sub_groups_.back().shard = at::Tensor();
  }
  if (params_tier_.instance) allocate_parameter_staging();
  for (size_t u = 0; u < units_.size(); ++u) {
    const FetchUnit& unit = layout_.units()[u];
    units_[u].grad = sub_groups_[static_cast<size_t>(unit.sub_group)].grad.narrow(0, unit.sub_group_offset, unit.shard);
  }

  std::vector<int64_t> unit_numel;
  for (const FetchUnit& unit : layout_.units()) unit_numel.push_back(unit.padded());
  units_of_block_.resize(static_cast<size_t>(setup.num_blocks));
  for (int32_t b = 0; b < setup.num_blocks; ++b) {
    std::vector<uint32_t> ids(setup.block_param_ids + setup.block_param_offsets[b],
                              setup.block_param_ids + setup.block_param_offsets[b + 1]);
    units_of_block_[static_cast<size_t>(b)] = layout_.units_read(ids);
  }
  tied_units_of_block_.resize(units_of_block_.size());
  for (size_t b = 0; b < units_of_block_.size(); ++b)
    for (int unit : units_of_block_[b]) {
      const FetchUnit& u = layout_.units()[static_cast<size_t>(unit)];
      if (!u.persistent && u.block != static_cast<int32_t>(b)) tied_units_of_block_[b].push_back(unit);
    }
  tied_closed_.assign(units_of_block_.size(), 0);
  trace_ = std::make_unique<BlockTrace>(units_of_block_, unit_numel);
  arrived_.assign(setup.num_params, 0);
  gather_persistent();

  int64_t largest = 0;
  for (const FetchUnit& unit : layout_.units()) largest = std::max(largest, unit.padded());
  host_.info(
      kit::format("stage 3: {} parameters in {} fetch units{} ({} elements per rank, largest unit {} elements "
                  "gathered), {} optimizer sub-group(s); prefetch {} / live {} / reuse distance {} elements{}",
                  setup.num_params, units_.size(),
                  layout_.persistent_unit() >= 0
                      ? kit::format(", {} of them persistent (at most {} elements each)",
                                    layout_.units()[static_cast<size_t>(layout_.persistent_unit())].params.size(),
                                    options_.persistence_threshold)
                      : "",
                  layout_.shard_elements(), largest, layout_.sub_groups().size(), options_.prefetch_bucket_size,
                  options_.max_live_parameters, options_.max_reuse_distance,
                  tier_.active() ? kit::format("; optimizer offloaded to tier '{}'", tier_.name()) : ""));
}

// Unit u's shard and master, as views into its sub-group's buffers (built already), and its parameter group.
// This rank's shard starts from the parameters' initial values (the padding stays zero), in the compute
// dtype, as the unpartitioned model holds them; the fp32 master starts from those values.
void Stage3Partition::init_unit(int u) {
  const FetchUnit& unit = layout_.units()[static_cast<size_t>(u)];
  UnitState& state = units_[static_cast<size_t>(u)];
  SubGroupState& group = sub_groups_[static_cast<size_t>(unit.sub_group)];
  const at::Tensor master = group.master.narrow(0, unit.sub_group_offset, unit.shard);
  state.shard = group.shard.defined() ? group.shard.narrow(0, unit.sub_group_offset, unit.shard) : master;
  const zhost_param_services& store = params();
  host_.check(store.group_create(host_.context(), unit.params.data(), unit.offsets.data(), unit.params.size(),
                                 unit.padded(), &state.group));
  const int64_t begin = rank_ * unit.shard, end = begin + unit.shard;
  for (size_t i = 0; i < unit.params.size(); ++i) {
    const int64_t p_begin = unit.offsets[i], p_end = p_begin + param_numels_[unit.params[i]];
    const int64_t lo = std::max(begin, p_begin), hi = std::min(end, p_end);
    if (lo >= hi) continue;
    at::Tensor part = state.shard.narrow(0, lo - begin, hi - lo);
    DLTensor part_dl = dl_view(part);
    host_.check(store.initial_values(host_.context(), unit.params[i], lo - p_begin, &part_dl));
  }
  if (group.shard.defined()) master.copy_(state.shard);
}

// The tier named by zero.offload_optimizer.device takes sub-group g's master and optimizer states (key =
// the sub-group's index); its fp32 gradient accumulator becomes the sub-group's gradient buffer.
void Stage3Partition::hand_optimizer_to_tier(size_t g, const zhost_optimizer_desc& optimizer) {
  SubGroupState& group = sub_groups_[g];
  group.grad = tier_.add_group(g, optimizer, group.master);
  group.master = at::Tensor();
}

// Parameter offload: every unit's shard goes to the tier, the device keeps buffer_count staging buffers of
// at most buffer_size elements (no more than the largest shard) to gather from.
int64_t Stage3Partition::largest_shard() const {
  int64_t largest = 0;
  for (const FetchUnit& unit : layout_.units()) largest = std::max(largest, unit.shard);
  return largest;
}

void Stage3Partition::check_offload_buffer_size() const {
  const int64_t largest = largest_shard();
  if (largest > options_.offload_buffer_size)
    throw PluginError(ZHOST_ERR_CONFIG,
                      kit::format("zero.offload_param.buffer_size = {} elements is smaller than the largest parameter "
                                  "shard ({} elements, one block's parameters / ranks): set it to at least {}",
                                  options_.offload_buffer_size, largest, largest));
}

void Stage3Partition::store_parameter_shard(int unit) {
  UnitState& u = units_[static_cast<size_t>(unit)];
  DLTensor src = dl_view(u.shard);
  tier_io(params_tier_.api->store, param_key(unit), src);
  u.shard = at::Tensor();
}

void Stage3Partition::allocate_parameter_staging() {
  const int64_t largest = largest_shard();
  // No more gathers than units can be in flight: more buffers would only take memory.
  staging_.resize(static_cast<size_t>(std::min<int64_t>(options_.offload_buffer_count, units_.size())));
  for (Staging& slot : staging_) slot.buffer = at::empty({largest}, on_device_);
}

std::string Stage3Partition::unit_name(int unit) const {
  const FetchUnit& u = layout_.units()[static_cast<size_t>(unit)];
  if (u.persistent) return "the persistent parameters";
  return kit::format("unit {} ('{}'{})", unit, param_names_[u.params.front()],
                     u.params.size() > 1 ? kit::format(" and {} more", u.params.size() - 1) : "");
}

// Starts the all-gather of the N shards into the unit's storage, materialising it first if released (a
// live unit, the persistent one after a step, is gathered again in place).
void Stage3Partition::start_gather(int unit) {
  UnitState& u = units_[static_cast<size_t>(unit)];
  const FetchUnit& layout = layout_.units()[static_cast<size_t>(unit)];
  if (u.residency == Residency::kReleased) {
    DLTensor flat{};
    host_.check(params().materialize(host_.context(), u.group, &flat));
    u.flat = tensor_view(flat);
    u.recv_dl = dl_view(u.flat);
    live_elements_ += layout.padded();
  }
  if (params_tier_.instance) {  // the shard comes from the tier into a staging buffer, then is sent
    Staging& slot = free_staging();
    u.send = slot.buffer.narrow(0, 0, layout.shard);
    DLTensor dst = dl_view(u.send);
    load_shard(slot, unit, dst);
  } else {
    u.send = u.shard;
  }
  u.send_dl = dl_view(u.send);
  agreement_.before(RankAgreement::Collective::kGather, unit, step_);
  zhost_collective_args args = collective_args(ZHOST_INTENT_PARAM_GATHER, layout.block);
  args.send = &u.send_dl;
  args.recv = &u.recv_dl;
  args.flags = ZHOST_COLLECTIVE_ASYNC;
  host_.check(host_.collectives().all_gather(host_.context(), &args));
  u.gather_work = args.work;
  u.residency = Residency::kGathering;
}

void Stage3Partition::finish_gather(int unit) {
  UnitState& u = units_[static_cast<size_t>(unit)];
  wait_for(host_, u.gather_work);
  u.residency = Residency::kLive;
  for (Staging& slot : staging_)  // its staging buffer (parameter offload) is free again
    if (slot.unit == unit) finish_load(slot);
  u.send = at::Tensor();
}

// Parameter offload: a staging buffer no gather in flight uses; when all are taken, the oldest gathers
// are completed until one is free.
Stage3Partition::Staging& Stage3Partition::free_staging() {
  for (;;) {
    for (Staging& slot : staging_)
      if (slot.unit < 0) return slot;
    finish_gather(staging_.front().unit);  // every buffer serves a gather in flight
  }
}

bool Stage3Partition::staging_available() const {
  if (!params_tier_.instance) return true;
  for (const Staging& slot : staging_)
    if (slot.unit < 0) return true;
  return false;
}

zhost_tier_event* Stage3Partition::tier_io_start(const zhost_tier_ref& tier, TierIo io, uint64_t key, DLTensor& data) {
  zhost_tier_io_args args{};
  args.struct_size = sizeof(args);
  args.key = key;
  args.data = &data;
  host_.check(io(tier.instance, &args));
  return args.event;
}

void Stage3Partition::tier_io(const zhost_tier_ref& tier, TierIo io, uint64_t key, DLTensor& data) {
  if (zhost_tier_event* event = tier_io_start(tier, io, key, data))
    host_.check(tier.api->wait_event(tier.instance, event));
}

void Stage3Partition::drop_parameter_shards(const zhost_tier_ref& tier) noexcept {
  for (int unit = 0; unit < static_cast<int>(layout_.units().size()); ++unit) {
    sdk::Status status(host_.services(), tier.api->drop(tier.instance, param_key(unit)));
    if (!status.ok())
      host_.warn(kit::format("stage3: could not drop {}'s shard from tier '{}': {}", unit_name(unit), tier.name,
                             status.message()));
  }
}

// Note [Storage swap] (host/engine/storage_swap.hpp): COPY loads each unit's shard from the params tier into the
// first staging buffer (free between steps) and stores it into the new tier under the same key; COMMIT drops the
// old copies and gathers from the new tier from then on; ABORT drops the new copies.
void Stage3Partition::move_param_storage(zhost_tier_storage_move& args) {
  switch (args.phase) {
    case ZHOST_STORAGE_MOVE_COPY: {
      if (!params_tier_.instance || staging_.empty())
        throw PluginError(ZHOST_ERR_UNSUPPORTED,
                          "stage 3 keeps its parameter shards in a tier only with zero.offload_param.device; start the "
                          "job with it to swap the shards' storage");
      const zhost_tier_ref* target = args.storage;
      if (!target || !target->instance || !target->api || !target->api->store || !target->api->load)
        throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "stage3: a parameter storage move names no storing tier");
      for (Staging& slot : staging_)  // nothing may still be loading from the old tier
        if (slot.unit >= 0) finish_gather(slot.unit);
      pending_params_tier_ = *target;
      pending_params_tier_.struct_size = sizeof(pending_params_tier_);
      uint64_t bytes = 0;
      try {
        for (int unit = 0; unit < static_cast<int>(layout_.units().size()); ++unit) {
          const at::Tensor shard =
              staging_.front().buffer.narrow(0, 0, layout_.units()[static_cast<size_t>(unit)].shard);
          DLTensor view = dl_view(shard);
          tier_io(params_tier_, params_tier_.api->load, param_key(unit), view);
          tier_io(pending_params_tier_, pending_params_tier_.api->store, param_key(unit), view);
          bytes += static_cast<uint64_t>(shard.numel()) * static_cast<uint64_t>(shard.element_size());
        }
      } catch (...) {
        drop_parameter_shards(pending_params_tier_);
        pending_params_tier_ = zhost_tier_ref{};
        throw;
      }
      args.bytes = bytes;
      return;
    }
    case ZHOST_STORAGE_MOVE_COMMIT:
      if (!pending_params_tier_.instance)
        throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "stage3: parameter storage move COMMIT without a COPY");
      drop_parameter_shards(params_tier_);
      params_tier_ = std::exchange(pending_params_tier_, zhost_tier_ref{});
      host_.info(kit::format("parameter shards now kept in tier '{}'", params_tier_.name));
      return;
    case ZHOST_STORAGE_MOVE_ABORT:
      if (pending_params_tier_.instance) drop_parameter_shards(pending_params_tier_);
      pending_params_tier_ = zhost_tier_ref{};
      return;
    default:
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, kit::format("stage3: unknown storage move phase {}", args.phase));
  }
}

// Parameter offload: the unit's shard from the tier into `slot`. The gather that sends it is ordered after
// the load on the device (the host does not wait) when the tier can order compute after its events;
// otherwise the host waits for the load here.
void Stage3Partition::load_shard(Staging& slot, int unit, DLTensor& dst) {
  slot.unit = unit;
  slot.load = tier_io_start(params_tier_.api->load, param_key(unit), dst);
  if (!slot.load) return;
  const zhost_offload_api* api = params_tier_.api;
  if (ZHOST_HAS_FIELD(api, zhost_offload_api, order_compute_after) && api->order_compute_after) {
    host_.check(api->order_compute_after(params_tier_.instance, slot.load));
  } else {
    finish_load(slot);
    slot.unit = unit;
  }
}

// The slot's load is complete (waited for) and the slot free.
void Stage3Partition::finish_load(Staging& slot) {
  slot.unit = -1;
  if (!slot.load) return;
  zhost_tier_event* load = std::exchange(slot.load, nullptr);
  host_.check(params_tier_.api->wait_event(params_tier_.instance, load));
}

// The unit's parameters hold their full values when this returns; time spent
// waiting is the "stage3/gather_wait" span of the wall-clock breakdown.
void Stage3Partition::make_live(int unit) {
  UnitState& u = units_[static_cast<size_t>(unit)];
  if (u.residency == Residency::kLive) return;
  const zero::ScopedSpan span(host_, "gather_wait");
  if (u.residency == Residency::kReleased) start_gather(unit);
  finish_gather(unit);
}

void Stage3Partition::release(int unit) {
  UnitState& u = units_[static_cast<size_t>(unit)];
  if (u.residency == Residency::kReleased) return;
  if (u.residency == Residency::kGathering) finish_gather(unit);
  if (u.prefetched) prefetched_elements_ -= layout_.units()[static_cast<size_t>(unit)].padded();
  u.prefetched = false;
  u.flat = at::Tensor();
  host_.check(params().release(host_.context(), u.group));
  live_elements_ -= layout_.units()[static_cast<size_t>(unit)].padded();
  u.residency = Residency::kReleased;
}

void Stage3Partition::gather_persistent() {
  const int unit = layout_.persistent_unit();
  if (unit < 0) return;
  start_gather(unit);
  finish_gather(unit);
}

void Stage3Partition::begin_micro_batch(const zhost_micro_batch_args& args) {
  step_ = args.step;
  micro_step_ = args.micro_step;
  in_micro_batch_ = true;
  if (saving_unit_ >= 0 && !layout_.units()[static_cast<size_t>(saving_unit_)].persistent) release(saving_unit_);
  saving_unit_ = -1;
  trace_->begin_micro_batch();
  std::fill(arrived_.begin(), arrived_.end(), 0);
  std::fill(tied_closed_.begin(), tied_closed_.end(), 0);
  last_backward_block_ = -1;
  for (size_t u = 0; u < units_.size(); ++u) {
    units_[u].grads_pending = static_cast<int>(layout_.units()[u].params.size());
    units_[u].reduced_this_micro_batch = false;
  }
}

void Stage3Partition::enter(const BlockEvent& event) {
  const bool following = trace_->advance(event);
  if (event.backward) {
    if (last_backward_block_ >= 0) close_tied_reads(last_backward_block_);
    last_backward_block_ = event.block;
  }
  const auto& needed = units_of_block_.at(static_cast<size_t>(event.block));
  for (int unit : needed) make_live(unit);
  for (int unit : needed) {
    UnitState& u = units_[static_cast<size_t>(unit)];
    ++u.open_uses;
    if (u.prefetched) prefetched_elements_ -= layout_.units()[static_cast<size_t>(unit)].padded();
    u.prefetched = false;
  }
  if (following) prefetch();
}

// Gathers ahead, in the order the recorded trace will need them, the units not
// yet live.
void Stage3Partition::prefetch() {
  if (options_.prefetch_bucket_size <= 0) return;
  for (int unit : trace_->upcoming_units()) {
    UnitState& u = units_[static_cast<size_t>(unit)];
    if (u.residency != Residency::kReleased) continue;
    const int64_t size = layout_.units()[static_cast<size_t>(unit)].padded();
    if (prefetched_elements_ + size > options_.prefetch_bucket_size) return;
    if (live_elements_ + size > options_.max_live_parameters) return;
    if (!staging_available()) return;
    start_gather(unit);
    u.prefetched = true;
    prefetched_elements_ += size;
  }
}

void Stage3Partition::leave(int32_t block, bool backward) {
  const auto& tied = tied_units_of_block_.at(static_cast<size_t>(block));
  for (int unit : units_of_block_.at(static_cast<size_t>(block))) {
    if (backward && tied_closed_[static_cast<size_t>(block)] && std::count(tied.begin(), tied.end(), unit)) continue;
    UnitState& u = units_[static_cast<size_t>(unit)];
    if (u.open_uses > 0) --u.open_uses;
    maybe_release(unit);
  }
}

// The backward of `block` has handed its input's gradient on (the next pre_backward fired): every autograd
// node of the block that reads a weight to compute an activation's gradient has run, so the block no longer
// reads the weights it shares with other blocks, although their gradients are not complete yet.
void Stage3Partition::close_tied_reads(int32_t block) {
  uint8_t& closed = tied_closed_[static_cast<size_t>(block)];
  if (closed) return;
  closed = 1;
  for (int unit : tied_units_of_block_[static_cast<size_t>(block)]) {
    UnitState& u = units_[static_cast<size_t>(unit)];
    if (u.open_uses > 0) --u.open_uses;
    maybe_release(unit);
  }
}

void Stage3Partition::maybe_release(int unit) {
  const UnitState& u = units_[static_cast<size_t>(unit)];
  if (u.residency == Residency::kReleased || u.open_uses > 0 || u.prefetched) return;
  if (layout_.units()[static_cast<size_t>(unit)].persistent) return;
  if (trace_->reused_within(unit, options_.max_reuse_distance)) return;
  release(unit);
}

void Stage3Partition::grad_ready(uint32_t id, const DLTensor& grad_view) {
  if (arrived_.at(id))
    throw PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                      kit::format("stage3: parameter {} produced a gradient twice in one backward; ZeRO reduces each "
                                  "gradient once per micro-batch",
                                  param_names_[id]));
  arrived_[id] = 1;
  const int unit = layout_.unit_of(id);
  UnitState& u = units_[static_cast<size_t>(unit)];
  const FetchUnit& layout = layout_.units()[static_cast<size_t>(unit)];
  if (!u.grad_staging.defined()) {
    u.grad_staging = at::empty({layout.padded()}, on_device_);
    if (layout.padded() > layout.numel) u.grad_staging.narrow(0, layout.numel, layout.padded() - layout.numel).zero_();
  }
  u.grad_staging.narrow(0, layout_.offset_of(id), param_numels_[id]).copy_(tensor_view(grad_view).reshape({-1}));
  if (--u.grads_pending == 0) launch_reduction(unit);
}

// Starts the reduction of a unit's staged gradients: reduce-scatter, each rank
// receiving its shard's sums.
void Stage3Partition::launch_reduction(int unit) {
  UnitState& u = units_[static_cast<size_t>(unit)];
  const FetchUnit& layout = layout_.units()[static_cast<size_t>(unit)];
  while (!reductions_.empty() && reducing_elements_ + layout.padded() > options_.reduce_bucket_size) {
    const int oldest = reductions_.front();
    finish_reduction(oldest);
  }
  u.reduced_this_micro_batch = true;
  agreement_.before(RankAgreement::Collective::kReduce, unit, step_);
  u.staging_dl = dl_view(u.grad_staging);
  zhost_collective_args args = collective_args(ZHOST_INTENT_GRAD_REDUCE, layout.block);
  args.flags = ZHOST_COLLECTIVE_ASYNC;
  u.reduced = at::empty({layout.shard}, on_device_);
  u.reduced_dl = dl_view(u.reduced);
  args.send = &u.staging_dl;
  args.recv = &u.reduced_dl;
  host_.check(host_.collectives().reduce_scatter(host_.context(), &args));
  u.reduce_work = args.work;
  reductions_.push_back(unit);
  reducing_elements_ += layout.padded();
  if (!options_.overlap_comm) finish_reduction(unit);
}

void Stage3Partition::finish_reduction(int unit) {
  UnitState& u = units_[static_cast<size_t>(unit)];
  const FetchUnit& layout = layout_.units()[static_cast<size_t>(unit)];
  wait_for(host_, u.reduce_work);
  const at::Tensor mine = u.reduced;
  if (staged())
    stage_to_host(unit, mine);
  else
    u.grad.add_(mine);
  u.grad_staging = at::Tensor();
  u.reduced = at::Tensor();
  reductions_.erase(std::find(reductions_.begin(), reductions_.end(), unit));
  reducing_elements_ -= layout.padded();
}

// Staged: the unit's reduced shard (`mine`, on the device) starts for the host, within reduce_bucket_size
// elements in flight; drain_oldest_to_host adds it into the tier's accumulator.
void Stage3Partition::stage_to_host(int unit, const at::Tensor& mine) {
  const int64_t n = mine.numel();
  while (!to_host_.empty() && to_host_elements_ + n > options_.reduce_bucket_size) drain_oldest_to_host();
  at::Tensor host = take_host(n);
  zero::HostCopies::Copy copy = copies_.start(mine, host.narrow(0, 0, n));
  to_host_.push_back(ToHost{unit, std::move(copy), std::move(host), mine});
  to_host_elements_ += n;
}

void Stage3Partition::drain_oldest_to_host() {
  ToHost& oldest = to_host_.front();
  oldest.copy.wait();
  const int64_t n = oldest.source.numel();
  units_[static_cast<size_t>(oldest.unit)].grad.add_(oldest.host.narrow(0, 0, n));
  give_host(std::move(oldest.host));
  to_host_elements_ -= n;
  to_host_.pop_front();
}

// A pinned staging buffer of at least `numel` elements (compute dtype): the smallest free one that fits,
// or a new one.
at::Tensor Stage3Partition::take_host(int64_t numel) {
  auto best = free_host_.end();
  for (auto it = free_host_.begin(); it != free_host_.end(); ++it)
    if (it->numel() >= numel && (best == free_host_.end() || it->numel() < best->numel())) best = it;
  if (best == free_host_.end()) return copies_.host_empty(numel, compute_dtype_);
  at::Tensor buffer = std::move(*best);
  free_host_.erase(best);
  return buffer;
}

void Stage3Partition::give_host(at::Tensor buffer) { free_host_.push_back(std::move(buffer)); }

void Stage3Partition::backward_end() {
  // Units with a parameter that received no gradient: an error, or zeros
  // (ignore_unused_parameters), in unit order so that every rank reduces them
  // alike.
  for (size_t unit = 0; unit < units_.size(); ++unit) {
    UnitState& u = units_[unit];
    if (u.reduced_this_micro_batch) continue;
    const FetchUnit& layout = layout_.units()[unit];
    for (size_t i = 0; i < layout.params.size(); ++i) {
      const uint32_t id = layout.params[i];
      if (arrived_[id]) continue;
      if (!options_.ignore_unused_parameters)
        throw PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                          kit::format("stage3: parameter {} received no gradient in this backward (unused by the "
                                      "loss); set zero.ignore_unused_parameters = true to treat it as zero",
                                      param_names_[id]));
      if (!u.grad_staging.defined()) {
        u.grad_staging = at::zeros({layout.padded()}, on_device_);
      } else {
        u.grad_staging.narrow(0, layout.offsets[i], param_numels_[id]).zero_();
      }
    }
    launch_reduction(static_cast<int>(unit));
  }
  while (!reductions_.empty()) finish_reduction(reductions_.front());
  while (!to_host_.empty()) drain_oldest_to_host();
  for (size_t unit = 0; unit < units_.size(); ++unit) {
    units_[unit].open_uses = 0;
    if (!layout_.units()[unit].persistent) release(static_cast<int>(unit));
  }
  agreement_.compare_block_order(trace_->current_hash(), trace_->current().size(), step_, micro_step_);
  if (trace_->end_micro_batch() && ++order_changes_ == 1)
    host_.warn(kit::format(
        "stage3: the block order changed in step {} (micro-batch {}), the same on every rank: re-recorded ({} events); "
        "prefetching follows the latest order (later changes are re-recorded without a message)",
        step_, micro_step_, trace_->recorded().size()));
  in_micro_batch_ = false;
}

// One small all-gather per micro-batch: every rank's hash of the events it ran.
void Stage3Partition::step(zhost_step_args& args) {
  // Note [Step prologue]: overflow, exact norm and the one gradient factor, over every sub-group's shard (a
  // tier's accumulators are in host memory, the collectives' scalars on the device).
  std::vector<at::Tensor> grads;
  for (const SubGroupState& g : sub_groups_) grads.push_back(g.grad);
  const zero::StepDecision decision = zero::step_prologue(host_, grads, world_size_, on_device_.device(), args);
  const int64_t step = args.applied_steps + 1;
  if (!decision.overflow) {
    if (tier_.active()) {
      step_offloaded(decision.grad_scale, step, args.lr);
    } else {
      for (SubGroupState& g : sub_groups_) {  // one sub-group at a time: at most one fp32 copy of 16-bit gradients
        const at::Tensor grad = g.grad.scalar_type() == at::kFloat ? g.grad : g.grad.to(at::kFloat);
        optimizer_->step(g.master, grad, g.state, step, args.lr, decision.grad_scale);
        if (g.shard.defined()) kit::copy_master_to_model(g.shard, g.master);
      }
    }
  }
  if (decision.overflow || !tier_.active())
    for (SubGroupState& g : sub_groups_) g.grad.zero_();
  if (!decision.overflow) gather_persistent();  // its shards changed; the other units are gathered when next needed
}

// The tier steps each sub-group (unscale and clipping in its one pass, which also zeroes its accumulator)
// and writes the updated shard: into the device shard directly when training in host memory; staged, into
// pinned host memory, chunk by chunk (zero.offload_optimizer.step_chunk_size), each chunk's copy to the
// device running while the next chunk steps; with parameter offload, back into the parameter tier.
void Stage3Partition::step_offloaded(double grad_scale, int64_t step, double lr) {
  for (size_t i = 0; i < sub_groups_.size(); ++i) {
    SubGroupState& g = sub_groups_[i];
    if (params_tier_.instance) {
      step_into_parameter_tier(i, grad_scale, step, lr);
    } else if (staged()) {  // chunk by chunk, each copied while the next steps
      staged_step_.step(i, step, lr, grad_scale, g.shard);
    } else {
      tier_.step(i, step, lr, grad_scale, g.shard);
    }
  }
  staged_step_.finish();
}

// Parameter offload: the updated shards go back to the parameter tier, unit by unit through one host
// buffer of a shard's size (kept in the staging pool between steps); a tier that steps whole groups only
// writes the whole sub-group first.
void Stage3Partition::step_into_parameter_tier(size_t sub_group, double grad_scale, int64_t step, double lr) {
  const SubGroup& group = layout_.sub_groups()[sub_group];
  auto store = [&](int unit, const at::Tensor& shard) {
    DLTensor src = dl_view(shard);
    tier_io(params_tier_.api->store, param_key(unit), src);
  };
  if (!tier_.steps_ranges()) {
    at::Tensor buffer = take_host(group.numel);
    tier_.step(sub_group, step, lr, grad_scale, buffer.narrow(0, 0, group.numel));
    for (int unit : group.units) {
      const FetchUnit& layout = layout_.units()[static_cast<size_t>(unit)];
      store(unit, buffer.narrow(0, layout.sub_group_offset, layout.shard));
    }
    give_host(std::move(buffer));
    return;
  }
  for (int unit : group.units) {
    const FetchUnit& layout = layout_.units()[static_cast<size_t>(unit)];
    at::Tensor buffer = take_host(layout.shard);
    const at::Tensor shard = buffer.narrow(0, 0, layout.shard);
    tier_.step_range(sub_group, layout.sub_group_offset, step, lr, grad_scale, shard);
    store(unit, shard);
    give_host(std::move(buffer));
  }
}

void Stage3Partition::gather_param(uint32_t id, DLTensor& out) {
  if (in_micro_batch_)
    throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "stage3: gather_param called inside a micro-batch");
  if (id >= param_numels_.size())
    throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, kit::format("stage3: no parameter {}", id));
  const int unit = layout_.unit_of(id);
  if (saving_unit_ != unit && saving_unit_ >= 0 && !layout_.units()[static_cast<size_t>(saving_unit_)].persistent)
    release(saving_unit_);
  saving_unit_ = unit;
  make_live(unit);
  at::Tensor target = tensor_view(out);
  if (target.numel() != param_numels_[id])
    throw PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                      kit::format("stage3: gather_param: parameter {} has {} elements, the output {}", param_names_[id],
                                  param_numels_[id], target.numel()));
  target.view({-1}).copy_(units_[static_cast<size_t>(unit)].flat.narrow(0, layout_.offset_of(id), param_numels_[id]));
}

void Stage3Partition::memory(zhost_model_state_bytes& out) const {
  for (const SubGroupState& g : sub_groups_) {
    if (g.shard.defined()) {  // 16-bit shards (or any shards next to a tier's masters)
      out.params += g.shard.nbytes();
      if (g.master.defined()) out.master += g.master.nbytes();
    } else if (g.master.defined()) {  // fp32: the master is the parameter shard
      out.params += g.master.nbytes();
    }
    if (!tier_.active()) out.grads += g.grad.nbytes();
    out.optimizer += static_cast<uint64_t>(g.state.bytes());
  }
  if (tier_.active())  // masters, states and gradient accumulators (and, offloaded, the shards) are the tier's
    out.offloaded = tier_.bytes();  // one instance serves both roles with "cpu"
  // Gradient staging lives only while a unit reduces (at most reduce_bucket_size); parameter staging stays.
  out.buffers = 0;
  for (const Staging& slot : staging_) out.buffers += slot.buffer.nbytes();
}

template <typename Visit>
void Stage3Partition::for_each_shard_run(Visit&& visit) const {
  for (const FetchUnit& unit : layout_.units()) {
    const int64_t begin = rank_ * unit.shard, end = begin + unit.shard;
    for (size_t i = 0; i < unit.params.size(); ++i) {
      const int64_t p_begin = unit.offsets[i], p_end = p_begin + param_numels_[unit.params[i]];
      const int64_t lo = std::max(begin, p_begin), hi = std::min(end, p_end);
      if (lo < hi) visit(unit.params[i], lo - p_begin, unit.sub_group, unit.sub_group_offset + (lo - begin), hi - lo);
    }
  }
}

// Checkpoints (docs/checkpoints.md): this rank's shards of the masters and optimizer states, parameter by
// parameter, from the sub-groups or the tier that holds them. Loading fills them from whatever ranks and stage
// saved them, refreshes the 16-bit shards (in the parameter tier with parameter offload) and gathers the
// persistent unit again (the others are gathered when next needed).
void Stage3Partition::save_state(const zhost_state_io& io) {
  for_each_shard_run([&](uint32_t param, int64_t param_offset, int group, int64_t offset, int64_t length) {
    if (tier_.active()) {
      for (const std::string& name : state_names_) {
        const at::Tensor values = at::empty({length}, at::kFloat);
        tier_.read_state(static_cast<uint64_t>(group), name, offset, values);
        host_.check(kit::put_state(io, param, name, param_offset, values));
      }
      return;
    }
    const SubGroupState& g = sub_groups_[static_cast<size_t>(group)];
    for (const auto& [name, values] : kit::flat_states(g.master, g.state))
      host_.check(kit::put_state(io, param, name, param_offset, values.narrow(0, offset, length)));
  });
}

void Stage3Partition::load_state(const zhost_state_io& io) {
  if (in_micro_batch_) throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "stage3: load_state called inside a micro-batch");
  for_each_shard_run([&](uint32_t param, int64_t param_offset, int group, int64_t offset, int64_t length) {
    if (tier_.active()) {
      for (const std::string& name : state_names_) {
        const at::Tensor values = at::empty({length}, at::kFloat);
        host_.check(kit::get_state(io, param, name, param_offset, values));
        tier_.write_state(static_cast<uint64_t>(group), name, offset, values);
      }
      return;
    }
    const SubGroupState& g = sub_groups_[static_cast<size_t>(group)];
    for (const auto& [name, values] : kit::flat_states(g.master, g.state))
      host_.check(kit::get_state(io, param, name, param_offset, values.narrow(0, offset, length)));
  });
  for (size_t u = 0; u < units_.size(); ++u)
    if (units_[u].residency == Residency::kLive && !layout_.units()[u].persistent) release(static_cast<int>(u));
  saving_unit_ = -1;
  if (tier_.active()) {
    refresh_shards_from_tier();
  } else {
    for (SubGroupState& g : sub_groups_)
      if (g.shard.defined()) kit::copy_master_to_model(g.shard, g.master);
  }
  gather_persistent();
}

// The 16-bit shards from the tier's masters, sub-group by sub-group: into the device shards, or with parameter
// offload into the parameter tier, unit by unit.
void Stage3Partition::refresh_shards_from_tier() {
  for (size_t g = 0; g < sub_groups_.size(); ++g) {
    const at::Tensor master = at::empty({layout_.sub_groups()[g].numel}, at::kFloat);
    tier_.read_state(g, kit::kMasterState, 0, master);
    if (!params_tier_.instance) {
      sub_groups_[g].shard.copy_(master);
      continue;
    }
    for (int unit : layout_.sub_groups()[g].units) {
      const FetchUnit& u = layout_.units()[static_cast<size_t>(unit)];
      const at::Tensor shard = master.narrow(0, u.sub_group_offset, u.shard).to(compute_dtype_).contiguous();
      DLTensor src = dl_view(shard);
      tier_io(params_tier_.api->store, param_key(unit), src);
    }
  }
}

}  // namespace zhost::stage3
