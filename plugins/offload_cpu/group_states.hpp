// plugins/offload_cpu/group_states.hpp: where one optimizer group of the CPU tier keeps its fp32 master
// weights and optimizer states between steps: resident in host memory, or in a storage tier under the CPU
// tier (docs/abi.md "Tier composition"), loaded piece by piece into a bounded host staging area for each
// step and stored back. Visiting a range of the group hands the caller plain float pointers either way, so
// the optimizer kernel runs on the same values in the same order: composed training equals plain training
// bit for bit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

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

// The storage tier under the CPU tier and the one staging area all its groups share: `chunk` elements of
// each state (offload_cpu.storage_chunk_elements), so host memory holds one piece of a group at a time.
struct StateStorage {
  sdk::TierClient tier;  // inactive: groups stay resident in host memory
  int64_t chunk = 0;
  HostBuffer staging;  // 3 * chunk floats, allocated on first use
};

class GroupStates {
 public:
  enum State : uint32_t { kMaster = 0, kExpAvg = 1, kExpAvgSq = 2 };
  static constexpr uint32_t kAll = (1u << kMaster) | (1u << kExpAvg) | (1u << kExpAvgSq);

  // `num_states`: 3 (master, exp_avg, exp_avg_sq) or 2 (Lion: no exp_avg_sq). With an active `storage`
  // the states live there under buffer keys derived from `group_key` and `generation` (0..3: groups being
  // imported use the next one, so they never overwrite the groups they replace until the import
  // succeeded); the storage outlives the group.
  GroupStates(const sdk::Host& host, uint64_t group_key, uint32_t generation, int64_t numel, int num_states,
              bool pinned, StateStorage* storage);
  ~GroupStates();  // drops the group's buffers from the storage tier
  GroupStates(GroupStates&& other) noexcept;
  GroupStates(const GroupStates&) = delete;
  GroupStates& operator=(const GroupStates&) = delete;
  GroupStates& operator=(GroupStates&&) = delete;

  int64_t numel() const { return numel_; }
  int num_states() const { return num_states_; }
  bool stored() const { return storage_ != nullptr; }
  uint64_t host_bytes() const;
  uint64_t storage_bytes() const;

  // Calls fn(float* const* states, int64_t begin, int64_t count) over [begin, end) in pieces, states[s]
  // pointing at element `begin` of state s. States in `load` are read from the storage tier first, states in
  // `store` written back after (a stored group keeps no copy); a resident group ignores both masks.
  template <typename Fn>
  void visit(int64_t begin, int64_t end, uint32_t load, uint32_t store, Fn&& fn) {
    if (!storage_) {
      float* states[3] = {resident_[0].floats() + begin, resident_[1].floats() + begin,
                          num_states_ > 2 ? resident_[2].floats() + begin : nullptr};
      fn(states, begin, end - begin);
      return;
    }
    const int64_t chunk = storage_->chunk;
    for (int64_t c = begin / chunk; c * chunk < end; ++c) {
      const int64_t chunk_begin = c * chunk, chunk_end = std::min(chunk_begin + chunk, numel_);
      float* piece[3];
      move_chunk(c, chunk_end - chunk_begin, load, piece, /*to_storage=*/false);
      const int64_t lo = std::max(begin, chunk_begin), hi = std::min(end, chunk_end);
      float* states[3] = {piece[0] + (lo - chunk_begin), piece[1] + (lo - chunk_begin),
                          num_states_ > 2 ? piece[2] + (lo - chunk_begin) : nullptr};
      fn(states, lo, hi - lo);
      move_chunk(c, chunk_end - chunk_begin, store, piece, /*to_storage=*/true);
    }
  }

 private:
  uint64_t storage_key(uint32_t state, int64_t chunk) const;
  // Points piece[s] at the staging area of each state, and loads (or stores) the states in `mask`.
  void move_chunk(int64_t chunk, int64_t count, uint32_t mask, float** piece, bool to_storage);
  void drop_stored() noexcept;

  sdk::Host host_;
  uint64_t key_;
  uint32_t generation_;
  int64_t numel_;
  int num_states_;
  StateStorage* storage_;  // null: resident
  HostBuffer resident_[3];
};

}  // namespace zhost::cpu_tier
