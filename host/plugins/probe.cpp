// host/plugins/probe.cpp: fork, load the plugin in the child, read its verdict from a pipe with a deadline.
#include "host/plugins/probe.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <tuple>

#include "host/core/error.hpp"

namespace zhost {
namespace {

using Clock = std::chrono::steady_clock;

// The child's verdict: "" for success, else the loader's failure line.
[[noreturn]] void load_in_child(const std::filesystem::path& file, const PluginLoader& loader, int report_fd) {
  std::string verdict = "done:";
  try {
    loader.load(file);
  } catch (const std::exception& e) {
    verdict += e.what();
  } catch (...) {
    verdict += fmt::format("plugin {}: loading it threw an unknown exception", file.string());
  }
  const char* data = verdict.data();
  size_t left = verdict.size();
  while (left > 0) {
    const ssize_t written = ::write(report_fd, data, left);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) break;
    data += written;
    left -= static_cast<size_t>(written);
  }
  ::_exit(0);  // no atexit handlers, no destructors of the parent's objects
}

// Reads everything the child writes until it closes the pipe or the deadline passes; false on the deadline.
bool read_until_closed(int fd, Clock::time_point deadline, std::string& text) {
  char buffer[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd poll_fd{fd, POLLIN, 0};
    const int ready = ::poll(&poll_fd, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;  // re-check the deadline
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return true;
    text.append(buffer, static_cast<size_t>(got));
  }
}

// A file as loaded: device, inode, size and modification time, so that a file replaced on disk is new.
using FileIdentity = std::tuple<dev_t, ino_t, off_t, time_t, long>;

std::optional<FileIdentity> identify(const std::filesystem::path& file) {
  struct stat info {};
  if (::stat(file.c_str(), &info) != 0) return std::nullopt;
  return FileIdentity{info.st_dev, info.st_ino, info.st_size, info.st_mtim.tv_sec, info.st_mtim.tv_nsec};
}

std::mutex loaded_mutex;
std::set<FileIdentity>& loaded_files() {
  static std::set<FileIdentity> files;
  return files;
}

}  // namespace

void note_plugin_file_loaded(const std::filesystem::path& file) {
  if (std::optional<FileIdentity> id = identify(file)) {
    std::lock_guard<std::mutex> lock(loaded_mutex);
    loaded_files().insert(*id);
  }
}

std::optional<std::string> probe_plugin_file(const std::filesystem::path& file, const PluginLoader& loader,
                                             std::chrono::milliseconds deadline) {
  if (std::optional<FileIdentity> id = identify(file)) {
    std::lock_guard<std::mutex> lock(loaded_mutex);
    if (loaded_files().count(*id) != 0) return std::nullopt;  // it loaded here already
  }
  const std::string where = file.string();
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail("plugin {}: cannot probe it: pipe: {}", where, std::strerror(errno));
  const auto until = Clock::now() + deadline;
  const pid_t child = ::fork();
  if (child < 0) {
    const int error = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    fail("plugin {}: cannot probe it: fork: {}", where, std::strerror(error));
  }
  if (child == 0) {
    ::close(fds[0]);
    load_in_child(file, loader, fds[1]);
  }
  ::close(fds[1]);
  std::string report;
  const bool in_time = read_until_closed(fds[0], until, report);
  ::close(fds[0]);
  if (!in_time) ::kill(child, SIGKILL);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (!in_time) {
    return fmt::format(
        "plugin {}: did not finish loading within {:.1f} s (its constructors or entry function hang); "
        "remove it from the search path",
        where, std::chrono::duration<double>(deadline).count());
  }
  if (WIFSIGNALED(status)) {
    return fmt::format(
        "plugin {}: crashed while loading (signal {}, {}), in the child process zhost loads each plugin in "
        "first to find out; remove it from the search path",
        where, WTERMSIG(status), ::strsignal(WTERMSIG(status)));
  }
  constexpr std::string_view kDone = "done:";
  if (report.rfind(kDone, 0) != 0) {
    return fmt::format(
        "plugin {}: the process loading it exited with code {} before loading finished (does the "
        "plugin call exit?); remove it from the search path",
        where, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  if (report.size() == kDone.size()) return std::nullopt;
  return report.substr(kDone.size());
}

}  // namespace zhost
