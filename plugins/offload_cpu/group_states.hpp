// plugins/offload_cpu/group_states.hpp: where one optimizer group of the CPU tier keeps its fp32 master
// weights and optimizer states between steps: resident in host memory, or in a storage tier under the CPU
// tier (docs/abi.md "Tier composition"), loaded piece by piece into a bounded host staging area for each
// step and stored back. Visiting a range of the group hands the caller plain float pointers either way, so
// the optimizer kernel runs on the same values in the same order: composed training equals plain training
// bit for bit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "zhost/cpp/offload.hpp"

namespace zhost::cpu_tier {

// A host buffer from the host's buffer service, released with this object.
class HostBuffer {
 public:
  enum class Fill { kZeros, kUninitialized };  // kUninitialized: the caller overwrites every byte at once
  HostBuffer() = default;
  HostBuffer(const sdk::Host& host, uint64_t bytes, bool pinned, const std::string& label, Fill fill = Fill::kZeros);
  ~HostBuffer();
  HostBuffer(HostBuffer&& other) noexcept
      : services_(other.services_),
        ctx_(other.ctx_),
        handle_(std::exchange(other.handle_, 0)),
        data_(other.data_),
        bytes_(other.bytes_) {}
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  float* floats() const { return static_cast<float*>(data_); }
  void* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }

 private:
  const zhost_host_services* services_ = nullptr;  // the instance's, valid until its destroy() returns
  zhost_host_context* ctx_ = nullptr;
  zhost_buffer_handle handle_ = 0;
  void* data_ = nullptr;
  uint64_t bytes_ = 0;
};

// The storage tier under the CPU tier and the staging all its groups share: `areas` staging areas of `chunk`
// elements of each state (offload_cpu.storage_chunk_elements), so host memory holds `areas` pieces of a group
// at a time (Note [Storage pipeline]).
struct StateStorage {
  sdk::TierClient tier;  // inactive: groups stay resident in host memory
  int64_t chunk = 0;
  int64_t areas = 1;          // zero.offload_optimizer.buffer_count
  bool read_ahead = false;    // zero.offload_optimizer.pipeline_read
  bool write_behind = false;  // zero.offload_optimizer.pipeline_write
  HostBuffer staging;         // areas * 3 * chunk floats, allocated on first use
};

// Bytes per element of a group's master and of its moments: 4 (fp32), or 2 (bf16, Note [bf16 master weights] in
// zhost/kit/cpu_optimizer.hpp; resident groups only).
struct ElementBytes {
  int master = 4;
  int moments = 4;
};

// Note [Storage pipeline]: a step over a stored group visits its chunks in order, each in staging area
// (chunk % areas). With pipeline_read the loads of the next areas - 1 chunks are started before chunk i
// steps, so reading i+1 overlaps with stepping i; with pipeline_write chunk i's stores are waited for only
// when its area is needed again (or at the end of the visit), so writing i overlaps with stepping i+1.
// Without either, each chunk is loaded, stepped and stored before the next (DeepSpeed's defaults). The
// values and their order do not change, so every setting gives the same bits. A storage tier that
// finishes transfers at once (NULL events) simply gets no overlap.
class GroupStates {
 public:
  enum State : uint32_t { kMaster = 0, kExpAvg = 1, kExpAvgSq = 2, kGrad = 3 };  // kGrad: storage keys only
  static constexpr uint32_t kAll = (1u << kMaster) | (1u << kExpAvg) | (1u << kExpAvgSq);

  // `num_states`: 3 (master, exp_avg, exp_avg_sq) or 2 (Lion: no exp_avg_sq). With an active `storage`
  // the states live there under buffer keys derived from `group_key` and `generation` (0..3: groups being
  // imported use the next one, so they never overwrite the groups they replace until the import
  // succeeded); the storage outlives the group.
  // `fill`: resident states start as zeros, or (kUninitialized) as whatever the caller writes into all of them.
  GroupStates(const sdk::Host& host, uint64_t group_key, uint32_t generation, int64_t numel, int num_states,
              bool pinned, StateStorage* storage, HostBuffer::Fill fill = HostBuffer::Fill::kZeros,
              ElementBytes bytes = ElementBytes());
  ~GroupStates();  // drops the group's buffers from the storage tier
  GroupStates(GroupStates&& other) noexcept;
  GroupStates(const GroupStates&) = delete;
  GroupStates& operator=(const GroupStates&) = delete;
  GroupStates& operator=(GroupStates&&) = delete;

