// host/core/log.cpp: logger set-up for the host (stderr sink, rank-aware pattern).
#include "host/core/log.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>

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

namespace {

// Note [Status on a signal]: what the handler needs, set before it is installed.
int g_status_fd = -1;
long g_utc_offset_s = 0;
char g_rank_tag[32] = "";
std::atomic<bool> g_status_written{false};
constexpr std::array<int, 3> kStatusSignals{SIGTERM, SIGINT, SIGHUP};
std::array<struct sigaction, 3> g_previous{};

// Appends `text` to `out` at `at`; returns the new end (async-signal-safe).
size_t put(char* out, size_t at, const char* text) {
  while (*text != '\0') out[at++] = *text++;
  return at;
}

size_t put_number(char* out, size_t at, long value, int width) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0 || n < width);
  while (n > 0) out[at++] = digits[--n];
  return at;
}

extern "C" void write_status_on_signal(int signal) {
  if (g_status_fd >= 0 && !g_status_written.exchange(true)) {
    struct timespec now {};
    ::clock_gettime(CLOCK_REALTIME, &now);
    const long local = static_cast<long>(now.tv_sec) + g_utc_offset_s;
    long days = local / 86400, seconds = local % 86400;
    if (seconds < 0) {
      seconds += 86400;
      --days;
    }
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    days += 719468;
    const long era = (days >= 0 ? days : days - 146096) / 146097;
    const long doe = days - era * 146097;
    const long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const long mp = (5 * doy + 2) / 153;
    const long day = doy - (153 * mp + 2) / 5 + 1;
    const long month = mp < 10 ? mp + 3 : mp - 9;
    const long year = yoe + era * 400 + (month <= 2 ? 1 : 0);
    char line[256];
    size_t at = put_number(line, 0, year, 4);
    at = put_number(line, put(line, at, "-"), month, 2);
    at = put_number(line, put(line, at, "-"), day, 2);
    at = put_number(line, put(line, at, " "), seconds / 3600, 2);
    at = put_number(line, put(line, at, ":"), seconds / 60 % 60, 2);
    at = put_number(line, put(line, at, ":"), seconds % 60, 2);
    at = put_number(line, put(line, at, "."), now.tv_nsec / 1000000, 3);
    at = put(line, at, " info  ");
    at = put(line, at, g_rank_tag);
    at = put(line, at, " status: failed: stopped by ");
    at = put(line, at, signal == SIGTERM ? "SIGTERM" : signal == SIGINT ? "SIGINT" : "SIGHUP");
    at = put(line, at,
             signal == SIGTERM ? " (zhost's launcher sends it to every rank when one rank fails or it is stopped "
                                 "itself; see its messages)\n"
                               : "\n");
    (void)::write(g_status_fd, line, at);
  }
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  ::sigemptyset(&action.sa_mask);
  ::sigaction(signal, &action, nullptr);
  ::raise(signal);
}

}  // namespace

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
  // A log file that can no longer be written (a full disk) is one warning in zhost's words, once, instead of
  // spdlog's "[*** LOG ERROR #0001 ***]" line per failed write; the terminal keeps every line, and the error that
  // stops the job (the next file zhost itself cannot write) follows with its cause.
  auto warned = std::make_shared<std::atomic<bool>>(false);
  auto on_error = [warned, path](const std::string& what) {
    if (warned->exchange(true)) return;
    const size_t colon = what.rfind(": ");  // spdlog's "Failed flush to file PATH: CAUSE" -> CAUSE
    const std::string line = fmt::format(
        "zhost: warning: cannot write the log {}: {}; its lines go to the terminal only: free space "
        "there or set run.dir to another disk\n",
        path, colon == std::string::npos ? what : what.substr(colon + 2));
    (void)!::write(STDERR_FILENO, line.data(), line.size());  // not through spdlog: its sink is what failed
  };
  spdlog::default_logger()->set_error_handler(on_error);
  file_only_->set_error_handler(on_error);
  // Note [Status on a signal]
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd_ >= 0) {
    const time_t now = ::time(nullptr);
    struct tm local {};
    ::localtime_r(&now, &local);
    g_utc_offset_s = local.tm_gmtoff;
    const std::string tag = fmt::format("[rank {}]", rank);
    std::strncpy(g_rank_tag, tag.c_str(), sizeof(g_rank_tag) - 1);
    g_status_written = false;
    g_status_fd = fd_;
    struct sigaction action {};
    action.sa_handler = write_status_on_signal;
    ::sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < kStatusSignals.size(); ++i) ::sigaction(kStatusSignals[i], &action, &g_previous[i]);
  }
}

FileLog::~FileLog() {
  if (fd_ >= 0) {
    for (size_t i = 0; i < kStatusSignals.size(); ++i) ::sigaction(kStatusSignals[i], &g_previous[i], nullptr);
    g_status_fd = -1;
    ::close(fd_);
  }
  spdlog::default_logger()->set_error_handler(nullptr);  // spdlog's own again, for the terminal sink
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  sink_->flush();
}

void FileLog::status(const std::string& text) {
  if (g_status_written.exchange(true)) return;  // the signal handler wrote it (Note [Status on a signal])
  file_only_->info("status: {}", text);
  file_only_->flush();
}

}  // namespace zhost::log
