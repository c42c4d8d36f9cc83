// plugins/offload_cpu/group_states.cpp: an optimizer group's states, resident or in a storage tier (see
// the header).
#include "plugins/offload_cpu/group_states.hpp"

#include <cstring>

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
                         bool pinned, StateStorage* storage)
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
    const uint64_t staging_bytes = 3 * static_cast<uint64_t>(storage_->chunk) * 4;
    if (storage_->staging.bytes() < staging_bytes)
      storage_->staging =
          HostBuffer(host_, staging_bytes, pinned, "offload_cpu staging", HostBuffer::Fill::kUninitialized);
    return;
  }
  const char* labels[3] = {"offload_cpu master", "offload_cpu exp_avg", "offload_cpu exp_avg_sq"};
  for (int s = 0; s < num_states_; ++s)
    resident_[s] = HostBuffer(host_, static_cast<uint64_t>(numel) * 4, pinned, labels[s]);
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

void GroupStates::move_chunk(int64_t chunk, int64_t count, uint32_t mask, float** piece, bool to_storage) {
  for (int s = 0; s < 3; ++s) {
    piece[s] = storage_->staging.floats() + s * storage_->chunk;
    if (s >= num_states_ || !(mask & (1u << s))) continue;
    int64_t shape = count;
    DLTensor view{};
    view.data = piece[s];
    view.device = DLDevice{kDLCPU, 0};
    view.ndim = 1;
    view.dtype = DLDataType{kDLFloat, 32, 1};
    view.shape = &shape;
    if (to_storage)
      storage_->tier.store(storage_key(static_cast<uint32_t>(s), chunk), view);
    else
      storage_->tier.load(storage_key(static_cast<uint32_t>(s), chunk), view);
  }
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
