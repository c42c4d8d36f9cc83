// plugins/offload_cpu/offload_cpu.cpp: the host-memory offload tier ("offload:cpu"), ZeRO-Offload's CPU
// side. It keeps, per optimizer group handed to it by a partition plugin, the fp32 master weights, the
// optimizer states and an fp32 gradient accumulator in host memory (pinned with
// zero.offload_optimizer.pin_memory), and steps them with the fused SIMD optimizer of cpu_optimizer.hpp:
// one pass that also writes the updated weights in the compute dtype for the all-gather. It also stores
// plain buffers by key (the tier interface the NVMe tier builds on), and exports/imports its whole state
// as a byte stream, which makes it hot-swappable.
//
// Memory is host memory from the host's buffer service (accounted for by the host). Buffers move to and
// from device memory (CUDA) through the host's copy services: store and load then hand back the copy as
// their event, so a caller can overlap it. The optimizer reads and writes host memory only: partition
// plugins stage gradients and updated weights through pinned host memory (plugins/zero_common).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <thread>
#include <string>
#include <vector>

#include "plugins/offload_cpu/cpu_optimizer.hpp"
#include "zhost/cpp/plugin.hpp"
#include "zhost/offload.h"

// A store or load still moving data: the host's copy behind it.
struct zhost_tier_event {
  zhost_copy* copy;
};

namespace {

using zhost::sdk::Host;
using zhost::sdk::PluginError;
namespace cpu_optim = zhost::cpu_optim;

// A host buffer from the host's buffer service, released with this object.
class HostBuffer {
 public:
  enum class Fill { kZeros, kUninitialized };  // kUninitialized: the caller overwrites every byte at once
  HostBuffer(const Host& host, uint64_t bytes, bool pinned, const std::string& label, Fill fill = Fill::kZeros)
      : host_(&host) {
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
  ~HostBuffer() {
    if (handle_) host_->services()->buffer_release(host_->context(), handle_);
  }
  HostBuffer(HostBuffer&& other) noexcept
      : host_(other.host_), handle_(std::exchange(other.handle_, 0)), data_(other.data_), bytes_(other.bytes_) {}
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  HostBuffer& operator=(HostBuffer&&) = delete;

  float* floats() const { return static_cast<float*>(data_); }
  void* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }

 private:
  const Host* host_;
  zhost_buffer_handle handle_ = 0;
  void* data_ = nullptr;
  uint64_t bytes_ = 0;
};

int64_t numel(const DLTensor& t) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}

bool is_contiguous(const DLTensor& t) {
  if (!t.strides) return true;
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

bool in_host_memory(const DLTensor& t) { return t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost; }

// The bytes of a host tensor; device memory and strided views are refused with what to do.
char* host_data(const DLTensor& t, const char* what) {
  if (!in_host_memory(t))
    throw PluginError(ZHOST_ERR_UNSUPPORTED, std::string("offload_cpu: ") + what +
                                                 " is device memory; the optimizer reads and writes host memory "
                                                 "(stage through pinned host memory, as plugins/zero_common does)");
  if (!is_contiguous(t)) throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, std::string("offload_cpu: ") + what + " is not contiguous");
  return static_cast<char*>(t.data) + t.byte_offset;
}

bool is_float(const DLTensor& t, int bits) { return t.dtype.code == kDLFloat && t.dtype.bits == bits && t.dtype.lanes == 1; }
bool is_bf16(const DLTensor& t) { return t.dtype.code == kDLBfloat && t.dtype.bits == 16 && t.dtype.lanes == 1; }

size_t element_bytes(const DLTensor& t) { return (t.dtype.bits * t.dtype.lanes + 7) / 8; }

// The optimizer's threads: offload_cpu.threads, or else this machine's hardware threads shared among the
// ranks on it (LOCAL_WORLD_SIZE, set by zhost's launcher and torchrun), so that ranks do not oversubscribe.
int optimizer_threads(int64_t configured) {
  if (configured > 0) return static_cast<int>(configured);
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const int ranks = local ? std::max(1, std::atoi(local)) : 1;
  return std::max(1, hardware / ranks);
}

