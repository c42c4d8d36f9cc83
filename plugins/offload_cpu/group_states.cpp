// plugins/offload_cpu/group_states.cpp: an optimizer group's states, resident or in a storage tier (see
// the header).
#include "plugins/offload_cpu/group_states.hpp"

#include <cstring>
#include <deque>

namespace zhost::cpu_tier {

using sdk::PluginError;

HostBuffer::HostBuffer(const sdk::Host& host, uint64_t bytes, bool pinned, const std::string& label, Fill fill)
    : services_(host.services()), ctx_(host.context()) {
  zhost_buffer_alloc_args args{};
  args.struct_size = sizeof(args);
  args.memory = pinned ? ZHOST_MEMORY_PINNED : ZHOST_MEMORY_HOST;
  args.size_bytes = bytes ? bytes : 1;
  args.label = label.c_str();
  host.check(host.services()->buffer_alloc(host.context(), &args));
  handle_ = args.handle;
  data_ = args.data;
  bytes_ = bytes;
  if (fill == Fill::kZeros) std::memset(data_, 0, args.size_bytes);
}

HostBuffer::~HostBuffer() {
  if (handle_) services_->buffer_release(ctx_, handle_);
}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    HostBuffer old(std::move(*this));
    services_ = other.services_;
    ctx_ = other.ctx_;
    handle_ = std::exchange(other.handle_, 0);
    data_ = other.data_;
    bytes_ = other.bytes_;
  }
  return *this;
}

GroupStates::GroupStates(const sdk::Host& host, uint64_t group_key, uint32_t generation, int64_t numel, int num_states,
                         bool pinned, StateStorage* storage, HostBuffer::Fill fill)
    : host_(host),
      key_(group_key),
      generation_(generation & 3u),
      numel_(numel),
      num_states_(num_states),
      storage_(storage && storage->tier.active() ? storage : nullptr) {
  if (storage_) {
    // Storage keys pack the group key, the chunk and the state (see storage_key): check they fit.
    if (group_key >= (1ull << 30) || (numel + storage_->chunk - 1) / storage_->chunk >= (1ll << 30))
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                        "offload_cpu: group " + std::to_string(group_key) + " of " + std::to_string(numel) +
                            " elements does not fit the storage key layout (group keys below 2^30, fewer than 2^30 "
                            "chunks: raise offload_cpu.storage_chunk_elements)");
    const uint64_t staging_bytes =
        static_cast<uint64_t>(storage_->areas) * 3 * static_cast<uint64_t>(storage_->chunk) * 4;
    if (storage_->staging.bytes() < staging_bytes)
      storage_->staging =
          HostBuffer(host_, staging_bytes, pinned, "offload_cpu staging", HostBuffer::Fill::kUninitialized);
    return;
  }
  const char* labels[3] = {"offload_cpu master", "offload_cpu exp_avg", "offload_cpu exp_avg_sq"};
  for (int s = 0; s < num_states_; ++s)
    resident_[s] = HostBuffer(host_, static_cast<uint64_t>(numel) * 4, pinned, labels[s], fill);
}

GroupStates::GroupStates(GroupStates&& other) noexcept
    : host_(other.host_),
      key_(other.key_),
      generation_(other.generation_),
      numel_(other.numel_),
      num_states_(other.num_states_),
      storage_(std::exchange(other.storage_, nullptr)) {
  for (int s = 0; s < 3; ++s) resident_[s] = std::move(other.resident_[s]);
}

GroupStates::~GroupStates() { drop_stored(); }

uint64_t GroupStates::host_bytes() const {
  uint64_t bytes = 0;
  for (const HostBuffer& b : resident_) bytes += b.bytes();
  return bytes;
}

uint64_t GroupStates::storage_bytes() const {
  return storage_ ? static_cast<uint64_t>(numel_) * 4 * static_cast<uint64_t>(num_states_) : 0;
}

// Buffer key in the storage tier: generation (2 bits), group key (30 bits), chunk (30 bits), state (2 bits).
// Storage keys are buffer keys of the storage tier, apart from the CPU tier's own key namespaces.
uint64_t GroupStates::storage_key(uint32_t state, int64_t chunk) const {
  return (static_cast<uint64_t>(generation_) << 62) | (key_ << 32) | (static_cast<uint64_t>(chunk) << 2) | state;
}

GroupStates::Pipeline::Pipeline(GroupStates& group, uint32_t load, uint32_t store)
    : group_(group), load_(load), store_(store), areas_(static_cast<size_t>(group.storage_->areas)) {}

GroupStates::Pipeline::~Pipeline() {
  // Transfers are still in flight here only when something threw: the staging must outlive them.
  for (Area& area : areas_) {
    for (auto* events : {&area.loads, &area.stores}) {
      try {
        wait(*events);
      } catch (const std::exception& e) {
        group_.host_.warn(std::string("offload_cpu: a storage transfer failed while unwinding: ") + e.what());
      }
    }
  }
}

float* GroupStates::Pipeline::piece_of(int64_t c, int s) const {
  const int64_t area = c % group_.storage_->areas;
  return group_.storage_->staging.floats() + (area * 3 + s) * group_.storage_->chunk;
}

