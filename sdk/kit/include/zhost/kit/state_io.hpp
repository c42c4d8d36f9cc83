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

// The state name of fp32 master weights; optimizer states keep their OptimizerState names.
inline constexpr const char* kMasterState = "master";

// The names of the states a checkpoint holds for an optimizer: "master", then the optimizer's state names.
std::vector<std::string> checkpoint_state_names(const OptimizerSpec& optimizer);

// The states one flat fp32 buffer of master weights carries: ("master", master), then each optimizer state
// (same length, aligned element for element). The tensors share storage with `master` and `state`.
std::vector<std::pair<std::string, at::Tensor>> flat_states(const at::Tensor& master, const OptimizerState& state);

// Hands elements [param_offset, param_offset + values.numel()) of parameter `param`'s state `state` to the host
// (io.put); `values` is 1-D fp32 (any device). Returns the host's status: NULL on success, else the caller's to
// raise (sdk::Host::check).
zhost_status* put_state(const zhost_state_io& io, uint32_t param, const std::string& state, int64_t param_offset,
                        const at::Tensor& values);
// Fills `into` (1-D fp32, any device, written in place) with those elements from the checkpoint (io.get).
zhost_status* get_state(const zhost_state_io& io, uint32_t param, const std::string& state, int64_t param_offset,
                        const at::Tensor& into);

}  // namespace zhost::kit
