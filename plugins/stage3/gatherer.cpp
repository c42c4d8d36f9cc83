// plugins/stage3/gatherer.cpp: gathering, prefetching and releasing fetch units along the block order (see
// the header).
#include "plugins/stage3/gatherer.hpp"

#include <algorithm>

#include "zhost/kit/dlpack_views.hpp"
#include "zhost/kit/format.hpp"

namespace zhost::stage3 {

using kit::dl_view;
using kit::tensor_view;

Gatherer::~Gatherer() {
  for (Unit& u : units_) zero::abandon(context_.host, u.gather_work);
}

void Gatherer::setup(const zhost_partition_setup& setup) {
  units_.resize(static_cast<size_t>(context_.units()));
  for (int u = 0; u < context_.units(); ++u) unit_state(u).residency = UnitResidency(u);
  std::vector<int64_t> unit_numel;
  for (const FetchUnit& unit : context_.layout.units()) unit_numel.push_back(unit.padded());
  units_of_block_.resize(static_cast<size_t>(setup.num_blocks));
  for (int32_t b = 0; b < setup.num_blocks; ++b) {
    std::vector<uint32_t> ids(setup.block_param_ids + setup.block_param_offsets[b],
                              setup.block_param_ids + setup.block_param_offsets[b + 1]);
    units_of_block_[static_cast<size_t>(b)] = context_.layout.units_read(ids);
  }
  tied_units_of_block_.resize(units_of_block_.size());
  for (size_t b = 0; b < units_of_block_.size(); ++b)
    for (int unit : units_of_block_[b]) {
      const FetchUnit& u = context_.unit(unit);
      if (!u.persistent && u.block != static_cast<int32_t>(b)) tied_units_of_block_[b].push_back(unit);
    }
  tied_closed_.assign(units_of_block_.size(), 0);
  trace_ = std::make_unique<BlockTrace>(units_of_block_, unit_numel);
}

void Gatherer::add_unit(int unit, const at::Tensor& shard) {
  const FetchUnit& layout = context_.unit(unit);
  Unit& u = unit_state(unit);
  u.shard = shard;
  const zhost_param_services& store = context_.params();
  zhost_param_group_create_args args{};
  args.struct_size = sizeof(args);
  args.ids = layout.params.data();
  args.offsets = layout.offsets.data();
  args.count = layout.params.size();
  args.numel = layout.padded();
  context_.host.check(store.group_create(context_.host.context(), &args));
  u.group = args.group;
}

// Starts the all-gather of the N shards into the unit's storage, materialising it first if released (a
// live unit, the persistent one after a step, is gathered again in place).
void Gatherer::start_gather(int unit, zhost_collective_intent intent) {
  Unit& u = unit_state(unit);
  const FetchUnit& layout = context_.unit(unit);
  const sdk::Host& host = context_.host;
  if (u.residency.released()) {
    zhost_param_group_args args{};
    args.struct_size = sizeof(args);
    args.group = u.group;
    host.check(context_.params().materialize(host.context(), &args));
    u.flat = tensor_view(args.flat);
    u.recv_dl = dl_view(u.flat);
    live_elements_ += layout.padded();
  }
  if (offload_.active()) {  // the shard comes from the tier into a staging buffer, then is sent
    ParamOffloadStaging::Slot& slot = free_slot();
    u.send = slot.buffer.narrow(0, 0, layout.shard);
    DLTensor dst = dl_view(u.send);
    offload_.load(slot, unit, dst);
  } else {
    u.send = u.shard;
  }
  u.send_dl = dl_view(u.send);
  context_.agreement.before(RankAgreement::Collective::kGather, unit, context_.step);
  // Within a micro-batch the parameters do not change: a unit's second gather there (backward's, or a tied
  // block's) says so, for a transform that keeps a copy (hpZ).
  if (intent == ZHOST_INTENT_PARAM_GATHER && in_micro_batch_) {
    if (u.gathered_in_micro_batch) intent = ZHOST_INTENT_PARAM_REGATHER;
    u.gathered_in_micro_batch = true;
  }
  zhost_collective_args args = zero::collective_args(intent, layout.block);
  u.segments = layout.segments();
  args.ext = &u.segments.header;
  u.read_exactly = intent == ZHOST_INTENT_PARAM_READ;
  args.send = &u.send_dl;
  args.recv = &u.recv_dl;
  args.flags = ZHOST_COLLECTIVE_ASYNC;
  host.check(host.collectives().all_gather(host.context(), &args));
  u.gather_work = args.work;
  u.residency.begin_gather();
}

void Gatherer::finish_gather(int unit) {
  Unit& u = unit_state(unit);
  zero::wait_for(context_.host, u.gather_work);
  u.residency.end_gather();
  offload_.release_slot_of(unit);  // its staging buffer (parameter offload) is free again
  u.send = at::Tensor();
}

// Parameter offload: a staging buffer no gather in flight uses; when all are taken, the oldest gathers
// are completed until one is free.
ParamOffloadStaging::Slot& Gatherer::free_slot() {
  for (;;) {
    if (ParamOffloadStaging::Slot* slot = offload_.free_slot()) return *slot;
    finish_gather(offload_.first_slot_unit());  // every buffer serves a gather in flight
  }
}

// The unit's parameters hold their full values when this returns; time spent
// waiting is the "stage3/gather_wait" span of the wall-clock breakdown.
void Gatherer::make_live(int unit) {
  Unit& u = unit_state(unit);
  if (u.residency.live()) return;
  const zero::ScopedSpan span(context_.host, "gather_wait");
  if (u.residency.released()) start_gather(unit);
  finish_gather(unit);
}

void Gatherer::release(int unit) {
  Unit& u = unit_state(unit);
  if (u.residency.released()) return;
  if (u.residency.gathering()) finish_gather(unit);
  const int64_t size = context_.unit(unit).padded();
  if (u.prefetched) prefetched_elements_ -= size;
  u.prefetched = false;
  u.flat = at::Tensor();
  zhost_param_group_args args{};
  args.struct_size = sizeof(args);
  args.group = u.group;
  context_.host.check(context_.params().release(context_.host.context(), &args));
  live_elements_ -= size;
  u.residency.release();
}

void Gatherer::gather_persistent() {
  const int unit = context_.layout.persistent_unit();
  if (unit < 0) return;
  start_gather(unit);
  finish_gather(unit);
}

void Gatherer::release_alone() {
  if (alone_unit_ < 0) return;
  if (!context_.persistent(alone_unit_))
    release(alone_unit_);
  else if (unit_state(alone_unit_).read_exactly && unit_state(alone_unit_).residency.live())
    gather_persistent();  // the values training had
}

const at::Tensor& Gatherer::gather_alone(int unit) {
  if (alone_unit_ != unit) release_alone();
  alone_unit_ = unit;
  Unit& u = unit_state(unit);
  if (!u.read_exactly || !u.residency.live()) {
    if (u.residency.gathering()) finish_gather(unit);
    start_gather(unit, ZHOST_INTENT_PARAM_READ);
    finish_gather(unit);
  }
  return u.flat;
}

void Gatherer::release_live() {
  for (int u = 0; u < context_.units(); ++u)
    if (unit_state(u).residency.live() && !context_.persistent(u)) release(u);
  alone_unit_ = -1;
}

void Gatherer::begin_micro_batch() {
  release_alone();
  alone_unit_ = -1;
  trace_->begin_micro_batch();
  std::fill(tied_closed_.begin(), tied_closed_.end(), 0);
  last_backward_block_ = -1;
  for (Unit& u : units_) u.gathered_in_micro_batch = false;
  in_micro_batch_ = true;
}

void Gatherer::enter(const BlockEvent& event) {
  const bool following = trace_->advance(event);
  if (event.backward) {
    if (last_backward_block_ >= 0) close_tied_reads(last_backward_block_);
    last_backward_block_ = event.block;
  }
  const auto& needed = units_of_block_.at(static_cast<size_t>(event.block));
  for (int unit : needed) make_live(unit);
  for (int unit : needed) {
    Unit& u = unit_state(unit);
    ++u.open_uses;
    if (u.prefetched) prefetched_elements_ -= context_.unit(unit).padded();
    u.prefetched = false;
  }
  if (following) prefetch();
}

// Gathers ahead, in the order the recorded trace will need them, the units not
// yet live.
void Gatherer::prefetch() {
  const Stage3Options& options = context_.options;
  if (options.prefetch_bucket_size <= 0) return;
  for (int unit : trace_->upcoming_units()) {
    Unit& u = unit_state(unit);
    if (!u.residency.released()) continue;
    const int64_t size = context_.unit(unit).padded();
    if (prefetched_elements_ + size > options.prefetch_bucket_size) return;
    if (live_elements_ + size > options.max_live_parameters) return;
    if (!offload_.slot_available()) return;
    start_gather(unit);
    u.prefetched = true;
    prefetched_elements_ += size;
  }
}

void Gatherer::leave(int32_t block, bool backward) {
  const auto& tied = tied_units_of_block_.at(static_cast<size_t>(block));
  for (int unit : units_of_block_.at(static_cast<size_t>(block))) {
    if (backward && tied_closed_[static_cast<size_t>(block)] && std::count(tied.begin(), tied.end(), unit)) continue;
    Unit& u = unit_state(unit);
    if (u.open_uses > 0) --u.open_uses;
    maybe_release(unit);
  }
}

// The backward of `block` has handed its input's gradient on (the next pre_backward fired): every autograd
// node of the block that reads a weight to compute an activation's gradient has run, so the block no longer
// reads the weights it shares with other blocks, although their gradients are not complete yet.
void Gatherer::close_tied_reads(int32_t block) {
  uint8_t& closed = tied_closed_[static_cast<size_t>(block)];
  if (closed) return;
  closed = 1;
  for (int unit : tied_units_of_block_[static_cast<size_t>(block)]) {
    Unit& u = unit_state(unit);
    if (u.open_uses > 0) --u.open_uses;
    maybe_release(unit);
  }
}

void Gatherer::maybe_release(int unit) {
  const Unit& u = unit_state(unit);
  if (u.residency.released() || u.open_uses > 0 || u.prefetched) return;
  if (context_.persistent(unit)) return;
  if (trace_->reused_within(unit, context_.options.max_reuse_distance)) return;
  release(unit);
}

void Gatherer::end_micro_batch() {
  in_micro_batch_ = false;
  for (int unit = 0; unit < context_.units(); ++unit) {
    unit_state(unit).open_uses = 0;
    unit_state(unit).gathered_in_micro_batch = false;
    if (!context_.persistent(unit)) release(unit);
  }
  context_.agreement.compare_block_order(trace_->current_hash(), trace_->current().size(), context_.step,
                                         context_.micro_step);
  if (trace_->end_micro_batch() && ++order_changes_ == 1)
    context_.host.warn(kit::format(
        "stage3: the block order changed in step {} (micro-batch {}), the same on every rank: re-recorded ({} events); "
        "prefetching follows the latest order (later changes are re-recorded without a message)",
        context_.step, context_.micro_step, trace_->recorded().size()));
}

}  // namespace zhost::stage3
