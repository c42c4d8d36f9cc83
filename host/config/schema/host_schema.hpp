// host/config/schema/host_schema.hpp: the config keys the host itself owns (DeepSpeed's names and defaults
// where DeepSpeed has them) and the rules across them. Plugins add their own keys next to these.
#pragma once

#include <cstdint>

#include "host/config/schema/schema.hpp"

namespace zhost::config {

// Declares the host's keys, its cross-key rules (e.g. fp16 and bf16 not both enabled) and the hints that
// point DeepSpeed table names (zero_optimization, optimizer.params) to zhost's.
void add_host_keys(Schema& schema);

// zero.offload_optimizer.delayed_update_start_step's default: the ZeRO-Offload paper delays only after its
// first 40 iterations (Note [Delayed parameter update], zhost/zero/delayed_update.hpp).
inline constexpr int64_t kDelayedUpdateStartDefault = 41;

}  // namespace zhost::config
