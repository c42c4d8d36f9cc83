// host/comm/progress.cpp: the progress/heartbeat publisher and the diagnosis of a failed or slow collective.
#include "host/comm/progress.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

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

// Shared by the tracker and its thread: a thread blocked on a frozen store can be left behind with it.
struct ProgressTracker::Publisher {
  Publisher(compat::StorePtr store_, int global_rank)
      : store(std::move(store_)), heartbeat(heartbeat_key(global_rank)) {}

  const compat::StorePtr store;
  const std::string heartbeat;
  uint64_t beats = 0;  // the publisher's own (and the constructor's, before it starts)
  std::mutex mutex;    // guards everything below
  std::condition_variable wake;
  std::vector<std::weak_ptr<GroupProgress>> groups;
  bool stop = false;
  bool finished = false;
  std::string store_error;  // the first failure to reach the store

  void beat() { store->set(heartbeat, to_bytes(std::to_string(++beats))); }

  void publish_changes(const std::vector<std::shared_ptr<GroupProgress>>& live) {
    for (const std::shared_ptr<GroupProgress>& group : live) {
      const uint64_t entered = group->entered.load();
      if (entered == group->published) continue;
      const std::string value = fmt::format("{} {}", entered, group->last_kind.load());
      store->set(progress_key(group->key_prefix, group->group_rank), to_bytes(value));
      group->published = entered;
    }
  }

  // The store calls run without the lock: a call stuck on a frozen store must not keep the destructor out.
  void run() {
    auto next_beat = std::chrono::steady_clock::now() + kHeartbeatInterval;
    std::unique_lock<std::mutex> lock(mutex);
    while (!wake.wait_for(lock, kPublishInterval, [this] { return stop; })) {
      std::vector<std::shared_ptr<GroupProgress>> live;
      for (auto it = groups.begin(); it != groups.end();) {
        if (auto group = it->lock()) {
          live.push_back(std::move(group));
          ++it;
        } else {
          it = groups.erase(it);
        }
      }
      lock.unlock();
      std::string error;
      try {
        publish_changes(live);
        if (std::chrono::steady_clock::now() >= next_beat) {
          beat();
          next_beat += kHeartbeatInterval;
        }
      } catch (const std::exception& e) {
        error = compat::describe_exception(e);
      }
      lock.lock();
      // The store lives in rank 0's process; once it is gone there is nothing to publish to. The failing
      // collective reports the cause; log once for context.
      if (!error.empty() && store_error.empty()) {
        spdlog::debug("comm: cannot publish progress to the store: {}", error);
        store_error = error;
      }
    }
    finished = true;
    wake.notify_all();
  }
};

ProgressTracker::ProgressTracker(compat::StorePtr publish_store, compat::StorePtr ask_store, int global_rank)
    : store_(std::move(ask_store)), publisher_(std::make_shared<Publisher>(std::move(publish_store), global_rank)) {
  compat::bound_replies(store_, kStoreAnswerDeadline);
  compat::bound_replies(publisher_->store, kStoreAnswerDeadline);
  publisher_->beat();  // the key exists before any collective can fail
  std::thread([publisher = publisher_] { publisher->run(); }).detach();
}

ProgressTracker::~ProgressTracker() {
  std::unique_lock<std::mutex> lock(publisher_->mutex);
  publisher_->stop = true;
  publisher_->wake.notify_all();
  // A set() to a store whose host is stopped blocks once the socket's buffers are full; such a thread stays
  // behind (it holds its own reference to the state) and ends with the process.
  if (!publisher_->wake.wait_for(lock, kStoreAnswerDeadline, [this] { return publisher_->finished; })) {
    spdlog::debug("comm: the progress publisher is stuck on the store; leaving it behind");
  }
}

void ProgressTracker::add(std::shared_ptr<GroupProgress> group) {
  std::lock_guard<std::mutex> lock(publisher_->mutex);
  publisher_->groups.push_back(std::move(group));
}

std::string ProgressTracker::store_error() const {
  std::lock_guard<std::mutex> lock(publisher_->mutex);
  return publisher_->store_error;
}

PeerReport ProgressTracker::diagnose(const GroupProgress& group, const std::vector<int>& global_ranks) {
  PeerReport report;
  report.members.resize(global_ranks.size());
  report.store_error = store_error();
  if (!report.store_error.empty()) return report;  // a connection that timed out once is out of step
  const auto read_counter = [this](const std::string& key) -> uint64_t {
    if (!store_->check({key})) return 0;
    return std::stoull(to_text(store_->get(key)));
  };
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
    report.store_error = compat::describe_exception(e);
    std::lock_guard<std::mutex> lock(publisher_->mutex);
    if (publisher_->store_error.empty()) publisher_->store_error = report.store_error;
  }
  return report;
}

}  // namespace zhost::comm::detail
