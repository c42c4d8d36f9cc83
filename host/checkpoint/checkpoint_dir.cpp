// host/checkpoint/checkpoint_dir.cpp: Note [Checkpoint atomicity] with std::filesystem and fsync.
#include "host/checkpoint/checkpoint_dir.hpp"

#include <algorithm>
#include <filesystem>

#include "host/checkpoint/synced_file.hpp"
#include "host/core/error.hpp"

namespace zhost::checkpoint {
namespace fs = std::filesystem;

namespace {
constexpr const char* kStagingPrefix = ".tmp-";
constexpr const char* kLatest = "latest";

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) text.pop_back();
  return text;
}

bool is_step_dir_name(const std::string& name) {
  return name.size() == 13 && name.rfind("step-", 0) == 0 &&
         std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}
}  // namespace

std::string step_dir_name(int64_t step) { return fmt::format("step-{:08d}", step); }

std::string staging_path(const std::string& root, int64_t step) {
  return (fs::path(root) / (kStagingPrefix + step_dir_name(step))).string();
}

void check_writable(const std::string& root) {
  std::error_code error;
  fs::create_directories(root, error);
  if (error) fail("cannot create '{}': {}; set checkpoint.dir to a folder this job can write", root, error.message());
  const std::string probe = (fs::path(root) / ".zhost-write-probe").string();
  try {
    write_file_synced(probe, "");
  } catch (const Error& e) {
    fail("{}; set checkpoint.dir to a folder this job can write", e.what());
  }
  fs::remove(probe, error);
}

std::string begin_staging(const std::string& root, int64_t step) {
  std::error_code error;
  fs::create_directories(root, error);
  if (error) fail("cannot create the checkpoint folder '{}': {}", root, error.message());
  for (const auto& entry : fs::directory_iterator(root, error))
    if (entry.path().filename().string().rfind(kStagingPrefix, 0) == 0) fs::remove_all(entry.path(), error);
  const fs::path staging = fs::path(root) / (kStagingPrefix + step_dir_name(step));
  fs::create_directory(staging, error);
  if (error) fail("cannot create the checkpoint staging folder '{}': {}", staging.string(), error.message());
  return staging.string();
}

std::string publish(const std::string& root, int64_t step) {
  const fs::path staging = fs::path(root) / (kStagingPrefix + step_dir_name(step));
  const fs::path final_dir = fs::path(root) / step_dir_name(step);
  fsync_directory(staging.string());
  std::error_code error;
  if (fs::exists(final_dir, error)) fs::remove_all(final_dir, error);  // a save of the same step again
  fs::rename(staging, final_dir, error);
  if (error) fail("cannot publish the checkpoint '{}': {}", final_dir.string(), error.message());
  fsync_directory(root);
  const fs::path latest_tmp = fs::path(root) / (std::string(kLatest) + ".tmp");
  write_file_synced(latest_tmp.string(), step_dir_name(step) + "\n");
  fs::rename(latest_tmp, fs::path(root) / kLatest, error);
  if (error) fail("cannot update '{}/latest': {}", root, error.message());
  fsync_directory(root);
  return final_dir.string();
}

void discard_staging(const std::string& root, int64_t step) {
  std::error_code error;
  fs::remove_all(fs::path(root) / (kStagingPrefix + step_dir_name(step)), error);
}

std::vector<std::string> list_checkpoints(const std::string& root) {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(root, error))
    if (entry.is_directory(error) && is_step_dir_name(entry.path().filename().string()))
      names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  for (std::string& name : names) name = (fs::path(root) / name).string();
  return names;
}

void prune(const std::string& root, int64_t keep_last) {
  std::error_code error;
  const std::string latest = trimmed(read_small_file((fs::path(root) / kLatest).string(), "the checkpoint pointer"));
  std::vector<std::string> all = list_checkpoints(root);
  const auto excess = static_cast<int64_t>(all.size()) - keep_last;
  for (int64_t i = 0; i < excess; ++i)
    if (fs::path(all[static_cast<size_t>(i)]).filename() != latest) fs::remove_all(all[static_cast<size_t>(i)], error);
}

std::string resolve_checkpoint(const std::string& spec, const std::string& root) {
  auto via_latest = [](const fs::path& dir) {
    const fs::path pointer = dir / kLatest;
    std::error_code error;
    if (!fs::is_regular_file(pointer, error))
      fail_usage("no checkpoint found: '{}' does not exist (no checkpoint was saved under '{}')", pointer.string(),
                 dir.string());
    const std::string name = trimmed(read_small_file(pointer.string(), "the checkpoint pointer"));
    if (!is_step_dir_name(name))
      fail_usage("'{}' is damaged: it names '{}', not a checkpoint folder", pointer.string(), name);
    return (dir / name).string();
  };
  if (spec == kLatest) return via_latest(fs::path(root));
  std::error_code error;
  // CKPT_DIR/latest, the pointer file itself (as DeepSpeed users name it): read as its folder would be.
  if (fs::path(spec).filename() == kLatest && fs::is_regular_file(spec, error)) {
    return via_latest(fs::path(spec).parent_path().empty() ? fs::path(".") : fs::path(spec).parent_path());
  }
  if (!fs::is_directory(spec, error))
    fail_usage(
        "no checkpoint at '{}': no such folder (give a checkpoint folder, its parent, its 'latest' file, or "
        "'latest')",
        spec);
  if (fs::is_regular_file(fs::path(spec) / kLatest, error)) return via_latest(fs::path(spec));
  return spec;
}

}  // namespace zhost::checkpoint
