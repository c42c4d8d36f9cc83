// zhost/zero/plugin_calls.hpp: what every ZeRO stage plugin asks of the host the same way: the
// collectives it runs (one args idiom, the scalar all-reduce of the gradient norm, waiting for and
// abandoning asynchronous work), the offload tier that runs its optimizer (zero.offload_optimizer), over
// the optimizer tier table (zhost/optimizer.h), and the copies that stage data between the training device and the
// tier's host memory (the host's copy services). Shared by stages 0-3, and by any stage built on the SDK.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "zhost/cpp/plugin.hpp"
#include "zhost/kit/optimizer.hpp"
#include "zhost/zhost.h"

namespace zhost::zero {

// Arguments for one collective of the given intent (sum; `block` -1 when it is about no block).
zhost_collective_args collective_args(zhost_collective_intent intent, int32_t block = -1);

// Reduces `value` (a small tensor, e.g. a squared norm) over all ranks, in place.
void all_reduce(const sdk::Host& host, at::Tensor& value, zhost_reduce_op op);
inline void all_reduce_sum(const sdk::Host& host, at::Tensor& value) { all_reduce(host, value, ZHOST_REDUCE_SUM); }

// Completes an asynchronous collective; `work` is null afterwards. Throws on failure.
void wait_for(const sdk::Host& host, zhost_work*& work);

// Completes `work` ignoring its outcome, for destructors: never leave a collective in flight; its failure
// was (or will be) reported by whoever waited for it.
void abandon(const sdk::Host& host, zhost_work*& work) noexcept;

// zero.offload_optimizer.step_chunk_size: the offloaded step's piece size.
constexpr int64_t kDefaultStepChunk = int64_t{1} << 22;
// The gradient keys every stage reads alike (DeepSpeed's meaning and defaults): overlap_comm, reduce_scatter,
// ignore_unused_parameters and offload_optimizer.step_chunk_size, which stage 1 declares and the other stages
// read, and reduce_bucket_size, which stage 0 declares (Note [Each key declared once], host/job/job_setup.cpp).
void declare_gradient_keys(sdk::DescriptorBuilder& builder);  // stage 1
void read_gradient_keys(sdk::DescriptorBuilder& builder);     // stages 2 and 3
// Warns that zero.reduce_scatter = false changes nothing here (gradients are always reduce-scattered).
void note_reduce_scatter_key(const sdk::Host& host);

// Time from construction to destruction as one span of `name`: its total per step is "<plugin>/<name>" in
// the wall-clock breakdown and metrics.jsonl.
class ScopedSpan {
 public:
  ScopedSpan(const sdk::Host& host, const char* name) : host_(host), span_{sizeof(zhost_trace_args), nullptr, name, 0} {
    host.services()->trace_begin(host.context(), &span_);
  }
  ~ScopedSpan() { host_.services()->trace_end(host_.context(), &span_); }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  const sdk::Host& host_;
  zhost_trace_args span_;
};

// Copies between host memory and the training device (zhost_copy_services). With an offload tier on a
// device that has memory of its own, a stage stages through host memory: reduced gradients go to the host
// by copy while backward goes on, updated weights come back by copy while the next chunk steps.
class HostCopies {
 public:
  // One copy in flight; wait() completes it. Destroying a pending copy waits for it, ignoring failure.
  class Copy {
   public:
    Copy() = default;
    Copy(Copy&& other) noexcept : host_(other.host_), copy_(std::exchange(other.copy_, nullptr)) {}
    Copy& operator=(Copy&& other) noexcept;
    Copy(const Copy&) = delete;
    Copy& operator=(const Copy&) = delete;
    ~Copy();
    bool pending() const { return copy_ != nullptr; }
    // Compute-stream work issued from now on runs after the copy (no blocking); it stays pending.
    void order_compute_after() const;
    // Blocks until the copy has completed: its host destination is readable, its source reusable. The
    // time blocked is the "copy_wait" span (small when copies overlap with compute).
    void wait();

   private:
    friend class HostCopies;
    Copy(const sdk::Host& host, zhost_copy* copy) : host_(host), copy_(copy) {}
    sdk::Host host_{nullptr, nullptr};
    zhost_copy* copy_ = nullptr;
  };

  HostCopies() = default;  // none: training in host memory
  // The host's copy services for a job on `device` (the parameters' device).
  static HostCopies find(const sdk::Host& host, const at::Device& device);
  // True when the training device has memory of its own (CUDA, or debug.deferred_device_copies): offloaded
  // state is then reached through staged copies.
  bool separate() const { return separate_; }
  // An uninitialised host tensor to stage through: pinned when the device is CUDA, so copies overlap.
  at::Tensor host_empty(int64_t numel, at::ScalarType dtype) const;
  // Starts copying src into dst (one in host memory, one on the device, or both in host memory).
  Copy start(const at::Tensor& src, const at::Tensor& dst) const;

 private:
  sdk::Host host_{nullptr, nullptr};
  bool separate_ = false;
  bool pinned_ = false;
};

// The tier named by zero.offload_optimizer.device, or none. Each optimizer group (a partition, a
// sub-group) is one key: the tier keeps its fp32 master and states, and an fp32 gradient accumulator the
// plugin adds reduced gradients into.
class OptimizerTier {
 public:
  OptimizerTier() = default;  // none
  // Asks the host (at setup: tiers are installed after the instances are created); throws with what to
  // set when the named tier only stores buffers.
  static OptimizerTier find(const sdk::Host& host);
  bool active() const { return ref_.instance != nullptr; }
  const char* name() const { return ref_.name; }

