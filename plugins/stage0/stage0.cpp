// plugins/stage0/stage0.cpp: data-parallel stage 0 behind the partition ABI (see stage0.h).
//
// Every rank holds the whole model, fp32 master weights (the parameters themselves in fp32 training) and
// the optimizer state: 16Ψ bytes in mixed precision, as the ZeRO paper's baseline. Gradients go through the
// ZeRO stages' one reducer (plugins/zero_common/gradient_reducer.hpp): buckets of zero.reduce_bucket_size
// elements, filled in gradient-ready order (identical on every rank) and reduce-scattered over an even
// split of the flat parameters as soon as they fill during backward; at the step every rank all-gathers the
// reduced split, so it holds every reduced gradient (a reduce-scatter and an all-gather: the bytes of a ring
// all-reduce). Reducing the same way as stages 1-3 is what makes them bitwise equal to stage 0 (Note [One
// summation order]); the step prologue and the optimizer's arithmetic are theirs too (Note [Step
// prologue], Note [One optimizer arithmetic]).
//
// Gradient accumulation: gradients accumulate in .grad across micro-batches and are reduced once, at the
// boundary (as stage 1). With zero.reduce_each_micro_batch every micro-batch's gradients are reduced and the
// sums accumulated, the order of stages 2 and 3, so that those can be compared with stage 0 bit for bit
// under accumulation too (the plugin then zeroes each .grad it has taken).
#include "plugins/stage0/stage0.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <vector>

#include "plugins/zero_common/flat_layout.hpp"
#include "plugins/zero_common/gradient_reducer.hpp"
#include "plugins/zero_common/plugin_calls.hpp"
#include "plugins/zero_common/step_prologue.hpp"
#include "zhost/cpp/partition.hpp"
#include "zhost/kit/dlpack_views.hpp"
#include "zhost/kit/grad_numerics.hpp"
#include "zhost/kit/optimizer.hpp"

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
    grads_ = at::empty({layout_.padded()}, options);
    mine_ = at::zeros({layout_.partition_size()}, options);
    // One bucket when it holds the model (nothing to overlap with); else two, one reducing while backward
    // fills the other.
    const bool overlap = bucket_elements_ < layout_.total();
    reducer_ = zero::GradientReducer(host_, layout_, rank_, options, bucket_elements_, overlap, zero::HostCopies(),
                                     [this] { return mine_; });
  }

  void begin_micro_batch(const zhost_micro_batch_args& args) { boundary_ = args.is_boundary != 0; }

  // The host counts the parameters and their .grad; here: separate masters (mixed precision only), the
  // optimizer states, and the communication buffers (the reducer's, and the gathered gradients).
  void memory(zhost_model_state_bytes& out) const {
    for (const auto& p : params_) {
      if (!p.master.is_same(p.model)) out.master += p.master.nbytes();
      out.optimizer += static_cast<uint64_t>(p.state.bytes());
    }
    out.buffers = reducer_.buffer_bytes() + mine_.nbytes() + grads_.nbytes();
  }

  void grad_ready(uint32_t id, const DLTensor& grad_view) {
    if (!reduce_each_micro_batch_ && !boundary_) return;  // accumulating in .grad until the boundary
    const at::Tensor grad = kit::tensor_view(grad_view);
    reducer_.add(id, grad);
    if (reduce_each_micro_batch_) grad.zero_();  // reduced: the next micro-batch accumulates afresh
  }

  void backward_end() {
    if (reduce_each_micro_batch_ || boundary_) reducer_.finish();
  }

  void step(zhost_step_args& args) {
    const zero::StepDecision decision = zero::step_prologue(host_, {mine_}, world_size_, mine_.device(), args);
    if (!decision.overflow) {
      gather_reduced_gradients();
      for (size_t id = 0; id < params_.size(); ++id) {
        Param& p = params_[id];
        at::Tensor grad = grads_.narrow(0, layout_.param_offset(static_cast<uint32_t>(id)), p.model.numel());
        if (grad.scalar_type() != at::kFloat) grad = grad.to(at::kFloat);
        optimizer_->step(p.master, grad.view(p.master.sizes()), p.state, args.applied_steps + 1, args.lr,
                         decision.grad_scale);
        if (!p.master.is_same(p.model)) kit::copy_master_to_model(p.model, p.master);
      }
    }
    mine_.zero_();
  }

 private:
  struct Param {
    at::Tensor model;   // the parameter (compute dtype), a view of the host's storage
    at::Tensor master;  // fp32 master (== model in fp32 training)
    kit::OptimizerState state;
  };

  // Every rank's split of the reduced gradients into every rank's buffer.
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
  at::Tensor grads_;  // [N*S] compute dtype: every rank's split, gathered at the step
  zero::GradientReducer reducer_;
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
          "data parallelism (the host's own): whole model states on every rank, bucketed gradient reduction shared "
          "with stages 1-3")
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
