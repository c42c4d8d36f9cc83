// examples/plugins/hello_tier/hello_tier.cpp: a third-party offload tier, written the way an outside
// plugin author would: only the installed SDK, the C++ helpers (zhost/cpp/offload.hpp builds its table),
// and the host's services.
//
// A storage tier (ZHOST_PLUGIN_FLAG_TIER_STORES, docs/abi.md "Tier roles"): it keeps buffers in host memory
// obtained from the host (so the host accounts for them), keyed by the caller's 64-bit buffer key, and
// runs no optimizer. A job uses it as the storage under the CPU tier's optimizer:
//     [zero] offload_optimizer.device = "cpu"   offload_optimizer.storage = "hello"
// Transfers complete synchronously (events are NULL). It exports and imports its whole state as a byte
// stream, which makes it hot-swappable. It holds its callers to docs/abi.md §3's one call at a time (see
// CallGuard): a host or computing tier that breaks the rule gets an error rather than a race.
#include <atomic>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "zhost/cpp/offload.hpp"

namespace {

using zhost::sdk::Host;
using zhost::sdk::PluginError;

size_t dl_bytes(const DLTensor& t) {
  size_t n = (t.dtype.bits * t.dtype.lanes + 7) / 8;
  for (int i = 0; i < t.ndim; ++i) n *= static_cast<size_t>(t.shape[i]);
  return n;
}

// One call at a time (docs/abi.md §3): the table's entry points hold a guard; a call that arrives while
// another runs is refused with ZHOST_ERR_INTERNAL, the caller's bug.
class CallGuard {
 public:
  explicit CallGuard(std::atomic<bool>& busy) : busy_(busy) {
    if (busy_.exchange(true))
      throw PluginError(ZHOST_ERR_INTERNAL,
                        "hello_tier was called while another of its calls ran; docs/abi.md section 3 allows one at a "
                        "time (a bug in the caller)");
  }
  ~CallGuard() { busy_.store(false); }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;

 private:
  std::atomic<bool>& busy_;
};

class HelloTier : public zhost::sdk::TierDefaults {
 public:
  static constexpr uint64_t kTierFlags = ZHOST_PLUGIN_FLAG_TIER_STORES;

  explicit HelloTier(const Host& host) : host_(host), capacity_(host.config_int("hello_tier.capacity_mb") << 20) {
    host_.info("hello_tier ready, capacity " + std::to_string(capacity_ >> 20) + " MiB");
  }
  ~HelloTier() {
    for (auto& [key, slot] : slots_) zhost::sdk::Status(host_.services(), host_.buffer_release(slot.handle));
  }

  zhost_tier_event* store(uint64_t key, const DLTensor& data) {
    const CallGuard guard(busy_);
    if (data.device.device_type != kDLCPU)
      throw PluginError(ZHOST_ERR_UNSUPPORTED, "hello_tier stores host tensors only");
    size_t bytes = dl_bytes(data);
    Slot& slot = slot_for(key, bytes);
    std::memcpy(slot.data, static_cast<const char*>(data.data) + data.byte_offset, bytes);
    return nullptr;
  }

