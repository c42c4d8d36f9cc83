// plugins/offload_nvme/offload_nvme.cpp: zhost_offload_nvme.so, the NVMe storage tier ("offload:nvme",
// ZeRO-Infinity's NVMe offload). A storage tier only (docs/abi.md "Tier roles"): under the CPU tier it keeps
// the optimizer's fp32 master weights and states (zero.offload_optimizer.device = "nvme", "Tier
// composition"). Each buffer is an extent of one O_DIRECT file in this instance's folder under nvme_path
// (Note [Job folders]), moved in aio.block_size requests through aligned staging slots, aio.queue_depth in
// flight, with a checksum per block (Note [Block checksums]). store/load return events: one worker thread
// runs the transfers in submission order (op_queue.hpp), so a caller overlaps them with its compute.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "plugins/offload_nvme/block_file.hpp"
#include "plugins/offload_nvme/config_check.hpp"
#include "plugins/offload_nvme/io_engine.hpp"
#include "plugins/offload_nvme/job_dir.hpp"
#include "plugins/offload_nvme/op_queue.hpp"
#include "zhost/cpp/offload.hpp"

namespace zhost::nvme_tier {
namespace {

using sdk::Host;
using sdk::PluginError;

uint64_t dl_bytes(const DLTensor& t) {
  uint64_t n = (t.dtype.bits * t.dtype.lanes + 7) / 8;
  for (int i = 0; i < t.ndim; ++i) n *= static_cast<uint64_t>(t.shape[i]);
  return n;
}

char* host_bytes_of(const DLTensor& t) {
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost)
    throw PluginError(ZHOST_ERR_UNSUPPORTED, "offload_nvme moves host-memory tensors only");
  return static_cast<char*>(t.data) + t.byte_offset;
}

std::string buffer_name(uint64_t key) { return "buffer " + std::to_string(key); }

TransferOptions transfer_options(const Host& host) {
  TransferOptions o;
  const int64_t block = host.config_int("aio.block_size");
  if (block % 4096)
    throw PluginError(ZHOST_ERR_CONFIG, "offload_nvme: aio.block_size = " + std::to_string(block) +
                                            " is not a multiple of 4096 (O_DIRECT); use e.g. 1048576");
  o.block_size = static_cast<uint32_t>(block);
  o.queue_depth = static_cast<uint32_t>(host.config_int("aio.queue_depth"));
  o.overlap_events = host.config_bool("aio.overlap_events");
  o.verify = host.config_bool("offload_nvme.verify_checksums");
  return o;
}

// aio.intra_op_parallelism, or DeepSpeed's older aio.thread_count when only that one is set.
int io_threads(const Host& host) {
  const int64_t threads = host.config_int("aio.intra_op_parallelism"), legacy = host.config_int("aio.thread_count");
  if (legacy == 0) return static_cast<int>(threads);
  host.warn("offload_nvme: aio.thread_count is DeepSpeed's old name of aio.intra_op_parallelism; using " +
            std::to_string(legacy) + " (write aio.intra_op_parallelism instead)");
  if (threads != 1 && threads != legacy)
    throw PluginError(ZHOST_ERR_CONFIG, "offload_nvme: aio.thread_count = " + std::to_string(legacy) +
                                            " and aio.intra_op_parallelism = " + std::to_string(threads) +
                                            " disagree; remove aio.thread_count");
  return static_cast<int>(legacy);
}

// Note [Engine choice]: offload_nvme.io_engine = "auto" sets up io_uring and, when the kernel refuses it
// (no io_uring, kernel.io_uring_disabled = 2, a seccomp profile), says so in one log line and uses the
// thread engine; "io_uring" makes that refusal an error, "threads" skips io_uring.
std::unique_ptr<IoEngine> choose_engine(const Host& host, const EngineOptions& options) {
  const std::string choice = host.config_string("offload_nvme.io_engine");
  if (choice == "threads") return make_thread_engine(options);
  try {
    return make_uring_engine(options);
  } catch (const PluginError& e) {
    if (choice == "io_uring")
      throw PluginError(ZHOST_ERR_UNSUPPORTED,
                        std::string("offload_nvme: offload_nvme.io_engine = \"io_uring\", but ") + e.what() +
                            "; set offload_nvme.io_engine = \"auto\"");
    host.info(std::string("offload_nvme: io_uring is not available here (") + e.what() + "); using " +
              std::to_string(options.threads) + " pread/pwrite thread(s)");
    return make_thread_engine(options);
  }
}

// The folder of the role this instance serves: with both roles on NVMe the host makes one instance per role
// and tells each its role (Note [One instance per storing role], host/plugins/resolver.hpp); an instance
// given no role serves the one role whose nvme_path is set.
std::string nvme_path(const Host& host) {
  if (host.tier_role() == ZHOST_TIER_FOR_PARAMS) return host.config_string("zero.offload_param.nvme_path");
  const std::string optimizer = host.config_string("zero.offload_optimizer.nvme_path");
  if (host.tier_role() == ZHOST_TIER_FOR_OPTIMIZER_STORAGE || !optimizer.empty()) return optimizer;
  return host.config_string("zero.offload_param.nvme_path");
}

class NvmeTier : public sdk::TierDefaults {
 public:
  static constexpr uint64_t kTierFlags =
      ZHOST_PLUGIN_FLAG_TIER_STORES | ZHOST_PLUGIN_FLAG_TIER_DEVICE_STORES | ZHOST_PLUGIN_FLAG_TIER_OUTSIDE_HOST_MEMORY;

