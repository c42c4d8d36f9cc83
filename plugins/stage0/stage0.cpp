// plugins/stage0/stage0.cpp: data-parallel stage 0 behind the partition ABI (see stage0.h).
//
// Every rank holds the whole model, fp32 master weights (the parameters themselves in fp32 training) and
// the optimizer state: 16Ψ bytes in mixed precision, as the ZeRO paper's baseline. Gradients are copied as
// they become ready into one flat buffer in the flat layout's order (plugins/zero_common/flat_layout.hpp);
// after backward the buffer is reduce-scattered over the even split of the flat space in pieces of at most
// zero.reduce_bucket_size elements (flat order is owner order, so a piece needs no regrouping), each rank
// adding its sums into its split; at the step every rank all-gathers the reduced splits back into the flat
// buffer (a reduce-scatter and an all-gather: the bytes of a ring all-reduce) and steps every parameter
// from it (one rank skips both collectives: it adds its gradients into its split and steps from that).
// Communication buffers: the flat buffer (the gradients' size), the split, and one piece. Every
// element is summed over the ranks in rank order whatever the pieces (Note [One summation order]), which is
// what makes stages 1-3 bitwise equal to stage 0; the step prologue and the optimizer's arithmetic are
// theirs too (Note [Step prologue], Note [One optimizer arithmetic]). Unlike DeepSpeed's data parallelism,
// nothing overlaps the reduction with backward: on a rank's CPU there is nothing to overlap it with.
//
// Gradient accumulation: gradients accumulate in .grad across micro-batches and are reduced once, at the
// boundary (as stage 1). With zero.reduce_each_micro_batch every micro-batch's gradients are reduced and the
// sums accumulated, the order of stages 2 and 3, so that those can be compared with stage 0 bit for bit
// under accumulation too (the plugin then zeroes each .grad it has taken). A parameter whose gradient did
// not arrive in a reduced micro-batch (a block LayerDrop skipped) contributes zeros.
#include "plugins/stage0/stage0.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <vector>

#include "plugins/zero_common/flat_layout.hpp"
#include "plugins/zero_common/plugin_calls.hpp"
#include "plugins/zero_common/step_prologue.hpp"
#include "zhost/cpp/partition.hpp"
#include "zhost/kit/dlpack_views.hpp"
#include "zhost/kit/grad_numerics.hpp"
#include "zhost/kit/optimizer.hpp"
#include "zhost/kit/state_io.hpp"

namespace zhost::stage0 {
namespace {

class DataParallel : public sdk::PartitionHooks {
 public:
  explicit DataParallel(const sdk::Host& host)
      : host_(host),
        bucket_elements_(host.config_int("zero.reduce_bucket_size")),
        reduce_each_micro_batch_(host.config_bool("zero.reduce_each_micro_batch")) {}

  void setup(const zhost_partition_setup& setup) {
    params_.clear();
    std::vector<int64_t> numels;
    for (size_t i = 0; i < setup.num_params; ++i) {
      Param p;
      p.model = kit::tensor_view(setup.params[i].tensor);
      p.master = p.model.scalar_type() == at::kFloat ? p.model : p.model.to(at::kFloat).clone();
      numels.push_back(p.model.numel());
      params_.push_back(std::move(p));
    }
    optimizer_ = kit::make_optimizer(kit::optimizer_spec_from_abi(setup.optimizer));
    for (auto& p : params_) optimizer_->allocate_state(p.state, p.master);
    const zhost_collectives& collectives = host_.collectives();
    rank_ = collectives.rank(host_.context(), nullptr);
    world_size_ = collectives.world_size(host_.context(), nullptr);
    layout_ = zero::FlatLayout(numels, world_size_);
    const at::TensorOptions options = params_.front().model.options();
    grads_ = at::zeros({layout_.padded()}, options);  // the padding stays zero
    mine_ = at::zeros({layout_.partition_size()}, options);
    piece_elements_ = std::max<int64_t>(1, std::min(bucket_elements_, layout_.padded()));
    arrived_.assign(params_.size(), false);
  }

  void begin_micro_batch(const zhost_micro_batch_args& args) { boundary_ = args.is_boundary != 0; }