  int64_t numel() const { return numel_; }
  int num_states() const { return num_states_; }
  bool stored() const { return storage_ != nullptr; }
  // Bytes per element of state `s` (4 in a stored group).
  int element_bytes(int s) const { return s == kMaster ? bytes_.master : bytes_.moments; }
  bool all_fp32() const { return bytes_.master == 4 && bytes_.moments == 4; }
  // A resident fp32 group's state `s` (numel floats); nullptr for a stored group.
  float* resident(int s) const { return storage_ ? nullptr : resident_[s].floats(); }
  uint64_t host_bytes() const;
  uint64_t storage_bytes() const;

  // Calls fn(void* const* states, int64_t begin, int64_t count) over [begin, end) in pieces, states[s]
  // pointing at element `begin` of state s (element_bytes(s) each). States in `load` are read from the storage
  // tier first, states in `store` written back after (a stored group keeps no copy); a resident group ignores
  // both masks.
  template <typename Fn>
  void visit(int64_t begin, int64_t end, uint32_t load, uint32_t store, Fn&& fn) {
    if (!storage_) {
      void* states[3] = {nullptr, nullptr, nullptr};
      for (int s = 0; s < num_states_; ++s)
        states[s] = static_cast<char*>(resident_[s].data()) + begin * element_bytes(s);
      fn(states, begin, end - begin);
      return;
    }
    if (begin >= end) return;
    const int64_t chunk = storage_->chunk;
    Pipeline pipeline(*this, load, store);
    for (int64_t c = begin / chunk, last = (end - 1) / chunk; c <= last; ++c) {
      const int64_t chunk_begin = c * chunk, chunk_end = std::min(chunk_begin + chunk, numel_);
      float* piece[3];
      pipeline.ready(c, last, piece);
      const int64_t lo = std::max(begin, chunk_begin), hi = std::min(end, chunk_end);
      void* states[3] = {piece[0] + (lo - chunk_begin), piece[1] + (lo - chunk_begin),
                         num_states_ > 2 ? piece[2] + (lo - chunk_begin) : nullptr};
      fn(states, lo, hi - lo);
      pipeline.stepped(c);
    }
    pipeline.finish();
  }

  // Note [Gradients in storage]: the partition adds its reduced gradients into the group's accumulator (`grad`,
  // numel floats of the tier's, host memory) and reports each range it has finished for the step
  // (optimizer_grad_done). For a stored group in pageable memory, a chunk (storage_chunk_elements) whose every
  // element is finished is stored under its own key, at most `areas` stores in flight, and its whole pages are
  // given back to the kernel (madvise): between backward and step, host memory holds only the chunks still
  // being filled. The step loads each stored chunk back into its place just before stepping it and gives its
  // pages back again after (stepping zeroes them). The values and their order do not change, so training is
  // bit for bit the same as with the accumulator resident. Pinned or resident groups keep every gradient in
  // host memory (grad_done returns false).
  bool moves_grads() const { return storage_ != nullptr && !pinned_; }
  bool grad_done(float* grad, int64_t offset, int64_t count);
  void grad_before_step(float* grad, int64_t begin, int64_t count);  // stored chunks in [begin, +count) loaded back
  void grad_after_step(float* grad, int64_t begin, int64_t count);   // stepped (zeroed) pages given back
  // Every gradient zero, stored ones forgotten; a group that moves gradients zeroes by giving pages back, so
  // this also makes a new accumulator (allocated uninitialized) zero without making it resident.
  void grad_zero(float* grad);
  void grad_read(float* grad, int64_t offset, int64_t count, float* out);  // wherever the elements are
  uint64_t grad_host_bytes() const;  // of the accumulator's numel * 4, what host memory holds

