// zhost/kit/state_io.hpp: a partition plugin's model state into and out of a checkpoint through the host's
// zhost_state_io (zhost/partition.h, ABI 0.5): fragments of a parameter's fp32 master and optimizer states
// as at::Tensor ranges. The format the host writes them in: docs/checkpoints.md.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "zhost/kit/optimizer.hpp"
#include "zhost/partition.h"

namespace zhost::kit {

// The state name of master weights (fp32 in a checkpoint whatever they are in memory); optimizer states keep their
// OptimizerState names.
inline constexpr const char* kMasterState = "master";

// The names of the states a checkpoint holds for an optimizer: "master", then the optimizer's state names.
std::vector<std::string> checkpoint_state_names(const OptimizerSpec& optimizer);

// The states one flat buffer of master weights (fp32, or bf16: Note [bf16 masters without offload]) carries: ("master",
// master), then each optimizer state (same length, aligned element for element). The tensors share storage with
// `master` and `state`.
std::vector<std::pair<std::string, at::Tensor>> flat_states(const at::Tensor& master, const OptimizerState& state);

// Hands elements [param_offset, param_offset + values.numel()) of parameter `param`'s state `state` to the host
// (io.put); `values` is 1-D fp32 or bf16 (any device; the checkpoint holds fp32, bf16 widened exactly). Returns the
// host's status: NULL on success, else the caller's to raise (sdk::Host::check).
zhost_status* put_state(const zhost_state_io& io, uint32_t param, const std::string& state, int64_t param_offset,
                        const at::Tensor& values);
// Fills `into` (1-D fp32 or bf16, any device, written in place; bf16 rounded to nearest even) with those elements
// from the checkpoint (io.get).
zhost_status* get_state(const zhost_state_io& io, uint32_t param, const std::string& state, int64_t param_offset,
                        const at::Tensor& into);

}  // namespace zhost::kit
