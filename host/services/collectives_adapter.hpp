// host/services/collectives_adapter.hpp: serves the ABI's zhost_collectives table (host.h) from the job's
// comm::Comm, so plugins (and the host's own stage 0) run collectives on DLPack views. Errors become
// statuses: ZHOST_ERR_TIMEOUT / ZHOST_ERR_COMM carrying comm's one-line message.
//
// A collective-transform plugin, when the job has one, is offered each collective first (Note [Collective
// transforms], zhost/collective.h).
//
// The state (the world, the sub-groups made with new_group) belongs to the job: each callback finds it
// through the context the plugin passes (HostServices::job_state), so two jobs in one process never share it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "host/comm/comm.hpp"
#include "zhost/collective.h"
#include "zhost/host.h"

namespace zhost::engine {
class CommObserver;
}

namespace zhost {

class HostServices;

class CollectivesAdapter {
 public:
  // Serves `world`'s collectives through `services` (set_collectives) until destroyed; sub-groups made by
  // plugins live as long as the adapter.
  CollectivesAdapter(comm::Comm& world, HostServices& services);
  ~CollectivesAdapter();
  CollectivesAdapter(const CollectivesAdapter&) = delete;
  CollectivesAdapter& operator=(const CollectivesAdapter&) = delete;
  // Reports every collective from now on to `observer` (trace, comms_logger), or stops with nullptr; the
  // observer outlives the adapter's use of it.
  void set_observer(engine::CommObserver* observer);
  // Offers every collective from now on to `instance` through `api` (the job's collective transform), or
  // stops with nullptr. The instance outlives the adapter's use of it: call set_transform(nullptr, nullptr)
  // before destroying it.
  void set_transform(zhost_plugin_instance* instance, const struct zhost_collective_api* api);
  // The node of each job-wide rank (zhost_topology), served to plugins from now on.
  void set_topology(std::vector<int32_t> node_of_rank);

  struct State;

 private:
  std::unique_ptr<State> state_;
  HostServices& services_;
};

}  // namespace zhost
