// host/core/log.cpp: logger set-up for the host (stderr sink, rank-aware pattern).
#include "host/core/log.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <algorithm>

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

void init(const std::string& level) { init(parse_level(level)); }

void init(spdlog::level::level_enum level) {
  spdlog::drop("zhost");  // a second call (a forked rank: Note [Forked ranks]) replaces the logger
  auto logger = spdlog::stderr_color_mt("zhost");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%H:%M:%S.%e %^%-5l%$ %v");
  spdlog::set_level(level);
}

void set_rank(int rank) { spdlog::set_pattern(fmt::format("%H:%M:%S.%e %^%-5l%$ [rank {}] %v", rank)); }

FileLog::FileLog(const std::string& path, int rank) {
  try {
    sink_ = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, true);
  } catch (const spdlog::spdlog_ex& e) {
    fail("cannot write the log {}: {}; set run.dir to a writable folder", path, e.what());
  }
  sink_->set_pattern(fmt::format("%Y-%m-%d %H:%M:%S.%e %-5l [rank {}] %v", rank));
  sink_->set_level(spdlog::level::trace);
  spdlog::default_logger()->sinks().push_back(sink_);
  spdlog::default_logger()->flush_on(spdlog::level::trace);  // a line is in the file once logged
  file_only_ = std::make_shared<spdlog::logger>("run.log", sink_);
}

FileLog::~FileLog() {
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  sink_->flush();
}

void FileLog::status(const std::string& text) {
  file_only_->info("status: {}", text);
  file_only_->flush();
}

}  // namespace zhost::log
