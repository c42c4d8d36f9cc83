// host/config/host_schema.hpp: the config keys the host itself owns (DeepSpeed's names and defaults
// where DeepSpeed has them) and the rules across them. Plugins add their own keys next to these.
#pragma once

#include "host/config/schema.hpp"

namespace zhost::config {

// Declares the host's keys, its cross-key rules (e.g. fp16 and bf16 not both enabled) and the hints that
// point DeepSpeed table names (zero_optimization, optimizer.params) to zhost's.
void add_host_keys(Schema& schema);

}  // namespace zhost::config