  // The host counts the parameters and their .grad; here: separate masters (mixed precision only), the
  // optimizer states, and the communication buffers (the flat gradients, the split, a reduced piece).
  void memory(zhost_model_state_bytes& out) const {
    for (const auto& p : params_) {
      if (!p.master.is_same(p.model)) out.master += p.master.nbytes();
      out.optimizer += static_cast<uint64_t>(p.state.bytes());
    }
    out.buffers = grads_.nbytes() + mine_.nbytes() + (piece_.defined() ? piece_.nbytes() : 0);
  }

  void grad_ready(uint32_t id, const DLTensor& grad_view) {
    if (!reduce_each_micro_batch_ && !boundary_) return;  // accumulating in .grad until the boundary
    const at::Tensor grad = kit::tensor_view(grad_view);
    at::Tensor slot = grads_.narrow(0, layout_.param_offset(id), layout_.param_numel(id));
    if (arrived_[id]) {
      slot.add_(grad.reshape({-1}));  // handed twice in one micro-batch: both count
    } else {
      slot.copy_(grad.reshape({-1}));
      arrived_[id] = true;
    }
    if (reduce_each_micro_batch_) grad.zero_();  // taken: the next micro-batch accumulates afresh
  }

  void backward_end() {
    if (!reduce_each_micro_batch_ && !boundary_) return;
    for (size_t id = 0; id < params_.size(); ++id) {
      if (!arrived_[id]) grads_.narrow(0, layout_.param_offset(id), layout_.param_numel(id)).zero_();
      arrived_[id] = false;
    }
    reduce_into_split();
  }

  void step(zhost_step_args& args) {
    const zero::StepDecision decision = zero::step_prologue(host_, {mine_}, world_size_, mine_.device(), args);
    if (!decision.overflow) {
      // One rank: its split is the whole flat space, and gathering it would only copy it.
      if (world_size_ > 1) gather_reduced_gradients();
      const at::Tensor& reduced = world_size_ > 1 ? grads_ : mine_;
      for (size_t id = 0; id < params_.size(); ++id) {
        Param& p = params_[id];
        at::Tensor grad = reduced.narrow(0, layout_.param_offset(static_cast<uint32_t>(id)), p.model.numel());
        if (grad.scalar_type() != at::kFloat) grad = grad.to(at::kFloat);
        optimizer_->step(p.master, grad.view(p.master.sizes()), p.state, args.applied_steps + 1, args.lr,
                         decision.grad_scale);
        if (!p.master.is_same(p.model)) kit::copy_master_to_model(p.model, p.master);
      }
    }
    mine_.zero_();
  }

  // Checkpoints (docs/checkpoints.md): every rank holds every state, and saves only its split of the flat
  // layout, so that the ranks write in parallel and each element once.
  void save_state(const zhost_state_io& io) {
    const int64_t split = layout_.partition_size(), begin = rank_ * split;
    for (const zero::Segment& s : layout_.segments(begin, begin + split)) {
      const Param& p = params_[s.param];
      for (const auto& [name, values] : kit::flat_states(p.master.view({-1}), p.state))
        host_.check(kit::put_state(io, s.param, name, s.param_offset, values.narrow(0, s.param_offset, s.length)));
    }
  }

  void load_state(const zhost_state_io& io) {
    for (size_t id = 0; id < params_.size(); ++id) {
      Param& p = params_[id];
      for (const auto& [name, values] : kit::flat_states(p.master.view({-1}), p.state))
        host_.check(kit::get_state(io, static_cast<uint32_t>(id), name, 0, values));
      if (!p.master.is_same(p.model)) kit::copy_master_to_model(p.model, p.master);
    }
  }

 private:
  struct Param {
    at::Tensor model;   // the parameter (compute dtype), a view of the host's storage
    at::Tensor master;  // fp32 master (== model in fp32 training)
    kit::OptimizerState state;
  };

