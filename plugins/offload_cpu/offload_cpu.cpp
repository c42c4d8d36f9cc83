// plugins/offload_cpu/offload_cpu.cpp: the host-memory offload tier ("offload:cpu"), ZeRO-Offload's CPU
// side. It keeps, per optimizer group handed to it by a partition plugin, the master weights (fp32, or bf16 or fp16
// with bf16/fp16.master_weights_and_grads: Note [bf16 master weights] in zhost/kit/cpu_optimizer.hpp), the
// optimizer states and an fp32 gradient accumulator in host memory (pinned with
// zero.offload_optimizer.pin_memory), and steps them with the fused SIMD optimizer of cpu_optimizer.hpp:
// one pass that also writes the updated weights in the compute dtype for the all-gather. It also stores
// plain buffers by key (the tier interface the NVMe tier builds on), and exports/imports its whole state
// as a byte stream, which makes it hot-swappable.
//
// Composition (docs/abi.md "Tier composition"): with a storage tier under it (zero.offload_optimizer.storage,
// served by tier_for(ZHOST_TIER_FOR_OPTIMIZER_STORAGE)), a group's master and states live there between
// steps and come into a bounded staging area chunk by chunk for each step (group_states.hpp); the gradients
// a partition reports finished go there too until the step (Note [Gradients in storage]). Buffer keys and
// optimizer-group keys are separate namespaces.
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
#include <string>
#include <thread>
#include <vector>

#include "plugins/offload_cpu/group_states.hpp"
#include "zhost/cpp/offload.hpp"
#include "zhost/kit/cpu_optimizer.hpp"

// A store or load still moving data: the host's copy behind it.
struct zhost_tier_event {
  zhost_copy* copy;
};

namespace {

using zhost::cpu_tier::ElementBytes;
using zhost::cpu_tier::GroupStates;
using zhost::cpu_tier::HostBuffer;
using zhost::cpu_tier::StateStorage;
using zhost::sdk::Host;
using zhost::sdk::PluginError;
namespace cpu_optim = zhost::cpu_optim;

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
  if (!is_contiguous(t))
    throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, std::string("offload_cpu: ") + what + " is not contiguous");
  return static_cast<char*>(t.data) + t.byte_offset;
}

bool is_float(const DLTensor& t, int bits) {
  return t.dtype.code == kDLFloat && t.dtype.bits == bits && t.dtype.lanes == 1;
}
bool is_bf16(const DLTensor& t) { return t.dtype.code == kDLBfloat && t.dtype.bits == 16 && t.dtype.lanes == 1; }

size_t element_bytes(const DLTensor& t) { return (t.dtype.bits * t.dtype.lanes + 7) / 8; }

// n elements of a group's state kept as `type` (fp32, bf16, fp16) read as fp32 (exact), and written from fp32 (16-bit:
// rounded to nearest even, as the optimizer stores them): the ABI's state ranges, checkpoints and the hot-swap stream
// are fp32 whatever the tier keeps, so each side of them resumes the other.
void read_as_floats(const void* state, cpu_optim::StateType type, float* out, int64_t n) {
  if (type == cpu_optim::StateType::kBf16)
    cpu_optim::floats_from_bf16(static_cast<const uint16_t*>(state), out, n);
  else if (type == cpu_optim::StateType::kF16)
    cpu_optim::floats_from_f16(static_cast<const uint16_t*>(state), out, n);
  else
    std::memcpy(out, state, static_cast<size_t>(n) * 4);
}
void write_from_floats(const float* in, void* state, cpu_optim::StateType type, int64_t n) {
  if (type == cpu_optim::StateType::kBf16)
    cpu_optim::bf16_from_floats(in, static_cast<uint16_t*>(state), n);
  else if (type == cpu_optim::StateType::kF16)
    cpu_optim::f16_from_floats(in, static_cast<uint16_t*>(state), n);
  else
    std::memcpy(state, in, static_cast<size_t>(n) * 4);
}
int bytes_of(cpu_optim::StateType type) { return type == cpu_optim::StateType::kF32 ? 4 : 2; }
constexpr int64_t kConvertPiece = 16384;  // elements converted at a time through an fp32 piece

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

