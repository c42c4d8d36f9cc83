// host/engine/collectives_adapter.hpp: serves the ABI's zhost_collectives table (host.h) from the job's
// comm::Comm, so plugins (and the host's own stage 0) run collectives on DLPack views. Errors become
// statuses: ZHOST_ERR_TIMEOUT / ZHOST_ERR_COMM carrying comm's one-line message.
#pragma once

#include "host/comm/comm.hpp"
#include "zhost/host.h"

namespace zhost::engine {

// The table for `world`. One job per process: installing again replaces the previous world.
const zhost_collectives* install_collectives(comm::Comm& world);
void uninstall_collectives();

}  // namespace zhost::engine
