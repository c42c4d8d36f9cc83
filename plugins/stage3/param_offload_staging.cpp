// plugins/stage3/param_offload_staging.cpp: parameter shards in a tier and their staging buffers (see the
// header).
#include "plugins/stage3/param_offload_staging.hpp"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <utility>

#include "zhost/kit/dlpack_views.hpp"
#include "zhost/kit/format.hpp"

namespace zhost::stage3 {

using kit::dl_view;
using sdk::PluginError;

namespace {

// The storage table's event calls (zhost/storage.h); the status, not thrown.
zhost_status* wait_event(const zhost_tier_ref& tier, zhost_tier_event* event) {
  zhost_tier_event_args args{};
  args.struct_size = sizeof(args);
  args.event = event;
  return tier.storage->wait(tier.instance, &args);
}

bool stores(const zhost_tier_ref& tier) { return tier.storage != nullptr; }

}  // namespace

ParamOffloadStaging::~ParamOffloadStaging() {
  // Never leave a load in flight; its failure was or will be reported. The tier is still alive: the host
  // destroys tiers after the partition plugin (docs/abi.md "Tier lifetimes").
  for (Slot& slot : staging_)
    if (slot.load)
      if (zhost_status* status = wait_event(slot.tier, slot.load)) context_.host.services()->status_destroy(status);
}

void ParamOffloadStaging::find_tier() {
  const sdk::Host& host = context_.host;
  params_tier_.struct_size = sizeof(params_tier_);
  params_tier_.role = ZHOST_TIER_FOR_PARAMS;
  host.check(host.services()->tier_for(host.context(), &params_tier_));
  if (params_tier_.instance && !stores(params_tier_))
    throw PluginError(ZHOST_ERR_UNSUPPORTED,
                      kit::format("offload tier '{}' cannot store parameters; set zero.offload_param.device = \"cpu\"",
                                  params_tier_.name));
}

// Every unit's shard goes to the tier, the device keeps buffer_count staging buffers of at most buffer_size
// elements (no more than the largest shard) to gather from.
std::string buffer_size_refusal(int64_t buffer_size, int64_t largest_shard) {
  return kit::format(
      "zero.offload_param.buffer_size = {} elements is smaller than the largest parameter shard ({} elements, one "
      "block's parameters / ranks): set it to at least {}",
      buffer_size, largest_shard, largest_shard);
}

void ParamOffloadStaging::check_buffer_size() const {
  const int64_t largest = context_.layout.largest_shard();
  if (largest > context_.options.offload_buffer_size)
    throw PluginError(ZHOST_ERR_CONFIG, buffer_size_refusal(context_.options.offload_buffer_size, largest));
}

void ParamOffloadStaging::keep_within_max_in_cpu() {
  const Stage3Context& c = context_;
  if (c.options.offload_max_in_cpu == 0) return;
  int kept = 0;
  int64_t kept_elements = 0, total = 0;
  for (int unit = 0; unit < c.units(); ++unit) {
    const int64_t shard = c.unit(unit).shard;
    if (kept == unit && kept_elements + shard <= c.options.offload_max_in_cpu) {
      ++kept;
      kept_elements += shard;
    }
    total += shard;
  }
  if (kept == 0) return;
  host_tier_.struct_size = sizeof(host_tier_);
  host_tier_.role = ZHOST_TIER_FOR_OPTIMIZER;
  c.host.check(c.host.services()->tier_for(c.host.context(), &host_tier_));
  if (host_tier_.instance == params_tier_.instance) {  // device = "cpu": every shard is in host memory already
    host_tier_ = zhost_tier_ref{};
    return;
  }
  if (!host_tier_.instance) {
    c.host.warn(kit::format(
        "zero.offload_param.max_in_cpu = {} would keep {} elements in host memory, but no tier there runs the "
        "optimizer (zero.offload_optimizer.device = \"none\") to keep them; all of them go to '{}' (set "
        "max_in_cpu = 0 to say so)",
        c.options.offload_max_in_cpu, kept_elements, params_tier_.name));
    return;
  }
  if (!stores(host_tier_)) {
    c.host.warn(
        kit::format("zero.offload_param.max_in_cpu = {} would keep {} elements in host memory, but the "
                    "optimizer's tier '{}' cannot store parameters; all of them go to '{}' (set max_in_cpu = 0 "
                    "to say so)",
                    c.options.offload_max_in_cpu, kept_elements, host_tier_.name, params_tier_.name));
    host_tier_ = zhost_tier_ref{};
    return;
  }
  in_host_tier_.assign(static_cast<size_t>(c.units()), 0);
  std::fill(in_host_tier_.begin(), in_host_tier_.begin() + kept, 1);
  auto units = [](int first, int last) {
    return first == last ? kit::format("unit {}", first) : kit::format("units {}-{}", first, last);
  };
  c.host.info(
      kit::format("zero.offload_param.max_in_cpu = {}: the shards of {} ({} of {} elements on this rank) "
                  "stay in host memory, in tier '{}'; {} on '{}'{}",
                  c.options.offload_max_in_cpu, units(0, kept - 1), kept_elements, total, host_tier_.name,
                  kept == c.units() ? "none" : units(kept, c.units() - 1), params_tier_.name,
                  kept == c.units() ? " (set max_in_cpu lower to put shards there)" : ""));
}

void ParamOffloadStaging::allocate() {
  const int64_t largest = context_.layout.largest_shard();
  // No more gathers than units can be in flight: more buffers would only take memory.
  staging_.resize(static_cast<size_t>(std::min<int64_t>(context_.options.offload_buffer_count, context_.units())));
  for (Slot& slot : staging_) slot.buffer = at::empty({largest}, context_.on_device);
}

void ParamOffloadStaging::store(int unit, const at::Tensor& shard) {
  DLTensor src = dl_view(shard);
  const zhost_tier_ref& tier = tier_of(unit);
  tier_io(tier, tier.storage->store, param_key(unit), src);
}

ParamOffloadStaging::Slot* ParamOffloadStaging::free_slot() {
  for (Slot& slot : staging_)
    if (slot.unit < 0) return &slot;
  return nullptr;
}

bool ParamOffloadStaging::slot_available() const {
  if (!params_tier_.instance) return true;
  for (const Slot& slot : staging_)
    if (slot.unit < 0) return true;
  return false;
}

void ParamOffloadStaging::load(Slot& slot, int unit, DLTensor& dst) {
  slot.unit = unit;
  slot.tier = tier_of(unit);
  slot.load = tier_io_start(slot.tier, slot.tier.storage->load, param_key(unit), dst);
  if (!slot.load) return;
  if (slot.tier.storage->order_compute_after) {
    zhost_tier_event_args args{};
    args.struct_size = sizeof(args);
    args.event = slot.load;
    context_.host.check(slot.tier.storage->order_compute_after(slot.tier.instance, &args));
  } else {
    finish_load(slot);
    slot.unit = unit;
  }
}

void ParamOffloadStaging::release_slot_of(int unit) {
  for (Slot& slot : staging_)
    if (slot.unit == unit) finish_load(slot);
}

// The slot's load is complete (waited for) and the slot free.
void ParamOffloadStaging::finish_load(Slot& slot) {
  slot.unit = -1;
  if (!slot.load) return;
  zhost_tier_event* load = std::exchange(slot.load, nullptr);
  context_.host.check(wait_event(slot.tier, load));
}

uint64_t ParamOffloadStaging::buffer_bytes() const {
  uint64_t bytes = 0;
  for (const Slot& slot : staging_) bytes += slot.buffer.nbytes();
  return bytes;
}

zhost_tier_event* ParamOffloadStaging::tier_io_start(const zhost_tier_ref& tier, TierIo io, uint64_t key,
                                                     DLTensor& data) {
  zhost_tier_io_args args{};
  args.struct_size = sizeof(args);
  args.key = key;
  args.data = &data;
  context_.host.check(io(tier.instance, &args));
  return args.event;
}

void ParamOffloadStaging::tier_io(const zhost_tier_ref& tier, TierIo io, uint64_t key, DLTensor& data) {
  if (zhost_tier_event* event = tier_io_start(tier, io, key, data)) context_.host.check(wait_event(tier, event));
}

void ParamOffloadStaging::drop_shards(const zhost_tier_ref& tier) noexcept {
  for (int unit = 0; unit < context_.units(); ++unit) {
    if (in_host_tier(unit)) continue;
    zhost_tier_key_args args{};
    args.struct_size = sizeof(args);
    args.key = param_key(unit);
    sdk::Status status(context_.host.services(), tier.storage->drop(tier.instance, &args));
    if (!status.ok())
      context_.host.warn(kit::format("stage3: could not drop {}'s shard from tier '{}': {}", context_.unit_name(unit),
                                     tier.name, status.message()));
  }
}

// Note [Storage swap] (host/engine/storage_swap.hpp): COPY loads each unit's shard from the params tier into the
// first staging buffer (free between steps) and stores it into the new tier under the same key; COMMIT drops the
// old copies and gathers from the new tier from then on; ABORT drops the new copies.
void ParamOffloadStaging::move_storage(zhost_tier_storage_move& args, const FinishGather& finish_gather) {
  switch (args.phase) {
    case ZHOST_STORAGE_MOVE_COPY:
      copy_to_pending(args, finish_gather);
      return;
    case ZHOST_STORAGE_MOVE_COMMIT:
      if (!pending_params_tier_.instance)
        throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "stage3: parameter storage move COMMIT without a COPY");
      drop_shards(params_tier_);
      params_tier_ = std::exchange(pending_params_tier_, zhost_tier_ref{});
      context_.host.info(kit::format("parameter shards now kept in tier '{}'", params_tier_.name));
      return;
    case ZHOST_STORAGE_MOVE_ABORT:
      if (pending_params_tier_.instance) drop_shards(pending_params_tier_);
      pending_params_tier_ = zhost_tier_ref{};
      return;
    default:
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, kit::format("stage3: unknown storage move phase {}", args.phase));
  }
}