class CpuTier : public zhost::sdk::TierDefaults {
 public:
  static constexpr uint64_t kTierFlags =
      ZHOST_PLUGIN_FLAG_TIER_STORES | ZHOST_PLUGIN_FLAG_TIER_COMPUTES | ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE;

  explicit CpuTier(const Host& host) : host_(host), pinned_(host.config_bool("zero.offload_optimizer.pin_memory")) {
    if (host.config_bool("bf16.master_weights_and_grads")) master_type_ = cpu_optim::StateType::kBf16;
    if (host.config_bool("fp16.master_weights_and_grads")) master_type_ = cpu_optim::StateType::kF16;
    bytes_.master = bytes_of(master_type_);
    if (host.config_bool("bf16.optimizer_states")) bytes_.moments = 2;
    kernel_.isa = optimizer_isa();
    kernel_.threads = optimizer_threads(host.config_int("offload_cpu.threads"));
    storage_ = std::make_unique<StateStorage>();
    storage_->chunk = host.config_int("offload_cpu.storage_chunk_elements");
    storage_->areas = host.config_int("zero.offload_optimizer.buffer_count");
    storage_->read_ahead = host.config_bool("zero.offload_optimizer.pipeline_read");
    storage_->write_behind = host.config_bool("zero.offload_optimizer.pipeline_write");
    host_.info(std::string("host-memory tier ready; optimizer kernel ") + cpu_optim::isa_name(*kernel_.isa) + ", " +
               std::to_string(kernel_.threads) + " thread(s)" + (pinned_ ? ", pinned buffers" : "") +
               (master_type_ == cpu_optim::StateType::kBf16 ? ", bf16 master weights" : "") +
               (master_type_ == cpu_optim::StateType::kF16 ? ", fp16 master weights" : "") +
               (bytes_.moments == 2 ? " and states" : ""));
  }
  ~CpuTier() {  // groups before their storages: they drop their buffers from the storage tier
    pending_.clear();
    groups_.clear();
  }

  // ---- storage (the buffer key namespace) ----
  // Host tensors are copied at once while training in host memory; device tensors (and, under the deferred
  // test copies, host ones too) go through the host's copy services, and the copy is the event.
  zhost_tier_event* store(uint64_t key, const DLTensor& data) {
    const size_t bytes = static_cast<size_t>(numel(data)) * element_bytes(data);
    auto it = buffers_.find(key);
    if (it == buffers_.end() || it->second.bytes() != bytes) {
      buffers_.erase(key);
      it = buffers_
               .emplace(key, HostBuffer(host_, bytes, pinned_, "offload_cpu buffer", HostBuffer::Fill::kUninitialized))
               .first;
    }
    if (!by_copy(data)) {
      std::memcpy(it->second.data(), host_data(data, "the stored tensor"), bytes);
      return nullptr;
    }
    DLTensor buffer = host_view(data, it->second.data());
    return start_copy(data, buffer);
  }

