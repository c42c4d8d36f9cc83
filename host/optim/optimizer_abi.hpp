// host/optim/optimizer_abi.hpp: the optimizer description of the partition ABI (zhost_optimizer_desc) to
// and from OptimizerSpec, for the host (which describes the run's optimizer) and every partitioner that
// steps it (stage 0 in the host, the ZeRO stage plugins).
#pragma once

#include "host/optim/optimizer.hpp"
#include "zhost/partition.h"

namespace zhost::optim {

// Throws zhost::Error for a kind this build does not know.
OptimizerSpec optimizer_spec_from_abi(const zhost_optimizer_desc& desc);
zhost_optimizer_desc optimizer_desc_to_abi(const OptimizerSpec& spec);

}  // namespace zhost::optim
