// plugins/stage3/stage3_context.cpp: the shared context's names and host services (see the header).
#include "plugins/stage3/stage3_context.hpp"

#include <numeric>

#include "zhost/kit/format.hpp"

namespace zhost::stage3 {

std::string Stage3Context::unit_name(int u) const {
  const FetchUnit& fetch_unit = unit(u);
  if (fetch_unit.persistent) return "the persistent parameters";
  return kit::format("unit {} ('{}'{})", u, param_names[fetch_unit.params.front()],
                     fetch_unit.params.size() > 1 ? kit::format(" and {} more", fetch_unit.params.size() - 1) : "");
}

int64_t Stage3Context::model_numel() const {
  return std::accumulate(param_numels.begin(), param_numels.end(), int64_t{0});
}

const zhost_param_services& Stage3Context::params() const {
  const zhost_host_services* services = host.services();
  if (!ZHOST_HAS_FIELD(services, zhost_host_services, params) || !services->params)
    throw sdk::PluginError(ZHOST_ERR_UNSUPPORTED,
                           "stage3 needs the host's parameter storage services (a training job)");
  return *services->params;
}

}  // namespace zhost::stage3
