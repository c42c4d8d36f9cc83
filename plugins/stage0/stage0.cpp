// plugins/stage0/stage0.cpp: data-parallel stage 0 behind the partition ABI (see stage0.h).
//
// Every rank holds the whole model, fp32 master weights (the parameters themselves in fp32 training) and
// the optimizer state: 16Ψ bytes in mixed precision, as the ZeRO paper's baseline. Gradients are
// all-reduced in fp32 buckets of zero.reduce_bucket_size elements, each launched as soon as it fills
// during the boundary micro-batch's backward (overlapping the rest of backward); backward_end() waits
// for them. Buckets are filled in gradient-ready order, which autograd makes identical on every rank.
#include "plugins/stage0/stage0.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>

#include <cmath>
#include <vector>

#include "zhost/cpp/partition.hpp"
#include "zhost/kit/dlpack_views.hpp"
#include "zhost/kit/grad_numerics.hpp"
#include "zhost/kit/optimizer.hpp"

namespace zhost::stage0 {
namespace {

class DataParallel : public sdk::PartitionHooks {
 public:
  explicit DataParallel(const sdk::Host& host)
      : host_(host), bucket_elements_(host.config_int("zero.reduce_bucket_size")) {}

  ~DataParallel() {
    // Never leave a collective in flight behind us.
    for (auto& bucket : buckets_)
      if (bucket.work)
        if (zhost_status* status = host_.services()->collectives->wait(host_.context(), bucket.work))
          host_.services()->status_destroy(status);
  }

  void setup(const zhost_partition_setup& setup) {
    params_.clear();
    for (size_t i = 0; i < setup.num_params; ++i) {
      Param p;
      p.model = kit::tensor_view(setup.params[i].tensor);
      p.master = p.model.scalar_type() == at::kFloat ? p.model : p.model.to(at::kFloat).clone();
      params_.push_back(std::move(p));
    }
    optimizer_ = kit::make_optimizer(kit::optimizer_spec_from_abi(setup.optimizer));
    for (auto& p : params_) optimizer_->allocate_state(p.state, p.master);
    total_elements_ = 0;
    for (const auto& p : params_) total_elements_ += p.model.numel();
    bucket_elements_ = std::min(bucket_elements_, total_elements_);  // never allocate more than the model needs
    world_size_ = host_.collectives().world_size(host_.context(), nullptr);
  }

  void begin_micro_batch(const zhost_micro_batch_args& args) { boundary_ = args.is_boundary != 0; }

  // The host counts the parameters and their .grad; here: separate masters (mixed precision only), the
  // optimizer states, and the reduction buckets (at most the model's size, live during the boundary).
  void memory(zhost_model_state_bytes& out) const {
    for (const auto& p : params_) {
      if (!p.master.is_same(p.model)) out.master += p.master.nbytes();
      out.optimizer += static_cast<uint64_t>(p.state.bytes());
    }
    out.buffers = static_cast<uint64_t>(total_elements_) * sizeof(float);
  }

  // Outside the boundary micro-batch, gradients just accumulate in the parameters' .grad.
  void grad_ready(uint32_t id, const DLTensor& grad_view) {
    if (!boundary_) return;
    at::Tensor grad = kit::tensor_view(grad_view);
    int64_t n = grad.numel();
    if (buckets_.empty() || buckets_.back().used + n > buckets_.back().flat.numel()) {
      if (!buckets_.empty()) launch(buckets_.back());
      buckets_.push_back(
          Bucket{at::empty({std::max(bucket_elements_, n)}, grad.options().dtype(at::kFloat)), 0, nullptr});
    }
    Bucket& bucket = buckets_.back();
    at::Tensor slot = bucket.flat.narrow(0, bucket.used, n);
    slot.copy_(grad.reshape({n}));
    params_[id].reduced_grad = slot.view(grad.sizes());
    bucket.used += n;
  }

  void backward_end() {
    if (!boundary_ || buckets_.empty()) return;
    launch(buckets_.back());
    for (auto& bucket : buckets_) {
      zhost_work* work = bucket.work;
      bucket.work = nullptr;
      host_.check(host_.services()->collectives->wait(host_.context(), work));
    }
  }

  void step(zhost_step_args& args) {
    std::vector<at::Tensor> grads;
    for (auto& p : params_) {
      if (!p.reduced_grad.defined())  // unused parameter: its gradient is zero on every rank
        p.reduced_grad = at::zeros_like(p.master);
      grads.push_back(p.reduced_grad);
    }
    // The buckets hold sums over ranks of scaled gradients: average and unscale in one multiply.
    kit::scale_in_place(grads, 1.0 / (world_size_ * args.loss_scale));
    double norm = kit::global_grad_norm(grads);  // identical on every rank: the gradients are
    args.grad_norm = norm;                       // all-reduced, so the overflow decision is too
    args.overflow = std::isfinite(norm) ? 0 : 1;
    if (!args.overflow) {
      double coefficient = kit::clip_coefficient(norm, args.clip_norm);
      if (coefficient < 1) kit::scale_in_place(grads, coefficient);
      for (auto& p : params_) {
        optimizer_->step(p.master, p.reduced_grad, p.state, args.applied_steps + 1, args.lr);
        if (!p.master.is_same(p.model)) kit::copy_master_to_model(p.model, p.master);
      }
    }
    for (auto& p : params_) p.reduced_grad = at::Tensor();
    buckets_.clear();
  }

 private:
  struct Param {
    at::Tensor model;         // the parameter (compute dtype), a view of the host's storage
    at::Tensor master;        // fp32 master (== model in fp32 training)
    at::Tensor reduced_grad;  // fp32 view into a bucket, valid from backward_end to step
    kit::OptimizerState state;
  };
  struct Bucket {
    at::Tensor flat;
    int64_t used;
    zhost_work* work;
  };

  void launch(Bucket& bucket) {
    at::Tensor filled = bucket.flat.narrow(0, 0, bucket.used);
    DLTensor view = kit::dl_view(filled);
    zhost_collective_args args{};
    args.struct_size = sizeof(args);
    args.recv = &view;
    args.op = ZHOST_REDUCE_SUM;
    args.intent = ZHOST_INTENT_GRAD_REDUCE;
    args.block = -1;
    args.flags = ZHOST_COLLECTIVE_ASYNC;
    host_.check(host_.collectives().all_reduce(host_.context(), &args));
    bucket.work = args.work;
  }

  sdk::Host host_;
  int64_t bucket_elements_;
  int64_t total_elements_ = 0;
  int world_size_ = 1;
  bool boundary_ = true;
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
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
  builder.summary("data parallelism (the host's own): whole model states on every rank, bucketed all-reduce")
      .provides({"partition:stage0"})
      .config_int("zero.reduce_bucket_size", 500000000, "elements per gradient all-reduce bucket", 1, 1e15);
  return builder.build();
}

}  // namespace
}  // namespace zhost::stage0

extern "C" zhost_status* zhost_stage0_plugin_v0(zhost_negotiation* io) {
  static const zhost_plugin_descriptor* descriptor = zhost::stage0::describe();
  return zhost::sdk::negotiate_v0(io, descriptor, &zhost::stage0::kApi);
}
