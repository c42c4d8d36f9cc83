// host/checkpoint/checkpoint_dir.hpp: where checkpoints live and how one becomes visible atomically.
//
// Note [Checkpoint atomicity]: under the root folder (checkpoint.dir) every checkpoint is a folder
// step-NNNNNNNN. It is written as .tmp-step-NNNNNNNN: each rank writes and fsyncs its files, then rank 0 writes
// and fsyncs checkpoint.json, fsyncs the folder, renames it to step-NNNNNNNN and fsyncs the root; only then is
// ROOT/latest (the folder's name) replaced, through latest.tmp renamed over it. A crash at any point leaves
// `latest` naming a complete checkpoint (or no `latest` before the first); staging folders left by a crash are
// removed by the next save. Older checkpoints beyond checkpoint.keep_last are removed after `latest` moved on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zhost::checkpoint {

std::string step_dir_name(int64_t step);  // "step-00000012"

// The staging folder of `step`'s checkpoint: ROOT/.tmp-step-NNNNNNNN.
std::string staging_path(const std::string& root, int64_t step);
// Creates ROOT (if needed) and checks that a file can be created in it; fails (zhost::Error) saying what to set.
void check_writable(const std::string& root);
// Creates ROOT (if needed) and an empty staging folder for `step`, removing stale staging folders first.
// Returns the staging folder's path.
std::string begin_staging(const std::string& root, int64_t step);
// Publishes the staging folder of `step` (its files already synced): rename, sync, then `latest`.
// Returns the published folder's path.
std::string publish(const std::string& root, int64_t step);
// Removes the staging folder of `step` after a failed save (no error if it is gone).
void discard_staging(const std::string& root, int64_t step);
// Removes the oldest step-* folders so that `keep_last` remain (never the one `latest` names).
void prune(const std::string& root, int64_t keep_last);
// The published checkpoints under ROOT, oldest first (folder paths).
std::vector<std::string> list_checkpoints(const std::string& root);

// What `--resume SPEC` names: "latest" (ROOT/latest), a checkpoint folder, or a root holding `latest`.
// Fails with a UsageError saying what is missing.
std::string resolve_checkpoint(const std::string& spec, const std::string& root);

}  // namespace zhost::checkpoint
