// plugins/offload_cpu/group_states.cpp: an optimizer group's states, resident or in a storage tier (see
// the header).
#include "plugins/offload_cpu/group_states.hpp"

#include <sys/mman.h>
#include <unistd.h>

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
  if (!handle_) return;
  if (zhost_status* status = sdk::Host(services_, ctx_).buffer_release(handle_)) services_->status_destroy(status);
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
                         bool pinned, StateStorage* storage, HostBuffer::Fill fill, ElementBytes bytes)
    : host_(host),
      key_(group_key),
      generation_(generation & 3u),
      numel_(numel),
      num_states_(num_states),
      bytes_(bytes),
      storage_(storage && storage->tier.active() ? storage : nullptr),
      pinned_(pinned) {
  if (storage_) {
    if (!all_fp32())
      throw PluginError(ZHOST_ERR_UNSUPPORTED,
                        "offload_cpu: bf16 master weights or states stay in host memory; a storage tier under the CPU "
                        "tier is not built for them (remove zero.offload_optimizer.storage, or use fp32 masters)");
    const int64_t chunks = (numel + storage_->chunk - 1) / storage_->chunk;
    grad_finished_.assign(static_cast<size_t>(chunks), 0);
    grad_stored_.assign(static_cast<size_t>(chunks), 0);
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
    resident_[s] = HostBuffer(host_, static_cast<uint64_t>(numel) * static_cast<uint64_t>(element_bytes(s)), pinned,
                              labels[s], fill);
}

GroupStates::GroupStates(GroupStates&& other) noexcept
    : host_(other.host_),
      key_(other.key_),
      generation_(other.generation_),
      numel_(other.numel_),
      num_states_(other.num_states_),
      bytes_(other.bytes_),
      storage_(std::exchange(other.storage_, nullptr)),
      pinned_(other.pinned_),
      grad_finished_(std::move(other.grad_finished_)),
      grad_stored_(std::move(other.grad_stored_)),
      grad_stores_(std::move(other.grad_stores_)) {
  for (int s = 0; s < 3; ++s) resident_[s] = std::move(other.resident_[s]);
}

GroupStates::~GroupStates() {
  TransferFailure ignored;
  for (GradStore& store : grad_stores_) complete_transfer(store.event, ignored);  // the memory may go after this
  drop_stored();
}

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
  sdk::Status status(host_.services(), (to_storage ? tier.storage->store : tier.storage->load)(tier.instance, &args));
  if (!status.ok())
    throw PluginError(status.code(), std::string("tier '") + storage_->tier.name() + "': " + status.message());
  return args.event;
}

void GroupStates::complete_transfer(zhost_tier_event* event, TransferFailure& failure) {
  if (!event) return;
  const zhost_tier_ref& tier = storage_->tier.ref();
  zhost_tier_event_args args{};
  args.struct_size = sizeof(args);
  args.event = event;
  sdk::Status status(host_.services(), tier.storage->wait(tier.instance, &args));
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
    for (int64_t c = 0; c < chunks; ++c) {
      for (int s = 0; s < num_states_; ++s) storage_->tier.drop(storage_key(static_cast<uint32_t>(s), c));
      if (moves_grads()) storage_->tier.drop(storage_key(kGrad, c));  // unknown keys are no error
    }
  } catch (const std::exception& e) {
    host_.warn(std::string("offload_cpu: could not drop a group from its storage tier: ") + e.what());
  }
  storage_ = nullptr;
}

// ---- Note [Gradients in storage] -------------------------------------------------------------------------

void GroupStates::give_back(float* data, int64_t count) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const auto end = reinterpret_cast<uintptr_t>(data + count) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

bool GroupStates::grad_done(float* grad, int64_t offset, int64_t count) {
  if (!moves_grads()) return false;
  if (offset < 0 || count < 0 || offset + count > numel_)
    throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: finished gradients [" + std::to_string(offset) + ", " +
                                                      std::to_string(offset + count) + ") are outside group " +
                                                      std::to_string(key_) + " of " + std::to_string(numel_) +
                                                      " elements");
  const int64_t chunk = storage_->chunk;
  for (int64_t c = offset / chunk; count > 0 && c * chunk < offset + count; ++c) {
    const int64_t length = chunk_length(c);
    int64_t& finished = grad_finished_[static_cast<size_t>(c)];
    finished += std::min(offset + count, c * chunk + length) - std::max(offset, c * chunk);
    if (finished > length || grad_stored_[static_cast<size_t>(c)])
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: gradients of group " + std::to_string(key_) +
                                                        " around element " + std::to_string(offset) +
                                                        " were reported finished twice before the step");
    if (finished < length) continue;
    while (static_cast<int64_t>(grad_stores_.size()) >= storage_->areas) {  // complete the oldest first
      TransferFailure failure;
      GradStore& oldest = grad_stores_.front();
      complete_transfer(oldest.event, failure);
      give_back(grad + oldest.chunk * chunk, chunk_length(oldest.chunk));
      grad_stores_.pop_front();
      failure.rethrow();
    }
    GradStore& store = grad_stores_.emplace_back();
    store.chunk = c;
    store.shape = length;
    store.event = start_transfer(kGrad, c, grad + c * chunk, &store.shape, store.view, /*to_storage=*/true);
    grad_stored_[static_cast<size_t>(c)] = 1;
  }
  return true;
}

