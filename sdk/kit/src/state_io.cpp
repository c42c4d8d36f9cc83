// sdk/kit/src/state_io.cpp: fragments of model state to and from the host's zhost_state_io.
#include "zhost/kit/state_io.hpp"

#include <ATen/ops/empty.h>

#include "kit_error.hpp"
#include "zhost/kit/dlpack_views.hpp"

namespace zhost::kit {

std::vector<std::string> checkpoint_state_names(const OptimizerSpec& optimizer) {
  std::vector<std::string> names{kMasterState};
  for (const std::string& name : make_optimizer(optimizer)->state_names()) names.push_back(name);
  return names;
}

std::vector<std::pair<std::string, at::Tensor>> flat_states(const at::Tensor& master, const OptimizerState& state) {
  std::vector<std::pair<std::string, at::Tensor>> states{{kMasterState, master}};
  for (const std::string& name : state.names()) states.emplace_back(name, state.get(name).view({-1}));
  return states;
}

namespace {

zhost_state_fragment fragment(uint32_t param, const std::string& state, int64_t param_offset, DLTensor* data) {
  zhost_state_fragment f{};
  f.struct_size = sizeof(f);
  f.param_id = param;
  f.state = state.c_str();
  f.offset = param_offset;
  f.data = data;
  return f;
}

void check_1d(const at::Tensor& values, const char* what) {
  if (values.dim() != 1 || (values.scalar_type() != at::kFloat && values.scalar_type() != at::kBFloat16))
    detail::fail(ZHOST_ERR_INVALID_ARGUMENT, "{}: a state fragment is a 1-D fp32 or bf16 tensor", what);
}

}  // namespace

zhost_status* put_state(const zhost_state_io& io, uint32_t param, const std::string& state, int64_t param_offset,
                        const at::Tensor& values) {
  check_1d(values, "put_state");
  const at::Tensor contiguous = values.to(at::kFloat).contiguous();  // bf16 widened: exact
  DLTensor view = dl_view(contiguous);
  const zhost_state_fragment f = fragment(param, state, param_offset, &view);
  return io.put(io.user, &f);
}

zhost_status* get_state(const zhost_state_io& io, uint32_t param, const std::string& state, int64_t param_offset,
                        const at::Tensor& into) {
  check_1d(into, "get_state");
  const bool direct = into.is_contiguous() && into.scalar_type() == at::kFloat;
  const at::Tensor target = direct ? into : at::empty(into.sizes(), into.options().dtype(at::kFloat));
  DLTensor view = dl_view(target);
  zhost_state_fragment f = fragment(param, state, param_offset, &view);
  zhost_status* status = io.get(io.user, &f);
  if (status == nullptr && !direct) into.copy_(target);  // bf16: rounded to nearest even
  return status;
}

}  // namespace zhost::kit
