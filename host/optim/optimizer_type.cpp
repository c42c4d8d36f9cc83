// host/optim/optimizer_type.cpp: DeepSpeed optimizer names to kit kinds; spec checks as usage errors.
#include "host/optim/optimizer_type.hpp"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "host/core/error.hpp"
#include "host/core/text.hpp"
#include "zhost/cpp/error.hpp"

namespace zhost::optim {

kit::OptimizerKind parse_optimizer_kind(std::string_view deepspeed_type, bool adam_w_mode) {
  std::string lowered(deepspeed_type);
  std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lowered == "adam") return adam_w_mode ? kit::OptimizerKind::kAdamW : kit::OptimizerKind::kAdam;
  if (lowered == "adamw") return kit::OptimizerKind::kAdamW;
  if (lowered == "sgd") return kit::OptimizerKind::kSgd;
  if (lowered == "lion") return kit::OptimizerKind::kLion;
  if (lowered == "lamb") return kit::OptimizerKind::kLamb;
  const std::vector<std::string> known = {"Adam", "AdamW", "SGD", "Lion", "Lamb"};
  fail_usage("optimizer type '{}' is not supported; zhost has {}{}", deepspeed_type, text::join(known),
             text::did_you_mean(deepspeed_type, known));
}

void check_optimizer_spec(const kit::OptimizerSpec& spec) {
  try {
    kit::make_optimizer(spec);
  } catch (const sdk::PluginError& e) {
    if (e.code() == ZHOST_ERR_CONFIG) throw UsageError(e.what());
    throw Error(e.what());
  }
}

}  // namespace zhost::optim
