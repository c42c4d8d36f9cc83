// host/core/log.cpp: logger set-up for the host (stderr sink, rank-aware pattern).
#include "host/core/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "host/core/error.hpp"

namespace zhost::log {

spdlog::level::level_enum parse_level(const std::string& level) {
  if (level == "trace") return spdlog::level::trace;
  if (level == "debug") return spdlog::level::debug;
  if (level == "info") return spdlog::level::info;
  if (level == "warn") return spdlog::level::warn;
  if (level == "error") return spdlog::level::err;
  fail_usage("unknown log level '{}': use one of trace, debug, info, warn, error", level);
}

void init(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("zhost");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%H:%M:%S.%e %^%-5l%$ %v");
  spdlog::set_level(parse_level(level));
}

void set_rank(int rank) {
  spdlog::set_pattern(fmt::format("%H:%M:%S.%e %^%-5l%$ [rank {}] %v", rank));
}

}  // namespace zhost::log