// The kernel's instruction set, chosen once (ZHOST_CPU_ISA may force one); a bad choice is a config error.
cpu_optim::Isa optimizer_isa() {
  try {
    return cpu_optim::selected_isa();
  } catch (const std::runtime_error& e) {
    throw PluginError(ZHOST_ERR_CONFIG, e.what());
  }
}

class CpuTier {
 public:
  explicit CpuTier(const Host& host) : host_(host), pinned_(host.config_bool("zero.offload_optimizer.pin_memory")) {
    kernel_.isa = optimizer_isa();
    kernel_.threads = optimizer_threads(host.config_int("offload_cpu.threads"));
    host_.info(std::string("host-memory tier ready; optimizer kernel ") + cpu_optim::isa_name(*kernel_.isa) + ", " +
               std::to_string(kernel_.threads) + " thread(s)" + (pinned_ ? ", pinned buffers" : ""));
  }

  // ---- storage ----
  // Host tensors are copied at once while training in host memory; device tensors (and, under the deferred
  // test copies, host ones too) go through the host's copy services, and the copy is the event.
  zhost_tier_event* store(const zhost_tier_io_args& args) {
    const size_t bytes = static_cast<size_t>(numel(*args.data)) * element_bytes(*args.data);
    auto it = buffers_.find(args.key);
    if (it == buffers_.end() || it->second.bytes() != bytes) {
      buffers_.erase(args.key);
      it = buffers_.emplace(args.key, HostBuffer(host_, bytes, pinned_, "offload_cpu buffer",
                                                 HostBuffer::Fill::kUninitialized)).first;
    }
    if (!by_copy(*args.data)) {
      std::memcpy(it->second.data(), host_data(*args.data, "the stored tensor"), bytes);
      return nullptr;
    }
    DLTensor buffer = host_view(*args.data, it->second.data());
    return start_copy(*args.data, buffer);
  }

