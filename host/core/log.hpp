// host/core/log.hpp: the host's logger (spdlog). Every line carries the rank once ranks exist, and the
// plugin's name for lines that plugins log through the host-services table.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace zhost::log {

// Installs the process-wide logger writing to stderr. `level` is one of trace, debug, info, warn, error.
void init(const std::string& level = "info");
// Once the process knows its rank, every line shows it as "[rank N]".
void set_rank(int rank);
// Throws UsageError for an unknown level name.
spdlog::level::level_enum parse_level(const std::string& level);

}  // namespace zhost::log
