// plugins/offload_nvme/job_dir.cpp: Note [Job folders].
#include "plugins/offload_nvme/job_dir.hpp"

#include <fcntl.h>
#include <ftw.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "zhost/cpp/error.hpp"

namespace zhost::nvme_tier {

namespace fs = std::filesystem;
using sdk::PluginError;

namespace {

constexpr const char* kPrefix = "zhost-nvme-";
constexpr const char* kLock = "owner.lock";

std::string errno_text(int e) { return std::strerror(e); }

// Folder walks go through POSIX nftw, not std::filesystem::remove_all: a LibTorch loaded in the same process
// may export its own copy of that function (see tests/support/scratch_dir.hpp).
thread_local uint64_t walked_bytes = 0;

uint64_t folder_bytes(const fs::path& dir) {
  walked_bytes = 0;
  ::nftw(
      dir.c_str(),
      [](const char*, const struct stat* st, int type, struct FTW*) {
        if (type == FTW_F) walked_bytes += static_cast<uint64_t>(st->st_size);
        return 0;
      },
      16, FTW_PHYS);
  return walked_bytes;
}

// Removes `dir` and everything in it; false when something stayed.
bool remove_folder(const fs::path& dir) {
  ::nftw(
      dir.c_str(), [](const char* file, const struct stat*, int, struct FTW*) { return ::remove(file); }, 16,
      FTW_DEPTH | FTW_PHYS);
  return ::access(dir.c_str(), F_OK) != 0;
}

// Removes `dir` when its lock can be taken (its owner is dead); returns a line saying what went, or "".
std::string sweep_one(const fs::path& dir) {
  int fd = ::open((dir / kLock).c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return "";  // not (yet) a job folder of ours: leave it
  std::string line;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
    std::string owner;
    std::ifstream(dir / kLock) >> owner;
    const uint64_t bytes = folder_bytes(dir);
    const bool gone = remove_folder(dir);
    line = "offload_nvme: removed " + std::to_string(bytes) + " bytes left in " + dir.string() +
           " by a job that ended without cleaning up (pid " + (owner.empty() ? "?" : owner) + ")" +
           (gone ? "" : ", but not all of it: remove the folder by hand");
  }
  ::close(fd);
  return line;
}

}  // namespace

JobDir::JobDir(const std::string& nvme_path, const std::function<void(const std::string&)>& report) : root_(nvme_path) {
  if (nvme_path.empty())
    throw PluginError(ZHOST_ERR_CONFIG,
                      "offload_nvme: nvme_path is empty; set zero.offload_optimizer.nvme_path (or offload_param's) to "
                      "a folder on the NVMe disk");
  std::error_code ec;
  if (!fs::is_directory(nvme_path, ec))
    throw PluginError(ZHOST_ERR_CONFIG, "offload_nvme: nvme_path " + nvme_path + " is not a folder; create it");
  if (::access(nvme_path.c_str(), W_OK | X_OK) != 0)
    throw PluginError(ZHOST_ERR_CONFIG,
                      "offload_nvme: nvme_path " + nvme_path + " is not writable: " + errno_text(errno));

  for (const auto& entry : fs::directory_iterator(nvme_path, ec)) {
    if (entry.path().filename().string().rfind(kPrefix, 0) != 0) continue;
    std::string line = sweep_one(entry.path());
    if (!line.empty()) report(line);
  }

  static std::atomic<int> counter{0};
  const std::string name = std::string(kPrefix) + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  const fs::path hidden = fs::path(nvme_path) / ("." + name), final_path = fs::path(nvme_path) / name;
  remove_folder(hidden);
  if (!fs::create_directory(hidden, ec))
    throw PluginError(ZHOST_ERR_IO, "offload_nvme: cannot create " + hidden.string() + ": " + ec.message());
  lock_fd_ = ::open((hidden / kLock).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX) != 0) {
    const int e = errno;
    remove_folder(hidden);
    throw PluginError(ZHOST_ERR_IO, "offload_nvme: cannot lock " + (hidden / kLock).string() + ": " + errno_text(e));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::write(lock_fd_, pid.data(), pid.size()) != static_cast<ssize_t>(pid.size()) ||
      (fs::rename(hidden, final_path, ec), ec)) {
    ::close(lock_fd_);
    remove_folder(hidden);
    throw PluginError(ZHOST_ERR_IO, "offload_nvme: cannot set up " + final_path.string());
  }
  path_ = final_path.string();
}

JobDir::~JobDir() {
  remove_folder(path_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

uint64_t JobDir::free_bytes() const {
  struct statvfs st {};
  if (::statvfs(path_.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

}  // namespace zhost::nvme_tier
