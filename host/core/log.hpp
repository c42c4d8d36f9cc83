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
};

// Throws UsageError for an unknown level name.
spdlog::level::level_enum parse_level(const std::string& level);

}  // namespace zhost::log
