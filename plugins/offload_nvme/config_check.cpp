// plugins/offload_nvme/config_check.cpp: Note [NVMe config check].
#include "plugins/offload_nvme/config_check.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace zhost::nvme_tier {
namespace {

// Note [NVMe config check]: before any rank starts (`zhost config check`, `zhost run`; Note [Plugin config
// checks] in the host), each folder this job would write is checked: the folder of each storing role the job
// gives the tier must be set, and every folder that is set (also one of a tier the job may only swap in) must
// be a folder this user can write whose file system takes O_DIRECT (one empty file is created there and
// removed). Then, when the host says how many bytes each role will keep (Note [Storage space at start]), the
// roles' folders on one file system are added up and compared with its free space, so that a job that could
// never fit stops before it writes anything.

struct Folder {
  const char* key;   // the nvme_path key
  std::string path;  // its value
  uint64_t bytes;    // what this machine's ranks will keep there; 0: not known
};

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text.size() > 200 ? text.substr(0, 200) + "..." : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string mib(uint64_t bytes) {
  char text[64];
  if (bytes >= (1ull << 30))
    std::snprintf(text, sizeof(text), "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  else
    std::snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

// The part of the host's "why chosen" that names `prefix`'s keys ("zero.offload_param.device = \"nvme\""),
// else all of it.
std::string reason_for(const sdk::ConfigCheck& check, const std::string& prefix) {
  const std::string reasons = check.chosen_for();
  size_t start = 0;
  while (start < reasons.size()) {
    size_t end = reasons.find("; ", start);
    if (end == std::string::npos) end = reasons.size();
    if (reasons.compare(start, prefix.size(), prefix) == 0) return reasons.substr(start, end - start);
    start = end + 2;
  }
  return reasons;
}

void check_folder(const sdk::ConfigCheck& check, const char* key, const std::string& path) {
  const std::string shown = quoted(path);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    check.refuse(key, std::string(key) + " = " + shown + " is not a folder; create it or fix the path");
  if (::access(path.c_str(), W_OK | X_OK) != 0)
    check.refuse(key, std::string(key) + " = " + shown +
                          " is not writable by this user; fix its permissions or choose another folder");
  // The tier writes with O_DIRECT: try it once with an empty file.
  const std::string probe = path + "/.zhost-nvme-check-" + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0)
    check.refuse(key, std::string(key) + " = " + shown + ": cannot create a file there for direct I/O (O_DIRECT): " +
                          std::strerror(errno) + "; choose a folder on a disk");
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace

void check_config(const sdk::ConfigCheck& check) {
  const zhost_config_check_args& args = check.args();
  const struct {
    zhost_tier_role role;
    const char* key;
    const char* prefix;
    uint64_t bytes;
  } roles[] = {
      {ZHOST_TIER_FOR_OPTIMIZER_STORAGE, "zero.offload_optimizer.nvme_path", "zero.offload_optimizer.",
       args.optimizer_storage_bytes},
      {ZHOST_TIER_FOR_PARAMS, "zero.offload_param.nvme_path", "zero.offload_param.", args.params_storage_bytes}};
  std::vector<Folder> used;
  for (const auto& role : roles) {
    const std::string path = check.host().config_string(role.key);
    const bool serves = check.serves(role.role);
    if (path.empty()) {
      if (serves)
        check.refuse(nullptr,
                     reason_for(check, role.prefix) + " needs " + role.key + ", a folder on the NVMe disk; set it");
      continue;
    }
    check_folder(check, role.key, path);
    if (serves && role.bytes > 0) used.push_back({role.key, path, role.bytes});
  }
  // Folders on one file system share its free space.
  std::map<dev_t, std::vector<Folder>> by_disk;
  for (const Folder& folder : used) {
    struct stat st {};
    if (::stat(folder.path.c_str(), &st) == 0) by_disk[st.st_dev].push_back(folder);
  }
  for (const auto& [device, folders] : by_disk) {
    struct statvfs vfs {};
    if (::statvfs(folders.front().path.c_str(), &vfs) != 0) continue;
    const uint64_t available = static_cast<uint64_t>(vfs.f_bavail) * static_cast<uint64_t>(vfs.f_frsize);
    uint64_t needed = 0;
    std::string parts;
    for (const Folder& folder : folders) {
      needed += folder.bytes;
      parts += (parts.empty() ? "" : " and ") + mib(folder.bytes) + " for " + folder.key + " (" + folder.path + ")";
    }
    if (needed <= available) continue;
    check.refuse(folders.front().key, "the model states on NVMe alone need " + mib(needed) + " on the file system of " +
                                          folders.front().path + " (" + parts + "; " +
                                          std::to_string(args.local_ranks) + " rank(s) here of " +
                                          std::to_string(args.world_size) + "), but it has " + mib(available) +
                                          " free; free space there, point the nvme_path keys at a larger disk, or set "
                                          "run.memory_check = false to start anyway");
  }
}

}  // namespace zhost::nvme_tier
