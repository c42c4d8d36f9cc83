// plugins/stage0/stage0.cpp: data-parallel stage 0 behind the partition ABI (see stage0.h).
//
// Every rank holds the whole model, fp32 master weights (the parameters themselves in fp32 training) and
// the optimizer state: 16Ψ bytes in mixed precision, as the ZeRO paper's baseline. Gradients are reduced by
// the stages' one GradientReducer (zhost/zero/gradient_reducer.hpp), over the ranges of
// Note [Flat-range buckets] on the even split of the flat layout (zhost/zero/flat_layout.hpp),
// staged in place in one flat buffer: as a range's gradients complete during backward it is
// reduce-scattered, each rank adding its sums into its split; at the step every rank all-gathers the reduced
// splits back into the flat buffer (a reduce-scatter and an all-gather: the bytes of a ring all-reduce) and
// steps every parameter from it (one rank skips both collectives: it adds its gradients into its split and
// steps from that). The reduction, the step prologue and the optimizer's arithmetic are those of stages 1-3
// (Note [One summation order], Note [Step prologue], Note [One optimizer arithmetic]), which is what makes
// them bitwise equal to stage 0.
//
// Note [Stage 0 holds its gradients once]: the plugin takes the gradients (ZHOST_PLUGIN_FLAG_TAKES_GRADIENTS):
// each .grad is copied to its place in the flat buffer as it arrives and the host frees it, so the flat buffer
// is the rank's only full-size copy of the gradients (the host's .grad and a flat copy of them would be two).
// Gradient accumulation adds each micro-batch's gradient into that place and reduces once, at the boundary
// (Note [Gradients accumulated where they are reduced]). Beside it: the split, which receives each
// range's sums in place (Note [Sums written in place]). With debug.reduce_each_micro_batch every micro-batch's
// gradients are reduced and the sums accumulated in the split, the order of stages 2 and 3, so that those can
// be compared with stage 0 bit for bit under accumulation too. A parameter whose gradient did not arrive in any
// micro-batch of a reduced step (a block LayerDrop skipped) contributes zeros.
#include "plugins/stage0/stage0.h"

#include <ATen/ops/zeros.h>

#include <vector>

#include "zhost/cpp/partition.hpp"
#include "zhost/kit/dlpack_views.hpp"
#include "zhost/kit/grad_numerics.hpp"
#include "zhost/kit/optimizer.hpp"
#include "zhost/kit/state_io.hpp"
#include "zhost/zero/flat_layout.hpp"
#include "zhost/zero/gradient_reducer.hpp"
#include "zhost/zero/plugin_calls.hpp"
#include "zhost/zero/step_prologue.hpp"

namespace zhost::stage0 {
namespace {

class DataParallel : public sdk::PartitionHooks {
 public:
  explicit DataParallel(const sdk::Host& host)
      : host_(host),
        bucket_elements_(host.config_int("zero.reduce_bucket_size")),
        reduce_each_micro_batch_(host.config_bool("debug.reduce_each_micro_batch")) {}

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
    const zhost_group_info_args world = host_.group_info();
    rank_ = world.rank;
    world_size_ = world.size;
    layout_ = zero::FlatLayout(numels, world_size_);
    const at::TensorOptions options = params_.front().model.options();
    grads_ = at::zeros({layout_.padded()}, options);  // the padding stays zero
    mine_ = at::zeros({layout_.partition_size()}, options);
    zero::ReducerOptions reducing;
    reducing.owner = "stage0";
    for (size_t i = 0; i < setup.num_params; ++i) reducing.param_names.emplace_back(setup.params[i].name);
    reducing.flat_staging = grads_;
    reducing.write_first_sums = true;  // mine_ is zero until then: Note [Sums written in place]
    reducer_ = zero::GradientReducer(host_, zero::flat_ranges(layout_, rank_, bucket_elements_), rank_, world_size_,
                                     options, std::move(reducing), zero::HostCopies(), [this](int) { return mine_; });
  }

  void begin_micro_batch(const zhost_micro_batch_args& args) {
    boundary_ = args.is_boundary != 0;
    reducer_.begin_micro_batch(args.micro_step == 0, boundary_);
  }

