// sdk/kit/src/optimizer_desc.cpp: zhost_optimizer_desc <-> OptimizerSpec.
#include "kit_error.hpp"
#include "zhost/kit/optimizer.hpp"

namespace zhost::kit {

OptimizerSpec optimizer_spec_from_abi(const zhost_optimizer_desc& desc) {
  OptimizerSpec spec;
  switch (desc.kind) {
    case ZHOST_OPTIMIZER_ADAMW:
      spec.kind = OptimizerKind::kAdamW;
      break;
    case ZHOST_OPTIMIZER_ADAM:
      spec.kind = OptimizerKind::kAdam;
      break;
    case ZHOST_OPTIMIZER_SGD:
      spec.kind = OptimizerKind::kSgd;
      break;
    case ZHOST_OPTIMIZER_LION:
      spec.kind = OptimizerKind::kLion;
      break;
    case ZHOST_OPTIMIZER_LAMB:
      spec.kind = OptimizerKind::kLamb;
      break;
    default:
      detail::fail(ZHOST_ERR_INVALID_ARGUMENT, "unknown optimizer kind {} in zhost_optimizer_desc",
                   static_cast<int>(desc.kind));
  }
  spec.beta1 = desc.beta1;
  spec.beta2 = desc.beta2;
  spec.eps = desc.eps;
  spec.weight_decay = desc.weight_decay;
  spec.momentum = desc.momentum;
  spec.bias_correction = desc.bias_correction != 0;
  if (desc.struct_size >= ZHOST_STRUCT_SIZE(zhost_optimizer_desc, min_coeff)) {
    spec.max_coeff = desc.max_coeff;
    spec.min_coeff = desc.min_coeff;
  }
  return spec;
}

zhost_optimizer_desc optimizer_desc_to_abi(const OptimizerSpec& spec) {
  zhost_optimizer_desc desc{};
  desc.struct_size = sizeof(desc);
  switch (spec.kind) {
    case OptimizerKind::kAdamW:
      desc.kind = ZHOST_OPTIMIZER_ADAMW;
      break;
    case OptimizerKind::kAdam:
      desc.kind = ZHOST_OPTIMIZER_ADAM;
      break;
    case OptimizerKind::kSgd:
      desc.kind = ZHOST_OPTIMIZER_SGD;
      break;
    case OptimizerKind::kLion:
      desc.kind = ZHOST_OPTIMIZER_LION;
      break;
    case OptimizerKind::kLamb:
      desc.kind = ZHOST_OPTIMIZER_LAMB;
      break;
  }
  desc.beta1 = spec.beta1;
  desc.beta2 = spec.beta2;
  desc.eps = spec.eps;
  desc.weight_decay = spec.weight_decay;
  desc.momentum = spec.momentum;
  desc.bias_correction = spec.bias_correction ? 1 : 0;
  desc.max_coeff = spec.max_coeff;
  desc.min_coeff = spec.min_coeff;
  return desc;
}

}  // namespace zhost::kit
