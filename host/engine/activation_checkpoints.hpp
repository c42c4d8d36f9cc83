// host/engine/activation_checkpoints.hpp: activation checkpointing (the activation_checkpointing section):
// which transformer blocks recompute their activations in backward, and where the input of each
// checkpointed block waits for that recomputation.
//
// Note [Checkpointed block inputs]
// A checkpointed block keeps only its input; backward runs the block again from it (a nested backward, as
// PyTorch's reentrant checkpoint does, so parameter hooks fire as without checkpointing). Where the input
// waits:
//   plain                    the input tensor itself, on the training device.
//   contiguous_memory_       copied into its slot of one buffer preallocated on the device when the job
//   optimization             starts: checkpointed blocks x micro-batch x seq_len x width elements of the
//                            compute dtype (a shorter input uses the start of its slot). Constant size,
//                            nothing allocated per micro-batch, no fragmentation.
//   cpu_checkpointing        copied to host memory (pinned on CUDA; on CPU jobs mapped pages, outside
//                            malloc) through the host's copy services (device_copies.hpp), one allocation
//                            per checkpointed block, kept for the next micro-batches; with
//                            contiguous_memory_optimization one preallocated host buffer of the size above.
//                            The device copy is freed once the copy out is ordered. In backward, block b's
//                            input comes back into fresh device memory, and the copy back of the previous
//                            checkpointed block's input starts before block b recomputes (prefetch one
//                            ahead), so at most two restored inputs are on the device at once.
// The copy out of block b starts after the block's input is computed and is ordered before any later
// device work (order_compute_after, right after block b's forward is issued), so the freed input cannot
// be overwritten while it is copied; the copy back is ordered before block b recomputes. Each copy is
// waited for exactly once: the copy out before its copy back starts, the copy back after the
// recomputation. Under debug.deferred_device_copies every copy runs as late as that allows, so a missing
// order shows as wrong values (tests/training/activation_checkpointing_test.cpp).
//
// number_checkpoints = K checkpoints K of the N transformer blocks, evenly spread from the first: layer j
// (0-based, block j + 1) is checkpointed when (j * K) mod N < K. The others keep their activations.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>

namespace zhost {
class HostServices;
}
namespace zhost::model {
class Model;
}

namespace zhost::engine {

// activation_checkpointing.* as the engine reads them.
struct CheckpointingSpec {
  bool enabled = false;     // enabled
  bool cpu = false;         // cpu_checkpointing
  bool contiguous = false;  // contiguous_memory_optimization
  int64_t count = 0;        // number_checkpoints; 0 (unset) = every transformer block
};

// Whether transformer layer `layer` (0-based) of `layers` is one of the `count` checkpointed ones.
bool checkpointed_layer(int64_t layer, int64_t layers, int64_t count);

class ActivationCheckpoints {
 public:
  // For `model` on `device` computing in `dtype`, micro-batches of `micro_batch` samples. Preallocates the
  // contiguous buffer when asked. Throws a usage error when number_checkpoints exceeds the model's blocks.
  ActivationCheckpoints(const CheckpointingSpec& spec, const model::Model& model, int64_t micro_batch,
                        const at::Device& device, at::ScalarType dtype, HostServices& services);
  ~ActivationCheckpoints();
  ActivationCheckpoints(const ActivationCheckpoints&) = delete;
  ActivationCheckpoints& operator=(const ActivationCheckpoints&) = delete;

  bool checkpointed(size_t block) const;
  // Runs checkpointed block `block` on x: its output, whose backward recomputes the block.
  at::Tensor forward(size_t block, const at::Tensor& x);
  // Completes the copies of the micro-batch that ended (normally none are left) and forgets its inputs.
  void end_micro_batch();

  // Bytes preallocated on the training device (the contiguous buffer without cpu_checkpointing).
  double device_bytes() const;
  // Bytes of host memory holding checkpointed inputs (cpu_checkpointing).
  double host_bytes() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace zhost::engine