  // Reduce-scatters the flat gradients piece by piece; each rank adds the sums of its split's elements into
  // mine_ (as the ZeRO stages add into their targets: the same bits). One rank adds its own gradients.
  void reduce_into_split() {
    if (world_size_ == 1) {  // the sum over one rank is its own gradients: the same bits, without the copies
      mine_.add_(grads_);
      return;
    }
    const int64_t split = layout_.partition_size();
    const int64_t my_begin = rank_ * split;
    for (int64_t begin = 0; begin < layout_.padded(); begin += piece_elements_) {
      const int64_t end = std::min(begin + piece_elements_, layout_.padded());
      std::vector<int64_t> counts(static_cast<size_t>(world_size_), 0);
      for (int owner = 0; owner < world_size_; ++owner) {
        counts[static_cast<size_t>(owner)] =
            std::max<int64_t>(0, std::min(end, (owner + 1) * split) - std::max(begin, owner * split));
      }
      const int64_t mine = counts[static_cast<size_t>(rank_)];
      if (!piece_.defined() || piece_.numel() < mine) piece_ = at::empty({mine}, grads_.options());
      at::Tensor send = grads_.narrow(0, begin, end - begin), received = piece_.narrow(0, 0, mine);
      DLTensor send_dl = kit::dl_view(send), recv_dl = kit::dl_view(received);
      zhost_collective_args args = zero::collective_args(ZHOST_INTENT_GRAD_REDUCE);
      args.send = &send_dl;
      args.recv = &recv_dl;
      args.recv_counts = counts.data();
      host_.check(host_.collectives().reduce_scatter(host_.context(), &args));
      if (mine > 0) mine_.narrow(0, std::max(begin, my_begin) - my_begin, mine).add_(received);
    }
  }

  // Every rank's split of the reduced gradients into every rank's flat buffer.
  void gather_reduced_gradients() {
    DLTensor send_dl = kit::dl_view(mine_), recv_dl = kit::dl_view(grads_);
    zhost_collective_args args = zero::collective_args(ZHOST_INTENT_GRAD_REDUCE);
    args.send = &send_dl;
    args.recv = &recv_dl;
    host_.check(host_.collectives().all_gather(host_.context(), &args));
  }

  sdk::Host host_;
  int64_t bucket_elements_;
  bool reduce_each_micro_batch_;
  int rank_ = 0;
  int world_size_ = 1;
  bool boundary_ = true;
  std::vector<Param> params_;
  zero::FlatLayout layout_;
  at::Tensor mine_;   // [S] compute dtype: this rank's split of the reduced gradients, accumulated to the step
  at::Tensor grads_;  // [N*S] compute dtype: the gradients in flat order; at the step, every rank's split
  at::Tensor piece_;  // [<= reduce_bucket_size / N] this rank's sums of one reduced piece
  int64_t piece_elements_ = 1;
  std::vector<bool> arrived_;  // per parameter: its gradient is in grads_ for this reduction
  std::unique_ptr<kit::Optimizer> optimizer_;
};

using Instance = sdk::InstanceOf<DataParallel>;

const zhost_plugin_api kApi = {sizeof(zhost_plugin_api),
                               nullptr,
                               nullptr,
                               Instance::create,
                               Instance::destroy,
                               &sdk::PartitionTableOf<DataParallel>::table,
                               nullptr,
                               nullptr};

const zhost_plugin_descriptor* describe() {
  static sdk::DescriptorBuilder builder("stage0", "0.1.0", ZHOST_KIND_PARTITION);
  builder
      .summary(
          "data parallelism (the host's own): whole model states on every rank, gradients reduce-scattered and "
          "gathered from one flat buffer, summed in the rank order of stages 1-3")
      .provides({"partition:stage0"})
      .config_int("zero.reduce_bucket_size", 500000000, "elements per gradient reduction bucket", 1, 1e15)
      .config_bool("zero.reduce_each_micro_batch", false,
                   "zhost: reduce every micro-batch's gradients (the order of stages 2 and 3) instead of once at the "
                   "accumulation boundary, for bitwise comparisons with accumulation");
  return builder.build();
}

}  // namespace
}  // namespace zhost::stage0

extern "C" zhost_status* zhost_stage0_plugin_v0(zhost_negotiation* io) {
  static const zhost_plugin_descriptor* descriptor = zhost::stage0::describe();
  return zhost::sdk::negotiate_v0(io, descriptor, &zhost::stage0::kApi);
}
