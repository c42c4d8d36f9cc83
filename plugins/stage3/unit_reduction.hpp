// plugins/stage3/unit_reduction.hpp: the gradients of one micro-batch, unit by unit: each gradient copied
// into its unit's staging as it is ready, a unit whose gradients are all in reduce-scattered at once
// (asynchronously with overlap_comm, at most reduce_bucket_size elements in flight) and this rank's shard
// of the sums added into the unit's gradient (a view into its sub-group's buffer, or the tier's fp32
// accumulator). Staged (an offload tier reached from a device with memory of its own), the reduced shard
// goes to the host by copy through a pinned staging buffer while backward goes on, and is added when the
// copy is drained. Design: stage3_partition.hpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "plugins/stage3/stage3_context.hpp"
#include "plugins/stage3/staging_pool.hpp"

namespace zhost::stage3 {

class UnitReduction {
 public:
  UnitReduction(const Stage3Context& context, HostStagingPool& pool) : context_(context), pool_(pool) {}
  ~UnitReduction();  // never leaves a reduction in flight
  UnitReduction(const UnitReduction&) = delete;
  UnitReduction& operator=(const UnitReduction&) = delete;

  // Called once a unit's gradient holds its sums for the step: its reduction on the last micro-batch before the
  // step is added in (Note [Gradients in storage]).
  using Finished = std::function<void(int unit)>;

  // Setup: each unit's gradient ([S], compute dtype; fp32 in host memory with a tier), the copies to stage
  // through (staged when copies.separate()) and who hears of finished units. `prefault`: the gradients are
  // a tier's accumulator, whose pages it may give back after each step: they are prefaulted for writing before
  // a step's first add (kit::prefault_for_write).
  void setup(std::vector<at::Tensor> unit_grads, const zero::HostCopies& copies, Finished finished, bool prefault);

  void begin_micro_batch(bool first, bool boundary);
  void grad_ready(uint32_t id, const DLTensor& grad);
  // backward_end: units with a parameter that received no gradient are reduced (zeros there, or an error
  // without ignore_unused_parameters), every reduction completed and every copy drained.
  void finish();

 private:
  struct Unit {
    at::Tensor grad;          // [S] where this rank's reduced elements are added
    at::Tensor grad_staging;  // [N*S] compute dtype, from the first gradient to the reduction's end
    at::Tensor reduced;       // [S] this rank's reduced elements
    DLTensor staging_dl{}, reduced_dl{};
    zhost_segments_ext segments{};  // on the reduction in flight
    zhost_work* reduce_work = nullptr;
    int grads_pending = 0;
    bool reduced_this_micro_batch = false;
  };
  struct ToHost {  // a unit's reduced gradient shard on its way to the tier's accumulator
    int unit;
    zero::HostCopies::Copy copy;
    at::Tensor host;    // pinned, at least the shard's length
    at::Tensor source;  // the device shard, kept until the copy is drained
  };

  Unit& unit_state(int unit) { return units_[static_cast<size_t>(unit)]; }
  void launch(int unit);
  void complete(int unit);
  void stage_to_host(int unit, const at::Tensor& mine);
  void drain_oldest_to_host();

  const Stage3Context& context_;
  HostStagingPool& pool_;
  zero::HostCopies copies_;
  std::vector<Unit> units_;
  std::vector<uint8_t> arrived_;  // per parameter, this micro-batch
  std::deque<int> reductions_;    // units whose reduction is in flight, oldest first
  int64_t reducing_elements_ = 0;
  std::deque<ToHost> to_host_;
  int64_t to_host_elements_ = 0;
  Finished finished_;
  bool prefault_ = false;
  bool first_ = true;     // this micro-batch is the step's first
  bool boundary_ = true;  // this micro-batch is the step's last
};

}  // namespace zhost::stage3
