// host/core/log.hpp: the host's logger (spdlog). Every line carries the rank once ranks exist, and the
// plugin's name for lines that plugins log through the host-services table.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace zhost::log {

// Installs the process-wide logger writing to stderr (replacing an earlier one: colours follow whether stderr
// is a terminal now). `level` is one of trace, debug, info, warn, error.
void init(const std::string& level = "info");
void init(spdlog::level::level_enum level);
// Once the process knows its rank, every line shows it as "[rank N]".
void set_rank(int rank);
// While it lives, every line the process logs is also appended to `path` (with the rank, as on stderr),
// e.g. RUN_DIR/run.log; status() writes a last line to that file only.
//
// Note [Status on a signal]: a FileLog also ends its file with a status when the process is ended by SIGTERM,
// SIGINT or SIGHUP before status() was called (the launcher stops every rank with SIGTERM when one rank fails
// or it is signalled itself): a handler, installed while the FileLog lives, appends "status: failed: stopped
// by SIGTERM ..." with write(2) on a descriptor opened for it (async-signal-safe: the time stamp is computed
// from clock_gettime and the UTC offset taken at construction), then restores the default action and raises
// the signal again, so that the process still ends by it. A handler installed later (StopRequest's, Note [Stop
// at a step boundary]) takes precedence while it lives and hands back to this one.
class FileLog {
 public:
  FileLog(const std::string& path, int rank);
  ~FileLog();
  FileLog(const FileLog&) = delete;
  FileLog& operator=(const FileLog&) = delete;
  // "status: TEXT" (e.g. "completed", "failed: <the error>"), in the file only.
  void status(const std::string& text);

 private:
  std::shared_ptr<spdlog::sinks::sink> sink_;
  std::shared_ptr<spdlog::logger> file_only_;
  int fd_ = -1;  // the same file, for the signal handler (Note [Status on a signal])
};

// Throws UsageError for an unknown level name.
spdlog::level::level_enum parse_level(const std::string& level);

}  // namespace zhost::log
