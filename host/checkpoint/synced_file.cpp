// host/checkpoint/synced_file.cpp: durable writes with POSIX calls.
#include "host/checkpoint/synced_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "host/core/error.hpp"

namespace zhost::checkpoint {

std::string describe_errno(int errno_value) { return errno_value == ENOSPC ? "disk full" : std::strerror(errno_value); }

void fsync_fd(int fd, const std::string& path) {
  if (::fsync(fd) != 0) fail("cannot sync '{}' to disk: {}", path, describe_errno(errno));
}

void write_file_synced(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create '{}': {}", path, describe_errno(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int saved = errno;
      ::close(fd);
      fail("cannot write '{}': {}", path, describe_errno(n < 0 ? saved : ENOSPC));
    }
    done += static_cast<size_t>(n);
  }
  const int sync_result = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (sync_result != 0) fail("cannot sync '{}' to disk: {}", path, describe_errno(saved));
}

void fsync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot open the folder '{}' to sync it: {}", path, describe_errno(errno));
  const int result = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (result != 0) fail("cannot sync the folder '{}' to disk: {}", path, describe_errno(saved));
}

std::string read_small_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_usage("{} '{}' is missing or unreadable: the checkpoint is incomplete", what, path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace zhost::checkpoint