  zhost_tier_event* load(const zhost_tier_io_args& args) const {
    auto it = buffers_.find(args.key);
    if (it == buffers_.end())
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: no buffer stored under key " + std::to_string(args.key));
    const size_t bytes = static_cast<size_t>(numel(*args.data)) * element_bytes(*args.data);
    if (bytes != it->second.bytes())
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: load of key " + std::to_string(args.key) + " into " +
                                                        std::to_string(bytes) + " bytes, but " +
                                                        std::to_string(it->second.bytes()) + " are stored");
    if (!by_copy(*args.data)) {
      std::memcpy(host_data(*args.data, "the load destination"), it->second.data(), bytes);
      return nullptr;
    }
    DLTensor buffer = host_view(*args.data, it->second.data());
    return start_copy(buffer, *args.data);
  }

  void order_compute_after(zhost_tier_event* event) const {
    if (event && event->copy) host_.check(host_.copies()->order_compute_after(host_.context(), event->copy));
  }

  void wait(zhost_tier_event* event) const {
    std::unique_ptr<zhost_tier_event> owned(event);
    if (owned && owned->copy) host_.check(host_.copies()->wait(host_.context(), owned->copy));
  }

  void drop(uint64_t key) {
    buffers_.erase(key);
    groups_.erase(key);
  }

  // ---- copies to and from the training device ----
  bool by_copy(const DLTensor& t) const {
    const zhost_copy_services* copies = host_.copies();
    if (!in_host_memory(t) && !copies)
      throw PluginError(ZHOST_ERR_UNSUPPORTED, "offload_cpu: a device tensor, but the host has no copy services "
                                               "(zhost ABI 0.3); update zhost");
    if (!is_contiguous(t)) throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: the tensor is not contiguous");
    return !in_host_memory(t) || (copies && copies->device_memory_is_separate(host_.context()) != 0);
  }

  // `t`'s shape and dtype over host bytes.
  static DLTensor host_view(const DLTensor& t, void* data) {
    DLTensor view = t;
    view.data = data;
    view.byte_offset = 0;
    view.device = DLDevice{kDLCPU, 0};
    view.strides = nullptr;
    return view;
  }

  zhost_tier_event* start_copy(const DLTensor& src, DLTensor& dst) const {
    zhost_copy* copy = nullptr;
    host_.check(host_.copies()->start(host_.context(), &src, &dst, &copy));
    return copy ? new zhost_tier_event{copy} : nullptr;
  }

  // ---- the optimizer ----
  void optimizer_setup(const zhost_tier_optimizer_setup& setup) {
    const zhost_optimizer_desc& opt = *setup.optimizer;
    if (opt.kind != ZHOST_OPTIMIZER_ADAMW && opt.kind != ZHOST_OPTIMIZER_ADAM && opt.kind != ZHOST_OPTIMIZER_LION)
      throw PluginError(ZHOST_ERR_CONFIG, "offload_cpu runs AdamW, Adam and Lion; use one of them with "
                                               "zero.offload_optimizer, or train SGD without offload");
    if (!is_float(*setup.initial_master, 32))
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: the initial master weights must be fp32");
    const int64_t n = numel(*setup.initial_master);
    groups_.erase(setup.key);
    Group& g = groups_.emplace(setup.key, Group(host_, opt, n, pinned_)).first->second;
    std::memcpy(g.master.data(), host_data(*setup.initial_master, "the initial master"), static_cast<size_t>(n) * 4);
  }

  void optimizer_grad(uint64_t key, DLTensor& out) {
    Group& g = group(key);
    out = DLTensor{};
    out.data = g.grad.data();
    out.device = DLDevice{kDLCPU, 0};
    out.ndim = 1;
    out.dtype = DLDataType{kDLFloat, 32, 1};
    out.shape = &g.numel;
  }

  // One optimizer step of elements [offset, offset + count) of the group (the whole group by default).
  void optimizer_step(const zhost_tier_step_args& args, int64_t offset = 0, bool range = false) {
    Group& g = group(args.key);
    int64_t count = g.numel;
    if (range) {
      if (!args.params_out)
        throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: a range step needs params_out (the range's length)");
      count = numel(*args.params_out);
      if (offset < 0 || count < 0 || offset + count > g.numel)
        throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: range [" + std::to_string(offset) + ", " +
                                                          std::to_string(offset + count) + ") is outside group " +
                                                          std::to_string(args.key) + " of " +
                                                          std::to_string(g.numel) + " elements");
    }
    float* master = g.master.floats() + offset;
    float* grad = g.grad.floats() + offset;
    float* exp_avg = g.exp_avg.floats() + offset;
    cpu_optim::Copy16 copy = cpu_optim::Copy16::kNone;
    void* out = nullptr;
    if (args.params_out) {
      const DLTensor& t = *args.params_out;
      if (numel(t) != count)
        throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: params_out has " + std::to_string(numel(t)) +
                                                          " elements, the group " + std::to_string(count));
      out = host_data(t, "params_out");
      if (is_bf16(t)) copy = cpu_optim::Copy16::kBf16;
      else if (is_float(t, 16)) copy = cpu_optim::Copy16::kF16;
      else if (!is_float(t, 32)) throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: params_out must be fp32, bf16 or fp16");
    }
    const zhost_optimizer_desc& o = g.optimizer;
    if (o.kind == ZHOST_OPTIMIZER_LION) {
      cpu_optim::LionHyper h{args.lr, o.beta1, o.beta2, o.weight_decay, args.grad_scale};
      cpu_optim::lion_step(h, master, grad, cpu_optim::GradType::kF32, exp_avg, out, copy, count, kernel_);
    } else {
      cpu_optim::AdamHyper h{args.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.kind == ZHOST_OPTIMIZER_ADAMW,
                             o.bias_correction != 0, args.step, args.grad_scale};
      cpu_optim::adam_step(h, master, grad, cpu_optim::GradType::kF32, exp_avg, g.exp_avg_sq.floats() + offset, out,
                           copy, count, kernel_);
    }
    if (out && copy == cpu_optim::Copy16::kNone) std::memcpy(out, master, static_cast<size_t>(count) * 4);
    std::memset(grad, 0, static_cast<size_t>(count) * 4);
  }

  void memory(zhost_tier_memory& out) const {
    uint64_t bytes = 0;
    for (const auto& [key, buffer] : buffers_) bytes += buffer.bytes();
    for (const auto& [key, g] : groups_) bytes += g.bytes();
    out.host_bytes = bytes;
    out.storage_bytes = 0;
  }

  // ---- hot swap: the whole state as a byte stream ----
  // "ZHCPU001", u64 groups, per group: u64 key, zhost_optimizer_desc fields, i64 n, master, exp_avg,
  // exp_avg_sq (n floats each); u64 buffers, per buffer: u64 key, u64 bytes, bytes.
  void export_state(zhost_state_writer write, void* user) const {
    Writer w{write, user};
    w.bytes(kMagic, sizeof(kMagic));
    w.u64(groups_.size());
    for (const auto& [key, g] : groups_) {
      w.u64(key);
      w.desc(g.optimizer);
      w.u64(static_cast<uint64_t>(g.numel));
      for (const HostBuffer* b : {&g.master, &g.exp_avg, &g.exp_avg_sq}) w.bytes(b->data(), b->bytes());
    }
    w.u64(buffers_.size());
    for (const auto& [key, buffer] : buffers_) {
      w.u64(key);
      w.u64(buffer.bytes());
      w.bytes(buffer.data(), buffer.bytes());
    }
  }

  void import_state(zhost_state_reader read, void* user) {
    Reader r{read, user};
    char magic[sizeof(kMagic)];
    r.bytes(magic, sizeof(magic));
    if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0)
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: the imported state is not an offload_cpu export");
    std::map<uint64_t, Group> groups;
    for (uint64_t i = 0, count = r.u64(); i < count; ++i) {
      const uint64_t key = r.u64();
      const zhost_optimizer_desc desc = r.desc();
      const auto n = static_cast<int64_t>(r.u64());
      Group& g = groups.emplace(key, Group(host_, desc, n, pinned_)).first->second;
      for (const HostBuffer* b : {&g.master, &g.exp_avg, &g.exp_avg_sq}) r.bytes(b->data(), b->bytes());
    }
    std::map<uint64_t, HostBuffer> buffers;
    for (uint64_t i = 0, count = r.u64(); i < count; ++i) {
      const uint64_t key = r.u64();
      HostBuffer& b = buffers.emplace(key, HostBuffer(host_, r.u64(), pinned_, "offload_cpu buffer",
                                                      HostBuffer::Fill::kUninitialized)).first->second;
      r.bytes(b.data(), b.bytes());
    }
    groups_ = std::move(groups);
    buffers_ = std::move(buffers);
  }

 private:
  static constexpr char kMagic[8] = {'Z', 'H', 'C', 'P', 'U', '0', '0', '1'};

  struct Group {
    Group(const Host& host, const zhost_optimizer_desc& desc, int64_t n, bool pinned)
        : optimizer(desc),
          numel(n),
          master(host, static_cast<uint64_t>(n) * 4, pinned, "offload_cpu master", HostBuffer::Fill::kUninitialized),
          exp_avg(host, static_cast<uint64_t>(n) * 4, pinned, "offload_cpu exp_avg"),
          exp_avg_sq(host, desc.kind == ZHOST_OPTIMIZER_LION ? 0 : static_cast<uint64_t>(n) * 4, pinned,
                     "offload_cpu exp_avg_sq"),
          grad(host, static_cast<uint64_t>(n) * 4, pinned, "offload_cpu gradients") {
      optimizer.ext = nullptr;
    }
    uint64_t bytes() const { return master.bytes() + exp_avg.bytes() + exp_avg_sq.bytes() + grad.bytes(); }
    zhost_optimizer_desc optimizer;
    int64_t numel;
    HostBuffer master, exp_avg, exp_avg_sq, grad;
  };

  struct Writer {
    zhost_state_writer write;
    void* user;
    void bytes(const void* data, size_t len) const {
      if (len && write(user, data, len) != 0) throw PluginError(ZHOST_ERR_IO, "offload_cpu: export stopped by the writer");
    }
    void u64(uint64_t v) const { bytes(&v, sizeof(v)); }
    void desc(const zhost_optimizer_desc& d) const {
      const double values[] = {static_cast<double>(d.kind), d.beta1, d.beta2, d.eps, d.weight_decay, d.momentum,
                               static_cast<double>(d.bias_correction)};
      bytes(values, sizeof(values));
    }
  };
  struct Reader {
    zhost_state_reader read;
    void* user;
    void bytes(void* data, size_t len) const {
      auto* out = static_cast<char*>(data);
      while (len > 0) {
        const int64_t got = read(user, out, len);
        if (got <= 0) throw PluginError(ZHOST_ERR_IO, "offload_cpu: the imported state ends early or cannot be read");
        out += got;
        len -= static_cast<size_t>(got);
      }
    }
    uint64_t u64() const {
      uint64_t v = 0;
      bytes(&v, sizeof(v));
      return v;
    }
    zhost_optimizer_desc desc() const {
      double values[7];
      bytes(values, sizeof(values));
      zhost_optimizer_desc d{};
      d.struct_size = sizeof(d);
      d.kind = static_cast<zhost_optimizer_kind>(static_cast<int>(values[0]));
      d.beta1 = values[1];
      d.beta2 = values[2];
      d.eps = values[3];
      d.weight_decay = values[4];
      d.momentum = values[5];
      d.bias_correction = static_cast<int32_t>(values[6]);
      return d;
    }
  };

  Group& group(uint64_t key) {
    auto it = groups_.find(key);
    if (it == groups_.end())
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: no optimizer group " + std::to_string(key) +
                                                        " (optimizer_setup first)");
    return it->second;
  }

  Host host_;
  bool pinned_;
  cpu_optim::StepOptions kernel_;  // the instruction set and threads, fixed at creation
  std::map<uint64_t, HostBuffer> buffers_;
  std::map<uint64_t, Group> groups_;
};