void ParamOffloadStaging::copy_to_pending(zhost_tier_storage_move& args, const FinishGather& finish_gather) {
  if (!params_tier_.instance || staging_.empty())
    throw PluginError(ZHOST_ERR_UNSUPPORTED,
                      "stage 3 keeps its parameter shards in a tier only with zero.offload_param.device; start the "
                      "job with it to swap the shards' storage");
  const zhost_tier_ref* target = args.storage;
  if (!target || !target->instance || !stores(*target))
    throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "stage3: a parameter storage move names no storing tier");
  // Onto the tier the shards are in, COPY would overwrite them with themselves and COMMIT (or a failure's
  // clean-up) would then drop the only copy.
  if (target->instance == params_tier_.instance)
    throw PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                      "stage3: the parameter shards are in that tier already; name another storage");
  for (Slot& slot : staging_)  // nothing may still be loading from the old tier
    if (slot.unit >= 0) finish_gather(slot.unit);
  pending_params_tier_ = *target;
  pending_params_tier_.struct_size = sizeof(pending_params_tier_);
  uint64_t bytes = 0;
  try {
    for (int unit = 0; unit < context_.units(); ++unit) {
      if (in_host_tier(unit)) continue;  // Note [max_in_cpu]: kept in host memory whatever the parameter tier
      const at::Tensor shard = staging_.front().buffer.narrow(0, 0, context_.unit(unit).shard);
      DLTensor view = dl_view(shard);
      tier_io(params_tier_, params_tier_.storage->load, param_key(unit), view);
      tier_io(pending_params_tier_, pending_params_tier_.storage->store, param_key(unit), view);
      bytes += static_cast<uint64_t>(shard.numel()) * static_cast<uint64_t>(shard.element_size());
    }
  } catch (...) {
    drop_shards(pending_params_tier_);
    pending_params_tier_ = zhost_tier_ref{};
    throw;
  }
  args.bytes = bytes;
}

}  // namespace zhost::stage3
