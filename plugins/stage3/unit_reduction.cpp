// plugins/stage3/unit_reduction.cpp: reduce-scattering each unit's gradients (see the header).
#include "plugins/stage3/unit_reduction.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <utility>

#include "zhost/kit/dlpack_views.hpp"
#include "zhost/kit/format.hpp"
#include "zhost/kit/host_pages.hpp"

namespace zhost::stage3 {

using kit::dl_view;
using sdk::PluginError;

UnitReduction::~UnitReduction() {
  for (Unit& u : units_) zero::abandon(context_.host, u.reduce_work);
}

void UnitReduction::setup(std::vector<at::Tensor> unit_grads, const zero::HostCopies& copies, Finished finished,
                          bool prefault) {
  copies_ = copies;
  finished_ = std::move(finished);
  prefault_ = prefault;
  units_.resize(unit_grads.size());
  for (size_t u = 0; u < units_.size(); ++u) units_[u].grad = std::move(unit_grads[u]);
  arrived_.assign(context_.param_numels.size(), 0);
}

void UnitReduction::begin_micro_batch(bool first, bool boundary) {
  first_ = first;
  boundary_ = boundary;
  std::fill(arrived_.begin(), arrived_.end(), 0);
  for (int u = 0; u < context_.units(); ++u) {
    unit_state(u).grads_pending = static_cast<int>(context_.unit(u).params.size());
    unit_state(u).reduced_this_micro_batch = false;
  }
}

void UnitReduction::grad_ready(uint32_t id, const DLTensor& grad_view) {
  if (arrived_.at(id))
    throw PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                      kit::format("stage3: parameter {} produced a gradient twice in one backward; ZeRO reduces each "
                                  "gradient once per micro-batch",
                                  context_.param_names[id]));
  arrived_[id] = 1;
  const int unit = context_.layout.unit_of(id);
  Unit& u = unit_state(unit);
  const FetchUnit& layout = context_.unit(unit);
  if (!u.grad_staging.defined()) {
    u.grad_staging = at::empty({layout.padded()}, context_.on_device);
    if (layout.padded() > layout.numel) u.grad_staging.narrow(0, layout.numel, layout.padded() - layout.numel).zero_();
  }
  u.grad_staging.narrow(0, context_.layout.offset_of(id), context_.param_numels[id])
      .copy_(kit::tensor_view(grad_view).reshape({-1}));
  if (--u.grads_pending == 0) launch(unit);
}

// Starts the reduction of a unit's staged gradients: reduce-scatter, each rank
// receiving its shard's sums.
void UnitReduction::launch(int unit) {
  Unit& u = unit_state(unit);
  const FetchUnit& layout = context_.unit(unit);
  while (!reductions_.empty() && reducing_elements_ + layout.padded() > context_.options.reduce_bucket_size) {
    const int oldest = reductions_.front();
    complete(oldest);
  }
  u.reduced_this_micro_batch = true;
  context_.agreement.before(RankAgreement::Collective::kReduce, unit, context_.step);
  u.staging_dl = dl_view(u.grad_staging);
  zhost_collective_args args = zero::collective_args(ZHOST_INTENT_GRAD_REDUCE, layout.block);
  u.segments = layout.segments();
  args.ext = &u.segments.header;
  args.flags = ZHOST_COLLECTIVE_ASYNC;
  u.reduced = at::empty({layout.shard}, context_.on_device);
  u.reduced_dl = dl_view(u.reduced);
  args.send = &u.staging_dl;
  args.recv = &u.reduced_dl;
  const sdk::Host& host = context_.host;
  host.check(host.collectives().reduce_scatter(host.context(), &args));
  u.reduce_work = args.work;
  reductions_.push_back(unit);
  reducing_elements_ += layout.padded();
  if (!context_.options.overlap_comm) complete(unit);
}

void UnitReduction::complete(int unit) {
  Unit& u = unit_state(unit);
  zero::wait_for(context_.host, u.reduce_work);
  const at::Tensor mine = u.reduced;
  if (copies_.separate()) {
    stage_to_host(unit, mine);
  } else {
    if (prefault_ && first_) kit::prefault_for_write(u.grad);
    u.grad.add_(mine);
    if (boundary_ && finished_) finished_(unit);
  }
  u.grad_staging = at::Tensor();
  u.reduced = at::Tensor();
  reductions_.erase(std::find(reductions_.begin(), reductions_.end(), unit));
  reducing_elements_ -= context_.unit(unit).padded();
}

// Staged: the unit's reduced shard (`mine`, on the device) starts for the host, within reduce_bucket_size
// elements in flight; drain_oldest_to_host adds it into the tier's accumulator.
void UnitReduction::stage_to_host(int unit, const at::Tensor& mine) {
  const int64_t n = mine.numel();
  while (!to_host_.empty() && to_host_elements_ + n > context_.options.reduce_bucket_size) drain_oldest_to_host();
  at::Tensor host = pool_.take(n);
  zero::HostCopies::Copy copy = copies_.start(mine, host.narrow(0, 0, n));
  to_host_.push_back(ToHost{unit, std::move(copy), std::move(host), mine});
  to_host_elements_ += n;
}

void UnitReduction::drain_oldest_to_host() {
  ToHost& oldest = to_host_.front();
  oldest.copy.wait();
  const int64_t n = oldest.source.numel();
  if (prefault_ && first_) kit::prefault_for_write(unit_state(oldest.unit).grad);
  unit_state(oldest.unit).grad.add_(oldest.host.narrow(0, 0, n));
  if (boundary_ && finished_) finished_(oldest.unit);
  pool_.give(std::move(oldest.host));
  to_host_elements_ -= n;
  to_host_.pop_front();
}

void UnitReduction::finish() {
  // Units with a parameter that received no gradient: an error, or zeros
  // (ignore_unused_parameters), in unit order so that every rank reduces them
  // alike.
  for (int unit = 0; unit < context_.units(); ++unit) {
    Unit& u = unit_state(unit);
    if (u.reduced_this_micro_batch) continue;
    const FetchUnit& layout = context_.unit(unit);
    for (size_t i = 0; i < layout.params.size(); ++i) {
      const uint32_t id = layout.params[i];
      if (arrived_[id]) continue;
      if (!context_.options.ignore_unused_parameters)
        throw PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                          kit::format("stage3: parameter {} received no gradient in this backward (unused by the "
                                      "loss); set zero.ignore_unused_parameters = true to treat it as zero",
                                      context_.param_names[id]));
      if (!u.grad_staging.defined()) {
        u.grad_staging = at::zeros({layout.padded()}, context_.on_device);
      } else {
        u.grad_staging.narrow(0, layout.offsets[i], context_.param_numels[id]).zero_();
      }
    }
    launch(unit);
  }
  while (!reductions_.empty()) complete(reductions_.front());
  while (!to_host_.empty()) drain_oldest_to_host();
}

}  // namespace zhost::stage3