  zhost_tier_event* load(uint64_t key, DLTensor& data) const {
    const CallGuard guard(busy_);
    if (data.device.device_type != kDLCPU)
      throw PluginError(ZHOST_ERR_UNSUPPORTED, "hello_tier loads into host tensors only");
    auto it = slots_.find(key);
    if (it == slots_.end())
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "hello_tier has no buffer " + std::to_string(key));
    if (dl_bytes(data) != it->second.bytes)
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "hello_tier: load of " + std::to_string(dl_bytes(data)) +
                                                        " bytes from buffer " + std::to_string(key) + " of " +
                                                        std::to_string(it->second.bytes));
    std::memcpy(static_cast<char*>(data.data) + data.byte_offset, it->second.data, it->second.bytes);
    return nullptr;
  }

  void memory(zhost_tier_memory& out) const {
    const CallGuard guard(busy_);
    out.host_bytes = 0;
    out.storage_bytes = used_;
  }

  void drop(uint64_t key) {
    const CallGuard guard(busy_);
    drop_slot(key);
  }

  // State stream: repeated [u64 key][u64 bytes][bytes].
  void export_state(zhost_state_writer write, void* user) const {
    const CallGuard guard(busy_);
    for (const auto& [key, slot] : slots_) {
      uint64_t header[2] = {key, slot.bytes};
      if (write(user, header, sizeof(header)) || write(user, slot.data, slot.bytes))
        throw PluginError(ZHOST_ERR_IO, "hello_tier: export stopped by the writer");
    }
  }

  void import_state(zhost_state_reader read, void* user) {
    const CallGuard guard(busy_);
    uint64_t header[2];
    while (read_exact(read, user, header, sizeof(header), true)) {
      Slot& slot = slot_for(header[0], header[1]);
      read_exact(read, user, slot.data, header[1], false);
    }
  }

 private:
  struct Slot {
    zhost_buffer_handle handle;
    void* data;
    size_t bytes;
  };

  void drop_slot(uint64_t key) {
    auto it = slots_.find(key);
    if (it == slots_.end()) return;
    host_.check(host_.buffer_release(it->second.handle));
    used_ -= it->second.bytes;
    slots_.erase(it);
  }

  Slot& slot_for(uint64_t key, size_t bytes) {
    auto it = slots_.find(key);
    if (it != slots_.end() && it->second.bytes == bytes) return it->second;
    drop_slot(key);
    if (used_ + bytes > capacity_)
      throw PluginError(ZHOST_ERR_OUT_OF_MEMORY, "hello_tier is full: raise hello_tier.capacity_mb");
    zhost_buffer_alloc_args args{};
    args.struct_size = sizeof(args);
    args.memory = ZHOST_MEMORY_HOST;
    args.size_bytes = bytes;
    args.label = "hello_tier";
    host_.check(host_.services()->buffer_alloc(host_.context(), &args));
    used_ += bytes;
    return slots_[key] = Slot{args.handle, args.data, bytes};
  }

  // Reads exactly `len` bytes; returns false at a clean end of stream when `end_ok`.
  static bool read_exact(zhost_state_reader read, void* user, void* out, size_t len, bool end_ok) {
    size_t done = 0;
    while (done < len) {
      int64_t n = read(user, static_cast<char*>(out) + done, len - done);
      if (n < 0) throw PluginError(ZHOST_ERR_IO, "hello_tier: import stream failed");
      if (n == 0) {
        if (done == 0 && end_ok) return false;
        throw PluginError(ZHOST_ERR_IO, "hello_tier: import stream ended inside a record");
      }
      done += static_cast<size_t>(n);
    }
    return true;
  }

  Host host_;
  size_t capacity_;
  size_t used_ = 0;
  std::map<uint64_t, Slot> slots_;
  mutable std::atomic<bool> busy_{false};  // CallGuard
};

// Its config check (docs/abi.md "Config checks"): `zhost config check` and `zhost run` ask it before
// any rank starts. When the host says what a role it serves will keep (known with the world size, e.g. `config
// check --nproc N`), each rank's share must fit hello_tier.capacity_mb, or the job would stop at its first
// store with "hello_tier is full".
void check_config(const zhost::sdk::ConfigCheck& check) {
  const zhost_config_check_args& args = check.args();
  if (args.local_ranks <= 0) return;
  const uint64_t capacity = static_cast<uint64_t>(check.host().config_int("hello_tier.capacity_mb")) << 20;
  for (const auto& [role, bytes] :
       {std::pair<zhost_tier_role, uint64_t>{ZHOST_TIER_FOR_OPTIMIZER_STORAGE, args.optimizer_storage_bytes},
        {ZHOST_TIER_FOR_PARAMS, args.params_storage_bytes}}) {
    const uint64_t per_rank = (bytes + static_cast<uint64_t>(args.local_ranks) - 1) / args.local_ranks;
    if (!check.serves(role) || per_rank <= capacity) continue;
    const uint64_t needed_mb = (per_rank + (1u << 20) - 1) >> 20;
    check.refuse("hello_tier.capacity_mb", "hello_tier.capacity_mb = " + std::to_string(capacity >> 20) +
                                               " holds less than the " + std::to_string(needed_mb) +
                                               " MiB each rank would keep in hello_tier (" + check.chosen_for() +
                                               "); set it to at least " + std::to_string(needed_mb));
  }
}

const zhost_plugin_api kApi = zhost::sdk::tier_api<HelloTier>(zhost::sdk::check_config_entry<check_config>);

const zhost_plugin_descriptor* describe() {
  static zhost::sdk::DescriptorBuilder builder("hello_tier", "0.1.0", ZHOST_KIND_OFFLOAD);
  builder.summary("example third-party storage tier: buffers in host memory, synchronous, hot-swappable")
      .provides({"offload:hello"})
      .flags(ZHOST_PLUGIN_FLAG_HOT_SWAPPABLE | HelloTier::kTierFlags)
      .config_int("hello_tier.capacity_mb", 1024, "most MiB this tier holds", 1, 1 << 20);
  return builder.build();
}

}  // namespace

ZHOST_PLUGIN_ENTRY(describe(), &kApi)