  zhost_tier_event* load(uint64_t key, DLTensor& data) const {
    auto it = buffers_.find(key);
    if (it == buffers_.end())
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: no buffer stored under key " + std::to_string(key));
    const size_t bytes = static_cast<size_t>(numel(data)) * element_bytes(data);
    if (bytes != it->second.bytes())
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: load of key " + std::to_string(key) + " into " +
                                                        std::to_string(bytes) + " bytes, but " +
                                                        std::to_string(it->second.bytes()) + " are stored");
    if (!by_copy(data)) {
      std::memcpy(host_data(data, "the load destination"), it->second.data(), bytes);
      return nullptr;
    }
    DLTensor buffer = host_view(data, it->second.data());
    return start_copy(buffer, data);
  }

  void order_compute_after(zhost_tier_event* event) const {
    if (event && event->copy) host_.copy_order_compute_after(event->copy);
  }

  void wait_event(zhost_tier_event* event) const {
    std::unique_ptr<zhost_tier_event> owned(event);
    if (owned && owned->copy) host_.check(host_.copy_wait(owned->copy));
  }

  // The host's copy services cannot be asked without blocking: a pending copy is reported as not done
  // (zhost/storage.h allows it); an event without a copy is done.
  bool test_event(zhost_tier_event* event) const {
    if (event && event->copy) return false;
    delete event;
    return true;
  }

  void drop(uint64_t key) { buffers_.erase(key); }

  // ---- copies to and from the training device ----
  bool by_copy(const DLTensor& t) const {
    const zhost_copy_services* copies = host_.copies();
    if (!in_host_memory(t) && !copies)
      throw PluginError(ZHOST_ERR_UNSUPPORTED,
                        "offload_cpu: a device tensor, but the host offers no copy services outside a training job");
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
    zhost_copy* copy = host_.copy_start(src, dst);
    return copy ? new zhost_tier_event{copy} : nullptr;
  }

  // ---- the optimizer (the group key namespace) ----
  void optimizer_setup(const zhost_tier_optimizer_setup& setup) {
    const zhost_optimizer_desc& opt = *setup.optimizer;
    if (opt.kind != ZHOST_OPTIMIZER_ADAMW && opt.kind != ZHOST_OPTIMIZER_ADAM && opt.kind != ZHOST_OPTIMIZER_LION)
      throw PluginError(ZHOST_ERR_CONFIG,
                        "offload_cpu runs AdamW, Adam and Lion; use one of them with "
                        "zero.offload_optimizer, or train SGD without offload");
    if (bytes_.master != 4 && opt.kind == ZHOST_OPTIMIZER_LION)
      throw PluginError(ZHOST_ERR_CONFIG,
                        "offload_cpu: 16-bit master weights (bf16.master_weights_and_grads, "
                        "fp16.master_weights_and_grads) are built for Adam and AdamW, as DeepSpeed's CPU Adam; use one "
                        "of them, or fp32 masters");
    if (!is_float(*setup.initial_master, 32))
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: the initial master weights must be fp32");
    const int64_t n = numel(*setup.initial_master);
    const float* initial = reinterpret_cast<const float*>(host_data(*setup.initial_master, "the initial master"));
    groups_.erase(setup.key);
    Group& g = add_group(groups_, generation_, setup.key, opt, n);
    g.states->visit(0, n, 0, GroupStates::kAll, [&](void* const* states, int64_t begin, int64_t count) {
      write_from_floats(initial + begin, states[GroupStates::kMaster], state_type(GroupStates::kMaster), count);
      for (int s = 1; s < g.states->num_states(); ++s)
        std::memset(states[s], 0, static_cast<size_t>(count) * static_cast<size_t>(g.states->element_bytes(s)));
    });
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

  // Note [Gradients in storage] (group_states.hpp).
  static constexpr bool kMovesGradients = true;
  bool optimizer_grad_done(uint64_t key, int64_t offset, int64_t count) {
    Group& g = group(key);
    return g.states->grad_done(g.grad.floats(), offset, count);
  }
  void optimizer_grad_zero(uint64_t key) {
    Group& g = group(key);
    g.states->grad_zero(g.grad.floats());
  }

  void optimizer_step(const zhost_tier_step_args& args) { step(args, 0, false); }
  void optimizer_step_range(const zhost_tier_step_args& args, int64_t offset) { step(args, offset, true); }
  void optimizer_drop(uint64_t key) { groups_.erase(key); }

  // Checkpoints (docs/checkpoints.md): a range of one state of a group, resident or in the storage tier.
  void optimizer_read_state(const zhost_tier_state_args& args) { copy_state(args, false); }
  void optimizer_write_state(const zhost_tier_state_args& args) { copy_state(args, true); }

  void memory(zhost_tier_memory& out) const {
    uint64_t host = storage_->staging.bytes() + (pending_storage_ ? pending_storage_->staging.bytes() : 0), stored = 0;
    for (const auto& [key, buffer] : buffers_) host += buffer.bytes();
    for (const auto& [key, g] : groups_) {
      host += g.states->grad_host_bytes() + g.states->host_bytes();
      stored += g.states->storage_bytes();
    }
    for (const auto& [key, states] : pending_) {
      host += states.host_bytes();
      stored += states.storage_bytes();
    }
    out.host_bytes = host;
    out.storage_bytes = stored;
  }

  // ---- hot swap: the whole state as a byte stream ----
  // "ZHCPU001", u64 groups, per group: u64 key, zhost_optimizer_desc fields, i64 n, master, exp_avg,
  // exp_avg_sq (n floats each, fp32 whatever the tier keeps; none of exp_avg_sq for Lion); u64 buffers, per
  // buffer: u64 key, u64 bytes, bytes. The same stream whether the states are resident or in a storage tier.
  void export_state(zhost_state_writer write, void* user) {
    Writer w{write, user};
    w.bytes(kMagic, sizeof(kMagic));
    w.u64(groups_.size());
    for (auto& [key, g] : groups_) {
      w.u64(key);
      w.desc(g.optimizer);
      w.u64(static_cast<uint64_t>(g.numel));
      for (int s = 0; s < g.states->num_states(); ++s)
        g.states->visit(0, g.numel, 1u << s, 0, [&](void* const* states, int64_t, int64_t count) {
          w.floats(states[s], state_type(s), count);
        });
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
    // Into new maps (stored groups under the next generation of storage keys), swapped in only when the
    // whole stream was read: a failed import leaves the instance as it was.
    const uint32_t generation = (generation_ + 1) % 4;
    std::map<uint64_t, Group> groups;
    std::map<uint64_t, HostBuffer> buffers;
    for (uint64_t i = 0, count = r.u64(); i < count; ++i) {
      const uint64_t key = r.u64();
      const zhost_optimizer_desc desc = r.desc();
      const auto n = static_cast<int64_t>(r.u64());
      Group& g = add_group(groups, generation, key, desc, n);
      for (int s = 0; s < g.states->num_states(); ++s)
        g.states->visit(0, n, 0, 1u << s, [&](void* const* states, int64_t, int64_t piece) {
          r.floats(states[s], state_type(s), piece);
        });
    }
    for (uint64_t i = 0, count = r.u64(); i < count; ++i) {
      const uint64_t key = r.u64();
      HostBuffer& b =
          buffers
              .emplace(key, HostBuffer(host_, r.u64(), pinned_, "offload_cpu buffer", HostBuffer::Fill::kUninitialized))
              .first->second;
      r.bytes(b.data(), b.bytes());
    }
    groups_ = std::move(groups);
    buffers_ = std::move(buffers);
    generation_ = generation;
  }

  // ---- hot swap of the storage under this tier (Note [Storage swap], docs/abi.md "Storage swap") ----
  void optimizer_move_storage(zhost_tier_storage_move& args) {
    switch (args.phase) {
      case ZHOST_STORAGE_MOVE_COPY:
        args.bytes = copy_to_storage(args.storage);
        return;
      case ZHOST_STORAGE_MOVE_COMMIT:
        commit_storage();
        return;
      case ZHOST_STORAGE_MOVE_ABORT:
        pending_.clear();  // drops the copies from the new storage first
        pending_storage_.reset();
        return;
      default:
        throw PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                          "offload_cpu: unknown storage move phase " + std::to_string(args.phase));
    }
  }

 private:
  static constexpr char kMagic[8] = {'Z', 'H', 'C', 'P', 'U', '0', '0', '1'};

  struct Group {
    Group(const Host& host, uint64_t key, uint32_t generation, const zhost_optimizer_desc& desc, int64_t n, bool pinned,
          StateStorage* storage, ElementBytes bytes)
        : optimizer(desc),
          numel(n),
          states(std::make_unique<GroupStates>(host, key, generation, n, desc.kind == ZHOST_OPTIMIZER_LION ? 2 : 3,
                                               pinned, storage, HostBuffer::Fill::kZeros, bytes)),
          grad(host, static_cast<uint64_t>(n) * 4, pinned, "offload_cpu gradients",
               states->moves_grads() ? HostBuffer::Fill::kUninitialized : HostBuffer::Fill::kZeros) {
      optimizer.ext = nullptr;
      if (states->moves_grads()) states->grad_zero(grad.floats());  // zeros, none of it resident yet
    }
    zhost_optimizer_desc optimizer;
    int64_t numel;
    std::unique_ptr<GroupStates> states;  // master, exp_avg, exp_avg_sq: resident, or in the storage tier
    HostBuffer grad;  // the accumulator the partition adds into (finished ranges may move: group_states.hpp)
  };

  // A new group in `into`, its states in the storage tier (under `generation`'s keys) when the job composes
  // one under this tier. The storage tier is asked for here, on first use: tier_for is answered once every
  // instance exists.
  Group& add_group(std::map<uint64_t, Group>& into, uint32_t generation, uint64_t key, const zhost_optimizer_desc& desc,
                   int64_t n) {
    if (!storage_looked_up_) {
      storage_->tier = zhost::sdk::TierClient::find(host_, ZHOST_TIER_FOR_OPTIMIZER_STORAGE);
      storage_looked_up_ = true;
      if (storage_->tier.active())
        host_.info(std::string("optimizer states kept in storage tier '") + storage_->tier.name() + "', " +
                   std::to_string(storage_->chunk) + " elements at a time");
    }
    return into
        .emplace(std::piecewise_construct, std::forward_as_tuple(key),
                 std::forward_as_tuple(host_, key, generation, desc, n, pinned_, storage_.get(), bytes_))
        .first->second;
  }

  // One optimizer step of elements [offset, offset + count) of the group (the whole group unless `range`),
  // over the group's states piece by piece (one piece when resident).
  void step(const zhost_tier_step_args& args, int64_t offset, bool range) {
    Group& g = group(args.key);
    int64_t count = g.numel;
    if (range) {
      if (!args.params_out)
        throw PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                          "offload_cpu: a range step needs params_out (the range's length)");
      count = numel(*args.params_out);
      if (offset < 0 || count < 0 || offset + count > g.numel)
        throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: range [" + std::to_string(offset) + ", " +
                                                          std::to_string(offset + count) + ") is outside group " +
                                                          std::to_string(args.key) + " of " + std::to_string(g.numel) +
                                                          " elements");
    }
    cpu_optim::Copy16 copy = cpu_optim::Copy16::kNone;
    char* out = nullptr;
    size_t out_element = 4;
    if (args.params_out) {
      const DLTensor& t = *args.params_out;
      if (numel(t) != count)
        throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: params_out has " + std::to_string(numel(t)) +
                                                          " elements, the group " + std::to_string(count));
      out = host_data(t, "params_out");
      if (is_bf16(t))
        copy = cpu_optim::Copy16::kBf16;
      else if (is_float(t, 16))
        copy = cpu_optim::Copy16::kF16;
      else if (!is_float(t, 32))
        throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: params_out must be fp32, bf16 or fp16");
      out_element = element_bytes(t);
    }
    const zhost_optimizer_desc& o = g.optimizer;
    // This step's betas: a momentum schedule's (ABI 1.1), else the group's own.
    const bool scheduled = args.struct_size >= ZHOST_STRUCT_SIZE(zhost_tier_step_args, beta2);
    const double beta1 = scheduled ? args.beta1 : o.beta1, beta2 = scheduled ? args.beta2 : o.beta2;
    g.states->visit(offset, offset + count, GroupStates::kAll, GroupStates::kAll,
                    [&](void* const* states, int64_t begin, int64_t n) {
                      void* master = states[GroupStates::kMaster];
                      g.states->grad_before_step(g.grad.floats(), begin, n);
                      float* grad = g.grad.floats() + begin;
                      void* piece_out = out ? out + static_cast<size_t>(begin - offset) * out_element : nullptr;
                      if (o.kind == ZHOST_OPTIMIZER_LION) {
                        cpu_optim::LionHyper h{args.lr, beta1, beta2, o.weight_decay, args.grad_scale};
                        cpu_optim::lion_step(h, static_cast<float*>(master), grad, cpu_optim::GradType::kF32,
                                             static_cast<float*>(states[GroupStates::kExpAvg]), piece_out, copy, n,
                                             kernel_);
                      } else {
                        cpu_optim::AdamHyper h{args.lr,
                                               beta1,
                                               beta2,
                                               o.eps,
                                               o.weight_decay,
                                               o.kind == ZHOST_OPTIMIZER_ADAMW,
                                               o.bias_correction != 0,
                                               args.step,
                                               args.grad_scale};
                        // The ABI's accumulator stays fp32: grad_type() says how a 16-bit master steps on it.
                        cpu_optim::adam_step_typed(h, master, state_type(GroupStates::kMaster), grad, grad_type(),
                                                   states[GroupStates::kExpAvg], states[GroupStates::kExpAvgSq],
                                                   state_type(GroupStates::kExpAvg), piece_out, copy, n, kernel_);
                      }
                      if (piece_out && copy == cpu_optim::Copy16::kNone)
                        read_as_floats(master, state_type(GroupStates::kMaster), static_cast<float*>(piece_out), n);
                      std::memset(grad, 0, static_cast<size_t>(n) * 4);
                      g.states->grad_after_step(g.grad.floats(), begin, n);
                    });
  }

  struct Writer {
    zhost_state_writer write;
    void* user;
    void bytes(const void* data, size_t len) const {
      if (len && write(user, data, len) != 0)
        throw PluginError(ZHOST_ERR_IO, "offload_cpu: export stopped by the writer");
    }
    void u64(uint64_t v) const { bytes(&v, sizeof(v)); }
    // n elements of a state kept as `type`, written as fp32.
    void floats(const void* state, cpu_optim::StateType type, int64_t n) const {
      const int element = bytes_of(type);
      if (element == 4) return bytes(state, static_cast<size_t>(n) * 4);
      std::vector<float> piece(static_cast<size_t>(std::min(n, kConvertPiece)));
      for (int64_t at = 0; at < n; at += kConvertPiece) {
        const int64_t count = std::min(kConvertPiece, n - at);
        read_as_floats(static_cast<const char*>(state) + at * element, type, piece.data(), count);
        bytes(piece.data(), static_cast<size_t>(count) * 4);
      }
    }
    void desc(const zhost_optimizer_desc& d) const {
      const double values[] = {
          static_cast<double>(d.kind),           d.beta1, d.beta2, d.eps, d.weight_decay, d.momentum,
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
    // n fp32 elements into a state kept as `type`.
    void floats(void* state, cpu_optim::StateType type, int64_t n) const {
      const int element = bytes_of(type);
      if (element == 4) return bytes(state, static_cast<size_t>(n) * 4);
      std::vector<float> piece(static_cast<size_t>(std::min(n, kConvertPiece)));
      for (int64_t at = 0; at < n; at += kConvertPiece) {
        const int64_t count = std::min(kConvertPiece, n - at);
        bytes(piece.data(), static_cast<size_t>(count) * 4);
        write_from_floats(piece.data(), static_cast<char*>(state) + at * element, type, count);
      }
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

  void copy_state(const zhost_tier_state_args& args, bool into_group) {
    Group& g = group(args.key);
    const std::string name = args.state ? args.state : "";
    if (name == "grad" && !into_group) {  // the accumulator, wherever its elements are (Note [Gradients in storage])
      if (!args.data || !is_float(*args.data, 32) || args.data->ndim != 1 || !is_contiguous(*args.data))
        throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: a state range is a contiguous 1-D fp32 tensor");
      const int64_t count = numel(*args.data);
      if (args.offset < 0 || args.offset + count > g.numel)
        throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: gradient range [" + std::to_string(args.offset) +
                                                          ", " + std::to_string(args.offset + count) +
                                                          ") is outside group " + std::to_string(args.key));
      g.states->grad_read(g.grad.floats(), args.offset, count,
                          reinterpret_cast<float*>(host_data(*args.data, "a gradient range")));
      return;
    }
    int s = -1;
    if (name == "master") s = GroupStates::kMaster;
    if (name == "exp_avg") s = GroupStates::kExpAvg;
    if (name == "exp_avg_sq" && g.states->num_states() > 2) s = GroupStates::kExpAvgSq;
    if (s < 0)
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                        "offload_cpu: optimizer group " + std::to_string(args.key) + " keeps no state '" + name + "'");
    if (!args.data || !is_float(*args.data, 32) || args.data->ndim != 1 || !is_contiguous(*args.data))
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: a state range is a contiguous 1-D fp32 tensor");
    auto* data = reinterpret_cast<float*>(host_data(*args.data, "a state range"));
    const int64_t count = numel(*args.data);
    if (args.offset < 0 || args.offset + count > g.numel)
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: state range [" + std::to_string(args.offset) + ", " +
                                                        std::to_string(args.offset + count) + ") is outside group " +
                                                        std::to_string(args.key));
    const uint32_t mask = 1u << static_cast<uint32_t>(s);
    g.states->visit(args.offset, args.offset + count, mask, into_group ? mask : 0,
                    [&](void* const* states, int64_t begin, int64_t n) {
                      float* at = data + (begin - args.offset);
                      if (into_group)
                        write_from_floats(at, states[s], state_type(s), n);
                      else
                        read_as_floats(states[s], state_type(s), at, n);
                    });
  }

  // COPY: every group's states, state by state, into a copy under the next generation of storage keys in `target`
  // (nullptr or an inactive ref: resident in host memory). Between host memory and a storage the tier's transfers
  // read or write the resident state itself, a chunk at a time; between two storages the pieces pass through the
  // source's staging. Host memory holds at most the new storage's staging beyond the steady state, and for a
  // resident target the copies themselves: never a stored state twice.
  uint64_t copy_to_storage(const zhost_tier_ref* target) {
    if (bytes_.master != 4 || bytes_.moments != 4)
      throw PluginError(ZHOST_ERR_UNSUPPORTED,
                        "offload_cpu: 16-bit master weights or states stay in host memory; moving them into a "
                        "storage tier is not built (remove zero.offload_optimizer.swap_schedule, or use fp32 masters)");
    pending_.clear();
    pending_storage_ = std::make_unique<StateStorage>();
    pending_storage_->chunk = storage_->chunk;
    pending_storage_->areas = storage_->areas;
    pending_storage_->read_ahead = storage_->read_ahead;
    pending_storage_->write_behind = storage_->write_behind;
    if (target && target->instance) pending_storage_->tier = zhost::sdk::TierClient::of(host_, *target);
    const uint32_t generation = (generation_ + 1) % 4;
    uint64_t bytes = 0;
    try {
      for (auto& [key, g] : groups_) {
        GroupStates& to =
            pending_
                .emplace(std::piecewise_construct, std::forward_as_tuple(key),
                         std::forward_as_tuple(host_, key, generation, g.numel, g.states->num_states(), pinned_,
                                               pending_storage_.get(), HostBuffer::Fill::kUninitialized))
                .first->second;
        for (int s = 0; s < to.num_states(); ++s) {
          const uint32_t mask = 1u << static_cast<uint32_t>(s);
          float* const from_memory = g.states->resident(s);
          float* const to_memory = to.resident(s);
          if (from_memory || to_memory) {
            // Host memory on one side at least: one copy, straight from or into the resident state.
            if (from_memory && to_memory)
              std::memcpy(to_memory, from_memory, static_cast<size_t>(g.numel) * 4);
            else if (from_memory)
              to.transfer_whole(s, from_memory, /*to_storage=*/true);
            else
              g.states->transfer_whole(s, to_memory, /*to_storage=*/false);
          } else {
            // Storage to storage, chunk by chunk through the source's staging; both share the chunk size, so each
            // piece is a whole chunk of the target (or the group's tail), stored without loading it first.
            g.states->visit(0, g.numel, mask, 0, [&](void* const* from, int64_t begin, int64_t count) {
              to.visit(begin, begin + count, 0, mask, [&](void* const* into, int64_t at, int64_t n) {
                std::memcpy(into[s], static_cast<float*>(from[s]) + (at - begin), static_cast<size_t>(n) * 4);
              });
            });
          }
          bytes += static_cast<uint64_t>(g.numel) * 4;
        }
      }
    } catch (...) {
      pending_.clear();
      pending_storage_.reset();
      throw;
    }
    return bytes;
  }

  // COMMIT: each group takes its copy (its old states drop their buffers from the old storage as they go),
  // then the new storage replaces the old one, which this tier never calls again.
  void commit_storage() {
    if (!pending_storage_)
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT, "offload_cpu: storage move COMMIT without a COPY");
    for (auto& [key, g] : groups_) {
      auto it = pending_.find(key);
      if (it == pending_.end()) continue;  // never: COPY covered every group, and none is set up between phases
      g.states = std::make_unique<GroupStates>(std::move(it->second));
    }
    pending_.clear();
    storage_ = std::move(pending_storage_);
    storage_looked_up_ = true;
    generation_ = (generation_ + 1) % 4;
    host_.info(storage_->tier.active()
                   ? std::string("optimizer states now kept in storage tier '") + storage_->tier.name() + "'"
                   : std::string("optimizer states now kept in host memory"));
  }

  Group& group(uint64_t key) {
    auto it = groups_.find(key);
    if (it == groups_.end())
      throw PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                        "offload_cpu: no optimizer group " + std::to_string(key) + " (optimizer_setup first)");
    return it->second;
  }

  cpu_optim::StateType state_type(int s) const {
    if (s == GroupStates::kMaster) return master_type_;
    return bytes_.moments == 2 ? cpu_optim::StateType::kBf16 : cpu_optim::StateType::kF32;
  }
  // The accumulator's fp32 sums as the step uses them: bf16 masters step on their bf16 rounding, as DeepSpeed's bf16
  // gradient buffer holds them. fp16 masters step on the fp32 sums: fp16 training's gradients are fp16 already, and
  // their sums over micro-batches, rounded to fp16, could overflow after the step's overflow check has passed.
  cpu_optim::GradType grad_type() const {
    return master_type_ == cpu_optim::StateType::kBf16 ? cpu_optim::GradType::kF32AsBf16 : cpu_optim::GradType::kF32;
  }

  Host host_;
  bool pinned_;
  // Of every group: bf16.master_weights_and_grads or fp16.master_weights_and_grads, bf16.optimizer_states (Note
  // [bf16 master weights]).
  cpu_optim::StateType master_type_ = cpu_optim::StateType::kF32;
  ElementBytes bytes_;
  cpu_optim::StepOptions kernel_;  // the instruction set and threads, fixed at creation
  // The storage tier under this one (inactive: resident), on the heap: groups point at it, and a storage
  // swap replaces it (Note [Storage swap]).
  std::unique_ptr<StateStorage> storage_;
  bool storage_looked_up_ = false;
  std::unique_ptr<StateStorage> pending_storage_;  // between a storage move's COPY and its COMMIT or ABORT
  std::map<uint64_t, GroupStates> pending_;        // the groups' copies there, by group key
  uint32_t generation_ = 0;                        // of the live groups' storage keys (see GroupStates)
  std::map<uint64_t, HostBuffer> buffers_;         // buffer keys
  std::map<uint64_t, Group> groups_;               // optimizer-group keys
};

