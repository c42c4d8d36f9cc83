// host/engine/collectives_adapter.hpp: serves the ABI's zhost_collectives table (host.h) from the job's
// comm::Comm, so plugins (and the host's own stage 0) run collectives on DLPack views. Errors become
// statuses: ZHOST_ERR_TIMEOUT / ZHOST_ERR_COMM carrying comm's one-line message.
//
// The state (the world, the sub-groups made with new_group) belongs to the job: each callback finds it
// through the context the plugin passes (HostServices::job_state), so two jobs in one process never share it.
#pragma once

#include <memory>

#include "host/comm/comm.hpp"
#include "zhost/host.h"

namespace zhost {
class HostServices;
}

namespace zhost::engine {

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
  void set_observer(class CommObserver* observer);

  struct State;

 private:
  std::unique_ptr<State> state_;
  HostServices& services_;
};

}  // namespace zhost::engine