using Instance = zhost::sdk::InstanceOf<CpuTier>;
using zhost::sdk::guard;
CpuTier& self(zhost_plugin_instance* s) { return Instance::self(s); }

const zhost_offload_api kOffload = {
    sizeof(zhost_offload_api),
    nullptr,
    [](zhost_plugin_instance* s, zhost_tier_io_args* a) { return guard([&] { a->event = self(s).store(*a); }); },
    [](zhost_plugin_instance* s, zhost_tier_io_args* a) { return guard([&] { a->event = self(s).load(*a); }); },
    [](zhost_plugin_instance* s, zhost_tier_event* e) { return guard([&] { self(s).wait(e); }); },
    [](zhost_plugin_instance* s, uint64_t key) { return guard([&] { self(s).drop(key); }); },
    [](zhost_plugin_instance* s, zhost_state_writer w, void* u) { return guard([&] { self(s).export_state(w, u); }); },
    [](zhost_plugin_instance* s, zhost_state_reader r, void* u) { return guard([&] { self(s).import_state(r, u); }); },
    [](zhost_plugin_instance* s, const zhost_tier_optimizer_setup* a) { return guard([&] { self(s).optimizer_setup(*a); }); },
    [](zhost_plugin_instance* s, uint64_t key, DLTensor* out) { return guard([&] { self(s).optimizer_grad(key, *out); }); },
    [](zhost_plugin_instance* s, const zhost_tier_step_args* a) { return guard([&] { self(s).optimizer_step(*a); }); },
    [](zhost_plugin_instance* s, zhost_tier_memory* out) { return guard([&] { self(s).memory(*out); }); },
    [](zhost_plugin_instance* s, const zhost_tier_step_args* a, int64_t offset) {
      return guard([&] { self(s).optimizer_step(*a, offset, true); });
    },
    [](zhost_plugin_instance* s, zhost_tier_event* e) { return guard([&] { self(s).order_compute_after(e); }); },
};

const zhost_plugin_api kApi = {sizeof(zhost_plugin_api), nullptr, nullptr, Instance::create, Instance::destroy,
                               nullptr, &kOffload, nullptr};

const zhost_plugin_descriptor* describe() {
  static zhost::sdk::DescriptorBuilder builder("offload_cpu", "0.1.0", ZHOST_KIND_OFFLOAD);
  builder.summary("host-memory tier: ZeRO-Offload's CPU side, with a fused SIMD Adam/AdamW/Lion (AVX-512, AVX2, scalar)")
      .provides({"offload:cpu"})
      .flags(ZHOST_PLUGIN_FLAG_HOT_SWAPPABLE)
      .config_bool("zero.offload_optimizer.pin_memory", false, "page-locked host buffers (faster device copies)")
      .config_int("offload_cpu.threads", 0, "threads of the CPU optimizer; 0 = hardware threads / ranks on this machine", 0, 4096);
  return builder.build();
}

}  // namespace

ZHOST_PLUGIN_ENTRY(describe(), &kApi)