  // The host counts the parameters; here: the gradients (the flat buffer, Note [Stage 0 holds its gradients
  // once]), separate masters (mixed precision only), the optimizer states, and the communication buffers (the
  // split, a range's receive buffer when one is needed).
  void memory(zhost_model_state_bytes& out) const {
    for (const auto& p : params_) {
      if (!p.master.is_same(p.model)) out.master += p.master.nbytes();
      out.optimizer += static_cast<uint64_t>(p.state.bytes());
    }
    out.grads = grads_.nbytes();
    out.buffers = mine_.nbytes() + reducer_.buffer_bytes();
  }

  // The host frees the gradient after this call (Note [Stage 0 holds its gradients once]): before the boundary it
  // is added at its place in grads_, at the boundary added and reduced (Note [Gradients accumulated where they
  // are reduced]).
  void grad_ready(uint32_t id, const DLTensor& grad_view) {
    const at::Tensor grad = kit::tensor_view(grad_view);
    if (reduce_each_micro_batch_ || boundary_)
      reducer_.add(id, grad);
    else
      reducer_.accumulate(id, grad);
  }

  void backward_end() {
    if (reduce_each_micro_batch_ || boundary_) reducer_.finish();
  }

  void step(zhost_step_args& args) {
    const zero::StepDecision decision = zero::step_prologue(host_, {mine_}, world_size_, mine_.device(), args);
    if (!decision.overflow) {
      // One rank: its split is the whole flat space, and gathering it would only copy it.
      if (world_size_ > 1) gather_reduced_gradients();
      const at::Tensor& reduced = world_size_ > 1 ? grads_ : mine_;
      const kit::StepScalars scalars = zero::step_scalars(args, decision, optimizer_->spec());
      for (size_t id = 0; id < params_.size(); ++id) {
        Param& p = params_[id];
        at::Tensor grad = reduced.narrow(0, layout_.param_offset(static_cast<uint32_t>(id)), p.model.numel());
        if (grad.scalar_type() != at::kFloat) grad = grad.to(at::kFloat);
        optimizer_->step(p.master, grad.view(p.master.sizes()), p.state, scalars);
        if (!p.master.is_same(p.model)) kit::copy_master_to_model(p.model, p.master);
      }
    }
    mine_.zero_();  // Note [Sums written in place]: zero for the next step's first sums
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
  at::Tensor grads_;  // [N*S] compute dtype: the gradients in flat order, accumulated; at the step, every
                      // rank's reduced split
  zero::GradientReducer reducer_;  // staged in grads_, summing into mine_
  std::unique_ptr<kit::Optimizer> optimizer_;
};

const zhost_plugin_api kApi = sdk::partition_api<DataParallel>();

const zhost_plugin_descriptor* describe() {
  static sdk::DescriptorBuilder builder("stage0", "0.1.0", ZHOST_KIND_PARTITION);
  builder
      .summary(
          "data parallelism (the host's own): whole model states on every rank, gradients reduce-scattered and "
          "gathered from one flat buffer by the reducer of stages 1-3")
      .provides({"partition:stage0"})
      .flags(ZHOST_PLUGIN_FLAG_TAKES_GRADIENTS)  // Note [Stage 0 holds its gradients once]
      // Every stage's reduction bucket: the stages 1-3 read it (Note [Each key declared once]).
      .config_int("zero.reduce_bucket_size", 500000000, "gradient elements reducing at once (a bucket)", 1, 1e15)
      .config_bool("debug.reduce_each_micro_batch", false,
                   "zhost: reduce every micro-batch's gradients (the order of stages 2 and 3) instead of once at the "
                   "accumulation boundary, for bitwise comparisons with accumulation");
  return builder.build();
}

}  // namespace
}  // namespace zhost::stage0

extern "C" zhost_status* zhost_stage0_plugin_v1(zhost_negotiation* io) {
  static const zhost_plugin_descriptor* descriptor = zhost::stage0::describe();
  return zhost::sdk::negotiate_v1(io, descriptor, &zhost::stage0::kApi);
}
