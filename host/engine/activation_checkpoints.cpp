// host/engine/activation_checkpoints.cpp: checkpointed blocks and where their inputs wait (see the header,
// Note [Checkpointed block inputs]).
#include "host/engine/activation_checkpoints.hpp"

#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <c10/core/Storage.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <string>
#include <vector>

#include "host/core/error.hpp"
#include "host/model/model.hpp"
#include "host/services/host_services.hpp"
#include "host/services/page_allocator.hpp"
#include "zhost/kit/dlpack_views.hpp"

namespace zhost::engine {

bool checkpointed_layer(int64_t layer, int64_t layers, int64_t count) {
  if (count <= 0 || count >= layers) return true;
  return (layer * count) % layers < count;
}

namespace {

// A checkpointed block's input during one micro-batch.
struct Entry {
  size_t block = 0;
  int64_t slot = 0;  // its place among the checkpointed blocks
  std::vector<int64_t> shape;
  at::Tensor kept;             // on the device: the input itself or its view of the contiguous buffer
  at::Tensor source;           // cpu_checkpointing: the device input, until its copy out is ordered
  at::Tensor host;             // cpu_checkpointing: where the input waits
  at::Tensor restored;         // cpu_checkpointing: the input back on the device
  zhost_copy* out = nullptr;   // copy to host memory, until waited for
  zhost_copy* back = nullptr;  // copy back to the device, until waited for
  bool restoring = false;      // the copy back has started
};

// `numel` elements of `dtype` in host memory: pinned when the device is CUDA, otherwise mapped pages
// (page_allocator.hpp), so that on CPU jobs malloc's count of activations does not include them.
at::Tensor host_memory(int64_t numel, at::ScalarType dtype, const at::Device& device) {
  const auto options = at::TensorOptions().dtype(dtype);
  if (device.is_cuda()) return at::empty({numel}, options.pinned_memory(true));
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<int64_t>(bytes), page_allocator(),
                       /*resizable=*/false);
  return at::empty({0}, options).set_(storage, 0, {numel}, {1});
}

}  // namespace

struct ActivationCheckpoints::State {
  CheckpointingSpec spec;
  const model::Model& model;
  at::Device device;
  at::ScalarType dtype;
  HostServices& services;
  zhost_host_context* ctx = nullptr;  // cpu_checkpointing: the context the copy services are called with
  const zhost_copy_services* copies = nullptr;
  std::vector<int64_t> slot_of_block;  // -1: not checkpointed
  int64_t slot_numel = 0;              // micro-batch x seq_len x width
  at::Tensor buffer;                   // contiguous_memory_optimization: every slot, on the device or the host
  std::vector<at::Tensor> host_slots;  // cpu_checkpointing without the buffer: one allocation per slot
  std::vector<Entry> entries;          // this micro-batch's checkpointed blocks, in forward order

  State(const CheckpointingSpec& s, const model::Model& m, const at::Device& d, at::ScalarType t, HostServices& h)
      : spec(s), model(m), device(d), dtype(t), services(h) {}

  // The copy services name the call in their message ("copies->wait: ...").
  static void check(zhost_status* status) { HostServices::throw_if_error(status, "activation checkpointing"); }
  zhost_copy* start_copy(const at::Tensor& src, at::Tensor& dst) {
    const DLTensor from = kit::dl_view(src);
    DLTensor to = kit::dl_view(dst);
    zhost_copy_start_args args{sizeof(args), nullptr, &from, &to, nullptr};
    check(copies->start(ctx, &args));
    return args.copy;
  }
  void order_after(zhost_copy* copy) {
    zhost_copy_args args{sizeof(args), nullptr, copy};
    if (copy) check(copies->order_compute_after(ctx, &args));
  }
  void wait(zhost_copy*& copy) {
    if (!copy) return;
    zhost_copy_args args{sizeof(args), nullptr, copy};
    copy = nullptr;
    check(copies->wait(ctx, &args));
  }

  // The first `numel` elements of slot `slot` of the contiguous buffer.
  at::Tensor slot_view(int64_t slot, int64_t numel, size_t block) {
    if (numel > slot_numel)
      fail(
          "activation checkpointing: block {}'s input has {} elements, more than the {} of its slot (micro-batch "
          "x seq_len x width)",
          block, numel, slot_numel);
    return buffer.narrow(0, slot * slot_numel, numel);
  }
  at::Tensor host_slot(int64_t slot, int64_t numel, size_t block) {
    if (buffer.defined()) return slot_view(slot, numel, block);
    at::Tensor& own = host_slots[static_cast<size_t>(slot)];
    if (!own.defined() || own.numel() != numel) own = host_memory(numel, dtype, device);
    return own;
  }

  // Keeps block `block`'s input x; returns its entry's index.
  size_t keep(size_t block, const at::Tensor& x) {
    if (x.scalar_type() != dtype)
      fail("activation checkpointing: block {}'s input is {}, not the compute dtype {}", block,
           c10::toString(x.scalar_type()), c10::toString(dtype));
    Entry e;
    e.block = block;
    e.slot = slot_of_block[block];
    e.shape = x.sizes().vec();
    if (!spec.cpu && !spec.contiguous) {
      e.kept = x;
    } else if (!spec.cpu) {
      e.kept = slot_view(e.slot, x.numel(), block).view(e.shape);
      e.kept.copy_(x);
    } else {
      e.source = x.contiguous();
      e.host = host_slot(e.slot, x.numel(), block).view(e.shape);
      e.out = start_copy(e.source, e.host);
    }
    entries.push_back(std::move(e));
    return entries.size() - 1;
  }