  // Hands group `key` its starting fp32 master (copied); returns the group's gradient accumulator (fp32,
  // host memory, zeros), valid for the job.
  at::Tensor add_group(uint64_t key, const zhost_optimizer_desc& optimizer, const at::Tensor& master) const;
  // One optimizer step of group `key` on accumulator * grad_scale (averaging, unscaling and clipping
  // folded in); writes the updated values, in `params_out`'s dtype, and zeroes the accumulator. Timed as
  // the "tier_step" span.
  void step(uint64_t key, const kit::StepScalars& scalars, const at::Tensor& params_out) const;
  // Bytes the tier holds (host memory and storage) for all its groups.
  uint64_t bytes() const;
  // Checkpoints (docs/checkpoints.md): elements [offset, offset + numel(data)) of group `key`'s state ("master",
  // "exp_avg", ...) into `data` (read_state) or from it (write_state); `data` is 1-D fp32, contiguous, in host
  // memory. Throws ZHOST_ERR_UNSUPPORTED, naming the tier, when it cannot (no read_state/write_state).
  void read_state(uint64_t key, const std::string& state, int64_t offset, const at::Tensor& data) const {
    copy_state(key, state, offset, data, false);
  }
  void write_state(uint64_t key, const std::string& state, int64_t offset, const at::Tensor& data) const {
    copy_state(key, state, offset, data, true);
  }

  // Note [Gradients in storage] (plugins/offload_cpu/group_states.hpp): elements [offset, offset + numel) of
  // group `key`'s accumulator get nothing more before the step. Returns whether the tier may have moved them
  // out of host memory (the accumulator view must then not be read there; read_state(key, "grad", ...) can);
  // false from tiers before 0.9, tiers that keep gradients in host memory and tiers that lack
  // optimizer_grad_zero (which the contract pairs with it).
  bool grad_done(uint64_t key, int64_t offset, int64_t numel) const;
  // The whole accumulator zero, moved ranges included (a tier whose grad_done moved some).
  void grad_zero(uint64_t key) const;

  // Whether the tier steps ranges of a group (offload table 0.3), and one such step: elements [offset,
  // offset + numel(params_out)) of group `key`.
  bool steps_ranges() const;
  void step_range(uint64_t key, int64_t offset, const kit::StepScalars& scalars, const at::Tensor& params_out) const;

 private:
  explicit OptimizerTier(const sdk::Host& host) : host_(host) {}
  void check_checkpointable(const char* action) const;
  void copy_state(uint64_t key, const std::string& state, int64_t offset, const at::Tensor& data,
                  bool into_group) const;
  zhost_tier_step_args step_args(uint64_t key, const kit::StepScalars& scalars) const;
  sdk::Host host_{nullptr, nullptr};
  zhost_tier_ref ref_{};
};

// The offloaded step from a device, pipelined as in ZeRO-Offload: the tier writes each chunk of updated
// weights (zero.offload_optimizer.step_chunk_size elements) into one of two pinned buffers in turn, and the
// chunk's copy to the device runs while the next chunk steps. A buffer is reused once its last copy has
// completed, so pinned memory stays at two chunks whatever the model's size.
class StagedStep {
 public:
  StagedStep() = default;
  StagedStep(const OptimizerTier& tier, const HostCopies& copies, int64_t chunk, at::ScalarType dtype)
      : tier_(tier), copies_(copies), chunk_(std::max<int64_t>(chunk, 1)), dtype_(dtype) {}
  // Steps group `key` into `device` (the group's length) chunk by chunk; the last copies may still run.
  void step(uint64_t key, const kit::StepScalars& scalars, const at::Tensor& device);
  // Waits for the copies still running: the weights on the device are then current.
  void finish();

 private:
  struct Slot {
    at::Tensor buffer;  // pinned, compute dtype
    HostCopies::Copy copy;
  };
  OptimizerTier tier_;
  HostCopies copies_;
  int64_t chunk_ = 1;
  at::ScalarType dtype_ = at::kFloat;
  Slot slots_[2];
  int next_ = 0;
};

// The dtype of a partition's master weights when no tier runs its optimizer: bf16 with bf16.master_weights_and_grads
// (Note [bf16 masters without offload] in zhost/kit/optimizer.hpp; the host's rules pair it with
// bf16.optimizer_states and bf16 training there), else fp32. With a tier, fp32: the tier keeps the masters and
// reads the keys itself (Note [bf16 master weights]). Throws ZHOST_ERR_CONFIG for an optimizer that steps fp32
// only. A stage that calls it declares read_master_keys.
at::ScalarType master_dtype(const sdk::Host& host, const OptimizerTier& tier, const kit::OptimizerSpec& optimizer);
void read_master_keys(sdk::DescriptorBuilder& builder);
// The end of a stage's setup line when master_dtype is bf16.
inline constexpr const char* kBf16MastersSummary =
    "; bf16 master weights and optimizer states (bf16.master_weights_and_grads)";

}  // namespace zhost::zero