  explicit NvmeTier(const Host& host)
      : host_(host),
        options_(transfer_options(host)),
        dir_(nvme_path(host), [&](const std::string& line) { host.warn(line); }) {
    slot_bytes_ = static_cast<uint64_t>(options_.block_size) * options_.queue_depth;
    slots_ = static_cast<char*>(std::aligned_alloc(4096, slot_bytes_));
    if (!slots_) throw PluginError(ZHOST_ERR_OUT_OF_MEMORY, "offload_nvme: no memory for the staging slots");
    // The role's pin_memory: page-locked staging (best effort: RLIMIT_MEMLOCK may refuse it).
    const char* pin_key = host.tier_role() == ZHOST_TIER_FOR_PARAMS ? "zero.offload_param.pin_memory"
                                                                    : "zero.offload_optimizer.pin_memory";
    if (host.config_bool(pin_key)) {
      pinned_ = ::mlock(slots_, slot_bytes_) == 0;
      if (!pinned_)
        host.warn(std::string("offload_nvme: ") + pin_key +
                  " = true, but the staging slots could not be page-locked (RLIMIT_MEMLOCK); continuing unpinned");
    }
    EngineOptions eo;
    eo.slots = slots_;
    eo.slot_count = options_.queue_depth;
    eo.slot_bytes = options_.block_size;
    eo.single_submit = host.config_bool("aio.single_submit");
    eo.threads = io_threads(host);
    engine_ = choose_engine(host, eo);
    file_ = std::make_unique<BlockFile>(dir_, *engine_, slots_, options_);
    queue_ = std::make_unique<OpQueue>();
    host_.info("offload_nvme: " + std::string(engine_->name()) + " engine on " + file_->path() + ", blocks of " +
               std::to_string(options_.block_size) + " bytes, queue depth " + std::to_string(options_.queue_depth) +
               (options_.verify ? ", checksums on" : ", checksums off") +
               (pinned_ ? ", staging page-locked" : ", staging pageable"));
  }

  ~NvmeTier() {
    queue_.reset();  // runs what is queued first
    file_.reset();
    const uint64_t requests = engine_->requests_done();
    const std::string engine = engine_->name();
    engine_.reset();
    std::free(slots_);
    host_.info("offload_nvme: " + std::to_string(requests) + " requests completed through " + engine + ", " +
               std::to_string(written_) + " bytes written, " + std::to_string(read_) + " read; removed " + dir_.path());
  }