  // A stored group only: moves state `s` of the whole group between its storage tier and `memory` (numel floats of
  // the caller's), chunk by chunk straight from or into that memory, up to `areas` chunks in flight and no staging.
  // Note [Storage swap] moves a group between host memory and a storage this way, in one copy.
  void transfer_whole(int s, float* memory, bool to_storage);

 private:
  // The transfers of one visit (Note [Storage pipeline]); its destructor waits for what is still in flight.
  class Pipeline {
   public:
    Pipeline(GroupStates& group, uint32_t load, uint32_t store);
    ~Pipeline();
    Pipeline(const Pipeline&) = delete;
    Pipeline& operator=(const Pipeline&) = delete;
    // Chunk c's states are in its area (piece[s]); loads of the chunks after it, up to `last`, may be started.
    void ready(int64_t c, int64_t last, float** piece);
    // Chunk c stepped: its stores start (and are waited for at once without pipeline_write).
    void stepped(int64_t c);
    // Waits for every store still in flight; throws the first failure.
    void finish();

   private:
    struct Area {
      std::vector<zhost_tier_event*> loads, stores;  // in flight
      int64_t shapes[3] = {0, 0, 0};
      DLTensor views[3] = {};
    };
    void start(int64_t c, uint32_t mask, bool to_storage);
    void wait(std::vector<zhost_tier_event*>& events);
    Area& area_of(int64_t c) { return areas_[static_cast<size_t>(c % group_.storage_->areas)]; }
    float* piece_of(int64_t c, int s) const;

    GroupStates& group_;
    uint32_t load_, store_;
    int64_t next_load_ = -1;  // the first chunk whose loads were not started
    std::vector<Area> areas_;
  };

  // The first failure of several transfers completed one after the other (all of them are, even after one failed).
  struct TransferFailure {
    zhost_status_code code = ZHOST_OK;
    std::string message;
    void keep(zhost_status_code c, std::string m) {
      if (code == ZHOST_OK) code = c, message = std::move(m);
    }
    void rethrow() const {
      if (code != ZHOST_OK) throw sdk::PluginError(code, message);
    }
  };
  // Starts the transfer of chunk `c` of state `s` between `data` (`*shape` elements, described by `view`, which
  // like `shape` must outlive the event) and the storage tier; returns its event, nullptr when done. Throws the
  // tier's failure. One piece of Note [Storage pipeline] and of transfer_whole.
  zhost_tier_event* start_transfer(uint32_t s, int64_t c, float* data, int64_t* shape, DLTensor& view, bool to_storage);
  // Completes `event` (nullptr: done already), keeping a failure in `failure`.
  void complete_transfer(zhost_tier_event* event, TransferFailure& failure);
  uint64_t storage_key(uint32_t state, int64_t chunk) const;
  void drop_stored() noexcept;
  int64_t chunk_length(int64_t c) const { return std::min(storage_->chunk, numel_ - c * storage_->chunk); }
  void grad_drain(float* grad);                // every gradient store completed and its pages given back
  void give_back(float* data, int64_t count);  // the whole pages of [data, data + count): zeros, not resident

  struct GradStore {  // a finished chunk of gradients on its way to the storage tier
    int64_t chunk = 0;
    int64_t shape = 0;
    DLTensor view{};
    zhost_tier_event* event = nullptr;
  };

  sdk::Host host_;
  uint64_t key_;
  uint32_t generation_;
  int64_t numel_;
  int num_states_;
  ElementBytes bytes_;
  StateStorage* storage_;  // null: resident
  HostBuffer resident_[3];
  bool pinned_ = false;
  // Note [Gradients in storage], per chunk: elements finished this step, and whether the chunk's gradients are
  // in the storage tier (their pages given back).
  std::vector<int64_t> grad_finished_;
  std::vector<uint8_t> grad_stored_;
  std::deque<GradStore> grad_stores_;  // in flight, oldest first (a deque: views' shapes stay put)
};

}  // namespace zhost::cpu_tier
