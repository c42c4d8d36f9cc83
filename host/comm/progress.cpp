// host/comm/progress.cpp: the progress/heartbeat publisher and the post-failure diagnosis.
#include "host/comm/progress.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "host/comm/traffic.hpp"

namespace zhost::comm::detail {

namespace {

std::vector<uint8_t> to_bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string to_text(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

std::string kind_name(int kind) {
  return kind < 0 || kind >= kCollectiveKinds ? "" : to_string(static_cast<CollectiveKind>(kind));
}

std::string progress_key(const std::string& prefix, int group_rank) {
  return fmt::format("{}progress/{}", prefix, group_rank);
}
std::string heartbeat_key(int global_rank) { return fmt::format("zhost/alive/{}", global_rank); }

}  // namespace

ProgressTracker::ProgressTracker(compat::StorePtr store, int global_rank)
    : store_(std::move(store)), heartbeat_key_(heartbeat_key(global_rank)) {
  beat();  // the key exists before any collective can fail
  thread_ = std::thread([this] { run(); });
}

ProgressTracker::~ProgressTracker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void ProgressTracker::add(std::shared_ptr<GroupProgress> group) {
  std::lock_guard<std::mutex> lock(mutex_);
  groups_.push_back(std::move(group));
}

void ProgressTracker::run() {
  auto next_beat = std::chrono::steady_clock::now() + kHeartbeatInterval;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, kPublishInterval, [this] { return stop_; })) {
    try {
      publish_changes();
      if (std::chrono::steady_clock::now() >= next_beat) {
        beat();
        next_beat += kHeartbeatInterval;
      }
    } catch (const std::exception& e) {
      // The store lives in rank 0's process; once it is gone there is nothing to publish to. The failing
      // collective reports the cause; log once for context.
      if (!store_failed_logged_) spdlog::debug("comm: cannot publish progress to the store: {}", e.what());
      store_failed_logged_ = true;
    }
  }
}

void ProgressTracker::publish_changes() {
  for (auto it = groups_.begin(); it != groups_.end();) {
    std::shared_ptr<GroupProgress> group = it->lock();
    if (!group) {
      it = groups_.erase(it);
      continue;
    }
    const uint64_t entered = group->entered.load();
    if (entered != group->published) {
      const std::string value = fmt::format("{} {}", entered, group->last_kind.load());
      store_->set(progress_key(group->key_prefix, group->group_rank), to_bytes(value));
      group->published = entered;
    }
    ++it;
  }
}

void ProgressTracker::beat() { store_->set(heartbeat_key_, to_bytes(std::to_string(++heartbeats_))); }

uint64_t ProgressTracker::read_counter(const std::string& key) {
  if (!store_->check({key})) return 0;
  return std::stoull(to_text(store_->get(key)));
}

PeerReport ProgressTracker::diagnose(const GroupProgress& group, const std::vector<int>& global_ranks) {
  PeerReport report;
  report.members.resize(global_ranks.size());
  try {
    std::vector<uint64_t> first_beats(global_ranks.size());
    for (size_t member = 0; member < global_ranks.size(); ++member) {
      const std::string key = progress_key(group.key_prefix, static_cast<int>(member));
      if (static_cast<int>(member) != group.group_rank && store_->check({key})) {
        std::istringstream value(to_text(store_->get(key)));
        int kind = -1;
        value >> report.members[member].last_seq >> kind;
        report.members[member].last_kind = kind_name(kind);
      }
      first_beats[member] = read_counter(heartbeat_key(global_ranks[member]));
    }
    // A live process beats every kHeartbeatInterval; give it a few to move.
    std::this_thread::sleep_for(kHeartbeatInterval * 5 / 2);
    for (size_t member = 0; member < global_ranks.size(); ++member) {
      if (static_cast<int>(member) == group.group_rank) continue;
      report.members[member].responding = read_counter(heartbeat_key(global_ranks[member])) != first_beats[member];
    }
  } catch (const std::exception& e) {
    report.store_error = e.what();
  }
  return report;
}

}  // namespace zhost::comm::detail
