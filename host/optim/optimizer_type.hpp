// host/optim/optimizer_type.hpp: the config side of the optimizers: DeepSpeed's optimizer "type" names to
// the plugin kit's kinds, and the check of a whole spec as a usage error. The optimizers themselves live
// in the SDK's plugin kit (zhost/kit/optimizer.hpp), shared by stage 0 and every plugin.
#pragma once

#include <string_view>

#include "zhost/kit/optimizer.hpp"

namespace zhost::optim {

// DeepSpeed's optimizer "type" (case-insensitive, as DeepSpeed reads it) to a kind. DeepSpeed's "Adam"
// is AdamW unless adam_w_mode is false (its default is true); "AdamW" is AdamW whatever adam_w_mode says.
// Throws UsageError for other names (Adagrad and the 1-bit/0-1 optimizers are not implemented).
kit::OptimizerKind parse_optimizer_kind(std::string_view deepspeed_type, bool adam_w_mode = true);

// Throws UsageError naming the setting when the kit would refuse `spec` (a value out of range).
void check_optimizer_spec(const kit::OptimizerSpec& spec);

}  // namespace zhost::optim