void GroupStates::Pipeline::ready(int64_t c, int64_t last, float** piece) {
  if (next_load_ < c) next_load_ = c;
  const int64_t ahead = group_.storage_->read_ahead ? group_.storage_->areas - 1 : 0;
  for (; next_load_ <= std::min(last, c + ahead); ++next_load_) {
    wait(area_of(next_load_).stores);  // the area's previous chunk is written back before it is overwritten
    start(next_load_, load_, /*to_storage=*/false);
  }
  wait(area_of(c).loads);
  for (int s = 0; s < 3; ++s) piece[s] = piece_of(c, s);
}

void GroupStates::Pipeline::stepped(int64_t c) {
  start(c, store_, /*to_storage=*/true);
  if (!group_.storage_->write_behind) wait(area_of(c).stores);
}

void GroupStates::Pipeline::finish() {
  for (Area& area : areas_) wait(area.stores);
}

void GroupStates::Pipeline::start(int64_t c, uint32_t mask, bool to_storage) {
  Area& area = area_of(c);
  for (int s = 0; s < group_.num_states_; ++s) {
    if (!(mask & (1u << s))) continue;
    area.shapes[s] = std::min(group_.storage_->chunk, group_.numel_ - c * group_.storage_->chunk);
    if (zhost_tier_event* event = group_.start_transfer(static_cast<uint32_t>(s), c, piece_of(c, s), &area.shapes[s],
                                                        area.views[s], to_storage))
      (to_storage ? area.stores : area.loads).push_back(event);
  }
}

// Completes every event of `events` (all of them, even after a failure); throws the first failure.
void GroupStates::Pipeline::wait(std::vector<zhost_tier_event*>& events) {
  TransferFailure failure;
  for (zhost_tier_event* event : events) group_.complete_transfer(event, failure);
  events.clear();
  failure.rethrow();
}

zhost_tier_event* GroupStates::start_transfer(uint32_t s, int64_t c, float* data, int64_t* shape, DLTensor& view,
                                              bool to_storage) {
  const zhost_tier_ref& tier = storage_->tier.ref();
  view = DLTensor{};
  view.data = data;
  view.device = DLDevice{kDLCPU, 0};
  view.ndim = 1;
  view.dtype = DLDataType{kDLFloat, 32, 1};
  view.shape = shape;
  zhost_tier_io_args args{};
  args.struct_size = sizeof(args);
  args.key = storage_key(s, c);
  args.data = &view;
  sdk::Status status(host_.services(), (to_storage ? tier.api->store : tier.api->load)(tier.instance, &args));
  if (!status.ok())
    throw PluginError(status.code(), std::string("tier '") + storage_->tier.name() + "': " + status.message());
  return args.event;
}

void GroupStates::complete_transfer(zhost_tier_event* event, TransferFailure& failure) {
  if (!event) return;
  const zhost_tier_ref& tier = storage_->tier.ref();
  sdk::Status status(host_.services(), tier.api->wait_event(tier.instance, event));
  if (!status.ok())
    failure.keep(status.code(), std::string("tier '") + storage_->tier.name() + "': " + status.message());
}

void GroupStates::transfer_whole(int s, float* memory, bool to_storage) {
  if (!storage_) throw PluginError(ZHOST_ERR_INTERNAL, "offload_cpu: transfer_whole on a resident group");
  struct InFlight {
    int64_t shape = 0;
    DLTensor view{};
    zhost_tier_event* event = nullptr;
  };
  std::deque<InFlight> in_flight;  // a deque: the views' shapes stay where they are
  TransferFailure failure;
  auto complete_oldest = [&] {
    complete_transfer(in_flight.front().event, failure);
    in_flight.pop_front();
  };
  const int64_t chunk = storage_->chunk;
  for (int64_t c = 0; c * chunk < numel_ && failure.code == ZHOST_OK; ++c) {
    if (static_cast<int64_t>(in_flight.size()) >= storage_->areas) complete_oldest();
    if (failure.code != ZHOST_OK) break;
    InFlight& op = in_flight.emplace_back();
    op.shape = std::min(chunk, numel_ - c * chunk);
    try {
      op.event = start_transfer(static_cast<uint32_t>(s), c, memory + c * chunk, &op.shape, op.view, to_storage);
    } catch (const PluginError& e) {
      failure.keep(e.code(), e.what());
    }
  }
  while (!in_flight.empty()) complete_oldest();  // every transfer ends before `memory` may go
  failure.rethrow();
}

void GroupStates::drop_stored() noexcept {
  if (!storage_) return;
  const int64_t chunks = (numel_ + storage_->chunk - 1) / storage_->chunk;
  try {
    for (int64_t c = 0; c < chunks; ++c)
      for (int s = 0; s < num_states_; ++s) storage_->tier.drop(storage_key(static_cast<uint32_t>(s), c));
  } catch (const std::exception& e) {
    host_.warn(std::string("offload_cpu: could not drop a group from its storage tier: ") + e.what());
  }
  storage_ = nullptr;
}

}  // namespace zhost::cpu_tier