  // store/load/drop check what they can at once (against the buffers as submitted so far) and queue the
  // transfer; the worker runs it (op_queue.hpp).
  zhost_tier_event* store(uint64_t key, const DLTensor& data) {
    const char* src = host_bytes_of(data);
    const uint64_t bytes = dl_bytes(data);
    {
      const std::lock_guard<std::mutex> lock(submitted_mutex_);
      submitted_[key] = bytes;
    }
    return queue_->submit([this, key, src, bytes] { store_now(key, src, bytes); });
  }

  zhost_tier_event* load(uint64_t key, DLTensor& data) {
    char* dst = host_bytes_of(data);
    const uint64_t bytes = dl_bytes(data);
    {
      const std::lock_guard<std::mutex> lock(submitted_mutex_);
      auto it = submitted_.find(key);
      if (it == submitted_.end())
        throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_nvme has no buffer " + std::to_string(key));
      if (bytes != it->second)
        throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_nvme: load of " + std::to_string(bytes) +
                                                          " bytes from buffer " + std::to_string(key) + " of " +
                                                          std::to_string(it->second));
    }
    return queue_->submit([this, key, dst, bytes] { load_now(key, dst, bytes); });
  }

  void drop(uint64_t key) {
    {
      const std::lock_guard<std::mutex> lock(submitted_mutex_);
      if (!submitted_.erase(key)) return;
    }
    queue_->submit([this, key] { drop_now(key); }, /*with_event=*/false);
  }

  void wait_event(zhost_tier_event* event) { queue_->wait(event); }
  bool test_event(zhost_tier_event* event) { return queue_->test(event); }
  // Host memory only: compute that follows runs on this host after the transfer; the event stays pending.
  void order_compute_after(zhost_tier_event* event) { queue_->block_until_done(event); }

  void memory(zhost_tier_memory& out) const {
    out.host_bytes = slot_bytes_;
    uint64_t stored = 0;
    const std::lock_guard<std::mutex> lock(submitted_mutex_);
    for (const auto& [key, bytes] : submitted_) stored += (bytes + 4095) / 4096 * 4096;
    out.storage_bytes = stored;
  }

  // State stream: repeated [u64 key][u64 bytes][bytes], read back from disk (verified) buffer by buffer.
  void export_state(zhost_state_writer write, void* user) {
    queue_->drain();  // the worker is idle from here on: this thread may use the file
    std::vector<char> bytes;
    for (const auto& [key, stored] : buffers_) {
      bytes.resize(stored.bytes);
      file_->read(stored, bytes.data(), buffer_name(key));
      uint64_t header[2] = {key, stored.bytes};
      if (write(user, header, sizeof(header)) || write(user, bytes.data(), bytes.size()))
        throw PluginError(ZHOST_ERR_IO, "offload_nvme: export stopped by the writer");
    }
  }

  void import_state(zhost_state_reader read, void* user) {
    queue_->drain();
    uint64_t header[2];
    std::vector<char> bytes;
    while (read_exact(read, user, header, sizeof(header), true)) {
      bytes.resize(header[1]);
      read_exact(read, user, bytes.data(), header[1], false);
      store_now(header[0], bytes.data(), header[1]);
      const std::lock_guard<std::mutex> lock(submitted_mutex_);
      submitted_[header[0]] = header[1];
    }
  }

 private:
  // The worker's side (and export/import's, with the worker idle).
  void store_now(uint64_t key, const char* src, uint64_t bytes) {
    Stored stored = file_->write(src, bytes, buffer_name(key));
    auto it = buffers_.find(key);
    if (it != buffers_.end()) {  // the new copy is complete: only now does the old one go
      file_->release(it->second);
      it->second = std::move(stored);
    } else {
      buffers_.emplace(key, std::move(stored));
    }
    written_ += bytes;
  }

  void load_now(uint64_t key, char* dst, uint64_t bytes) {
    auto it = buffers_.find(key);
    if (it == buffers_.end() || it->second.bytes != bytes)  // its store failed
      throw PluginError(ZHOST_ERR_IO, "offload_nvme: buffer " + std::to_string(key) +
                                          " was not stored (its store failed); nothing to load");
    file_->read(it->second, dst, buffer_name(key));
    read_ += bytes;
  }

