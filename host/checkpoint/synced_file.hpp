// host/checkpoint/synced_file.hpp: files and directories made durable (fsync) before a checkpoint counts as
// written: the primitives of the directory protocol (checkpoint_dir.hpp).
#pragma once

#include <string>

namespace zhost::checkpoint {

// Writes `text` to `path` (created or truncated) and fsyncs it. Fails (zhost::Error naming the file, "disk
// full" for ENOSPC) on any error.
void write_file_synced(const std::string& path, const std::string& text);
// Fsyncs an open file descriptor, or a directory by path (so that entries created or renamed in it persist).
void fsync_fd(int fd, const std::string& path);
void fsync_directory(const std::string& path);
// Reads a whole (small) file; fails with a UsageError naming `what` and the file when it cannot.
std::string read_small_file(const std::string& path, const std::string& what);
// "disk full" for ENOSPC, else strerror(errno_value).
std::string describe_errno(int errno_value);

}  // namespace zhost::checkpoint
