// host/config/host_rules.hpp: the rules across the host's config keys: every combination `zhost run`
// would refuse, so that `zhost config check` refuses it first, and keys the chosen type does not read.
#pragma once

#include "host/config/schema.hpp"

namespace zhost::config {

// Adds the rules to a schema that already holds the host's keys (add_host_keys calls it).
void add_host_rules(Schema& schema);

}  // namespace zhost::config