  // After the block's forward is issued: later device work waits for the copy out, so the device input
  // may go.
  void forward_issued(size_t index) {
    Entry& e = entries[index];
    order_after(e.out);
    e.source = at::Tensor();
  }

  void start_back(size_t index) {
    Entry& e = entries[index];
    if (e.restoring) return;
    e.restoring = true;
    wait(e.out);  // the host copy is complete before it is read
    e.restored = at::empty(e.shape, at::TensorOptions().dtype(dtype).device(device));
    e.back = start_copy(e.host, e.restored);
  }

  // The input of entry `index` on the device, for its recomputation; starts bringing back the previous one.
  at::Tensor restore(size_t index) {
    Entry& e = entries[index];
    if (!spec.cpu) return e.kept;
    start_back(index);
    order_after(e.back);
    if (index > 0) start_back(index - 1);  // prefetch one ahead
    return e.restored;
  }

  // Entry `index` recomputed: its copy back completes and its device memory goes.
  void recomputed(size_t index) {
    Entry& e = entries[index];
    wait(e.back);
    e.restored = at::Tensor();
    e.kept = at::Tensor();
  }

  void end_micro_batch() {
    for (Entry& e : entries) {
      wait(e.out);
      wait(e.back);
    }
    entries.clear();
  }
};

namespace {

// Activation checkpointing of one block: forward without keeping activations, recompute in backward.
// The recompute runs a nested backward (as PyTorch's reentrant checkpoint does), so the parameters'
// gradient hooks fire there exactly as without checkpointing.
struct CheckpointedBlock : torch::autograd::Function<CheckpointedBlock> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            ActivationCheckpoints::State* state, int64_t block) {
    const size_t index = state->keep(static_cast<size_t>(block), x);
    ctx->saved_data["state"] = reinterpret_cast<int64_t>(state);
    ctx->saved_data["entry"] = static_cast<int64_t>(index);
    at::Tensor output = state->model.forward_block(static_cast<size_t>(block), x);  // autograd runs this without grad
    state->forward_issued(index);
    return output;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_output) {
    auto* state = reinterpret_cast<ActivationCheckpoints::State*>(ctx->saved_data["state"].toInt());
    const auto index = static_cast<size_t>(ctx->saved_data["entry"].toInt());
    const size_t block = state->entries[index].block;
    at::Tensor input = state->restore(index).detach().requires_grad_(true);
    at::Tensor output;
    {
      at::AutoGradMode enable_grad(true);
      output = state->model.forward_block(block, input);
    }
    torch::autograd::backward({output}, {grad_output[0]});
    state->recomputed(index);
    return {input.grad(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

ActivationCheckpoints::ActivationCheckpoints(const CheckpointingSpec& spec, const model::Model& model,
                                             int64_t micro_batch, const at::Device& device, at::ScalarType dtype,
                                             HostServices& services)
    : state_(std::make_unique<State>(spec, model, device, dtype, services)) {
  State& s = *state_;
  const int64_t layers = model.spec().layers;
  if (spec.count > layers)
    fail_usage(
        "activation_checkpointing.number_checkpoints = {} is more than the model's {} transformer blocks; set it "
        "to {} or less",
        spec.count, layers, layers);
  s.slot_of_block.assign(model.num_blocks(), -1);
  int64_t slots = 0;
  for (int64_t layer = 0; layer < layers; ++layer)
    if (checkpointed_layer(layer, layers, spec.count)) s.slot_of_block[static_cast<size_t>(layer + 1)] = slots++;
  s.slot_numel = micro_batch * model.spec().seq_len * model.spec().width;
  if (spec.cpu) {
    s.copies = services.table()->copies;
    if (!s.copies)
      fail("activation_checkpointing.cpu_checkpointing needs the host's copy services, and this job has none");
    s.ctx = services.create_context(PluginContextSpec{"activation_checkpointing", {}});
    s.host_slots.resize(static_cast<size_t>(slots));
  }
  if (spec.contiguous) {
    const int64_t numel = slots * s.slot_numel;
    s.buffer = spec.cpu ? host_memory(numel, dtype, device)
                        : at::empty({numel}, at::TensorOptions().dtype(dtype).device(device));
    spdlog::debug("activation checkpointing: one {} buffer of {} x {} elements ({:.1f} MB) for the block inputs",
                  spec.cpu ? "host" : "device", slots, s.slot_numel, static_cast<double>(s.buffer.nbytes()) / 1048576);
  }
}

ActivationCheckpoints::~ActivationCheckpoints() {
  State& s = *state_;
  try {
    s.end_micro_batch();
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
  }
  if (s.ctx) s.services.destroy_context(s.ctx);
}

bool ActivationCheckpoints::checkpointed(size_t block) const {
  return block < state_->slot_of_block.size() && state_->slot_of_block[block] >= 0;
}

at::Tensor ActivationCheckpoints::forward(size_t block, const at::Tensor& x) {
  return CheckpointedBlock::apply(x, state_.get(), static_cast<int64_t>(block));
}

void ActivationCheckpoints::end_micro_batch() { state_->end_micro_batch(); }

double ActivationCheckpoints::device_bytes() const {
  const State& s = *state_;
  return !s.spec.cpu && s.buffer.defined() ? static_cast<double>(s.buffer.nbytes()) : 0;
}

double ActivationCheckpoints::host_bytes() const {
  const State& s = *state_;
  if (!s.spec.cpu) return 0;
  if (s.buffer.defined()) return static_cast<double>(s.buffer.nbytes());
  double bytes = 0;
  for (const auto& slot : s.host_slots)
    if (slot.defined()) bytes += static_cast<double>(slot.nbytes());
  return bytes;
}

}  // namespace zhost::engine