  void drop_now(uint64_t key) {
    auto it = buffers_.find(key);
    if (it == buffers_.end()) return;
    file_->release(it->second);
    buffers_.erase(it);
  }

  static bool read_exact(zhost_state_reader read, void* user, void* out, uint64_t len, bool end_ok) {
    uint64_t done = 0;
    while (done < len) {
      int64_t n = read(user, static_cast<char*>(out) + done, len - done);
      if (n < 0) throw PluginError(ZHOST_ERR_IO, "offload_nvme: import stream failed");
      if (n == 0) {
        if (done == 0 && end_ok) return false;
        throw PluginError(ZHOST_ERR_IO, "offload_nvme: import stream ended inside a record");
      }
      done += static_cast<uint64_t>(n);
    }
    return true;
  }

  Host host_;
  TransferOptions options_;
  JobDir dir_;
  uint64_t slot_bytes_ = 0;
  char* slots_ = nullptr;
  bool pinned_ = false;  // the slots are page-locked (the role's pin_memory)
  std::unique_ptr<IoEngine> engine_;
  std::unique_ptr<BlockFile> file_;
  std::unique_ptr<OpQueue> queue_;
  // Caller's side: key -> bytes, as of the operations submitted. Under a mutex: the host reads memory() every
  // step while the CPU tier may store from its delayed-update thread (Note [Delayed parameter update]).
  mutable std::mutex submitted_mutex_;
  std::map<uint64_t, uint64_t> submitted_;
  std::map<uint64_t, Stored> buffers_;  // worker's side: what is on disk
  uint64_t written_ = 0, read_ = 0;     // worker's side
};

// Note [NVMe config check]: its folders and their room, checked before any rank starts.
const zhost_plugin_api kApi = sdk::tier_api<NvmeTier>(sdk::check_config_entry<check_config>);

const zhost_plugin_descriptor* describe() {
  static sdk::DescriptorBuilder builder("offload_nvme", "0.1.0", ZHOST_KIND_OFFLOAD);
  builder
      .summary(
          "NVMe storage tier: O_DIRECT files under nvme_path, io_uring (or pread/pwrite threads), xxHash per block")
      .provides({"offload:nvme"})
      .flags(ZHOST_PLUGIN_FLAG_HOT_SWAPPABLE | NvmeTier::kTierFlags)
      // Its folders, checked at config check (Note [NVMe config check]).
      .config_string("zero.offload_optimizer.nvme_path", "", "folder on the NVMe disk for the optimizer's states")
      .config_string("zero.offload_param.nvme_path", "", "folder on the NVMe disk for stage 3's parameter shards")
      .reads_keys({"zero.offload_optimizer.pin_memory"})  // offload_cpu's
      .config_bool("zero.offload_param.pin_memory", false,
                   "the parameter shards' instance: page-locked staging slots (DeepSpeed's offload_param.pin_memory)")
      // DeepSpeed's aio table, with DeepSpeed's defaults.
      .config_int("aio.block_size", 1048576, "bytes per I/O request (a multiple of 4096)", 4096, 1 << 30)
      .config_int("aio.queue_depth", 8, "I/O requests in flight (staging slots of block_size each)", 1, 1024)
      .config_int("aio.intra_op_parallelism", 1, "threads of the pread/pwrite engine", 1, 256)
      .config_int("aio.thread_count", 0, "DeepSpeed's old name of aio.intra_op_parallelism; 0 = unset", 0, 256)
      .config_bool("aio.single_submit", false, "hand each request to the kernel on its own instead of in batches")
      .config_bool("aio.overlap_events", true,
                   "refill a request slot as soon as it completes (false: each wave of queue_depth completes first)")
      .config_string("offload_nvme.io_engine", "auto",
                     "auto = io_uring when the kernel allows it, else pread/pwrite threads",
                     {"auto", "io_uring", "threads"})
      .config_bool("offload_nvme.verify_checksums", true, "xxHash each block on write and verify it on read");
  return builder.build();
}

}  // namespace
}  // namespace zhost::nvme_tier

ZHOST_PLUGIN_ENTRY(zhost::nvme_tier::describe(), &zhost::nvme_tier::kApi)