const zhost_plugin_api kApi = zhost::sdk::tier_api<CpuTier>();

const zhost_plugin_descriptor* describe() {
  static zhost::sdk::DescriptorBuilder builder("offload_cpu", "0.1.0", ZHOST_KIND_OFFLOAD);
  builder
      .summary("host-memory tier: ZeRO-Offload's CPU side, with a fused SIMD Adam/AdamW/Lion (AVX-512, AVX2, scalar)")
      .provides({"offload:cpu"})
      .flags(ZHOST_PLUGIN_FLAG_HOT_SWAPPABLE | CpuTier::kTierFlags)
      .config_bool("zero.offload_optimizer.pin_memory", false, "page-locked host buffers (faster device copies)")
      .config_int("offload_cpu.threads", 0,
                  "threads of the CPU optimizer; 0 = hardware threads / ranks on this machine", 0, 4096)
      .config_int("offload_cpu.storage_chunk_elements", 1 << 20,
                  "with zero.offload_optimizer.storage: elements of a group's states loaded from the storage tier at "
                  "a time (host staging: 12 bytes each)",
                  1, 1e12)
      // With a storage tier (Note [Storage pipeline]); the host declares them, as its rules check them.
      .reads_keys({"zero.offload_optimizer.buffer_count", "zero.offload_optimizer.pipeline_read",
                   "zero.offload_optimizer.pipeline_write", "bf16.master_weights_and_grads", "bf16.optimizer_states",
                   "fp16.master_weights_and_grads"});
  return builder.build();
}

}  // namespace

ZHOST_PLUGIN_ENTRY(describe(), &kApi)