void GroupStates::grad_drain(float* grad) {
  TransferFailure failure;
  for (GradStore& store : grad_stores_) {
    complete_transfer(store.event, failure);
    give_back(grad + store.chunk * storage_->chunk, chunk_length(store.chunk));
  }
  grad_stores_.clear();
  failure.rethrow();
}

void GroupStates::grad_before_step(float* grad, int64_t begin, int64_t count) {
  if (!storage_ || count <= 0) return;
  grad_drain(grad);
  const int64_t chunk = storage_->chunk;
  for (int64_t c = begin / chunk; c * chunk < begin + count; ++c) {
    if (!grad_stored_[static_cast<size_t>(c)]) continue;
    int64_t shape = chunk_length(c);
    DLTensor view{};
    TransferFailure failure;
    complete_transfer(start_transfer(kGrad, c, grad + c * chunk, &shape, view, /*to_storage=*/false), failure);
    failure.rethrow();
    grad_stored_[static_cast<size_t>(c)] = 0;
  }
}

void GroupStates::grad_after_step(float* grad, int64_t begin, int64_t count) {
  if (!storage_ || count <= 0) return;
  const int64_t chunk = storage_->chunk;
  for (int64_t c = begin / chunk; c * chunk < begin + count; ++c) grad_finished_[static_cast<size_t>(c)] = 0;
  if (moves_grads()) give_back(grad + begin, count);  // stepping zeroed them
}

void GroupStates::grad_zero(float* grad) {
  if (storage_) {
    grad_drain(grad);
    std::fill(grad_finished_.begin(), grad_finished_.end(), 0);
    std::fill(grad_stored_.begin(), grad_stored_.end(), 0);
  }
  if (!moves_grads()) {
    std::memset(grad, 0, static_cast<size_t>(numel_) * 4);
    return;
  }
  give_back(grad, numel_);  // the whole pages read as zeros now, without being touched; then the partial ones
  const int64_t page = ::sysconf(_SC_PAGESIZE) / 4;
  std::memset(grad, 0, static_cast<size_t>(std::min(numel_, page)) * 4);
  if (numel_ > page) std::memset(grad + numel_ - page, 0, static_cast<size_t>(page) * 4);
}

void GroupStates::grad_read(float* grad, int64_t offset, int64_t count, float* out) {
  if (storage_) grad_drain(grad);
  const int64_t chunk = storage_ ? storage_->chunk : numel_ + 1;
  std::vector<float> loaded;  // a stored chunk the range covers only in part
  for (int64_t at = offset; at < offset + count;) {
    const int64_t c = at / chunk, end = std::min(offset + count, (c + 1) * chunk);
    if (storage_ && grad_stored_[static_cast<size_t>(c)]) {
      int64_t shape = chunk_length(c);
      const bool whole = at == c * chunk && end - at == shape;  // loaded straight into `out`
      if (!whole) loaded.resize(static_cast<size_t>(shape));
      DLTensor view{};
      TransferFailure failure;
      complete_transfer(
          start_transfer(kGrad, c, whole ? out + (at - offset) : loaded.data(), &shape, view, /*to_storage=*/false),
          failure);
      failure.rethrow();
      if (!whole) std::memcpy(out + (at - offset), loaded.data() + (at - c * chunk), static_cast<size_t>(end - at) * 4);
    } else {
      std::memcpy(out + (at - offset), grad + at, static_cast<size_t>(end - at) * 4);
    }
    at = end;
  }
}

uint64_t GroupStates::grad_host_bytes() const {
  const uint64_t all = static_cast<uint64_t>(numel_) * 4;
  if (!storage_) return all;
  uint64_t moved = 0;
  for (size_t c = 0; c < grad_stored_.size(); ++c)
    if (grad_stored_[c]) moved += static_cast<uint64_t>(chunk_length(static_cast<int64_t>(c))) * 4;
  return all - moved;
}

}  // namespace zhost::cpu_tier
