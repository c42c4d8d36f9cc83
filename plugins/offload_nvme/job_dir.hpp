// plugins/offload_nvme/job_dir.hpp: the folder one tier instance owns under nvme_path, and the sweep of
// folders that dead jobs left behind (Note [Job folders]).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace zhost::nvme_tier {

// Note [Job folders]: each tier instance writes only inside NVME_PATH/zhost-nvme-<pid>-<n>/, which holds
// an `owner.lock` file that the instance keeps open under an exclusive flock(2) for its whole life. The
// kernel drops that lock when the process ends, however it ends (SIGKILL included), so a folder whose lock
// can be taken belongs to a dead job: every instance sweeps nvme_path at start, removes such folders and
// reports what it removed. The folder is made under a hidden name and renamed once locked, so a sweep
// never sees an unlocked live folder. The instance removes its own folder in its destructor (normal exit
// and failures that unwind); a killed job's folder goes at the next start on the same nvme_path.
class JobDir {
 public:
  // Checks `nvme_path` (a writable folder), sweeps dead jobs' folders (report(message) for each), and
  // makes this instance's folder.
  JobDir(const std::string& nvme_path, const std::function<void(const std::string&)>& report);
  ~JobDir();  // removes the folder and everything in it
  JobDir(const JobDir&) = delete;
  JobDir& operator=(const JobDir&) = delete;

  const std::string& root() const { return root_; }
  const std::string& path() const { return path_; }
  // Bytes an unprivileged writer can still put on the folder's file system.
  uint64_t free_bytes() const;

 private:
  std::string root_;  // nvme_path
  std::string path_;  // this instance's folder
  int lock_fd_ = -1;
};

}  // namespace zhost::nvme_tier
