// host/comm/progress.hpp: private to host/comm. Tracks how far each rank got, so that a failed collective
// can name the ranks that never arrived and the ranks that stopped responding.
//
// Scheme (cheap on the hot path): starting a collective only bumps an atomic sequence number. A background
// thread publishes each group's latest number to the store ("<prefix>progress/<group rank>") when it
// changed, every kPublishInterval, and a per-process heartbeat ("zhost/alive/<global rank>") every
// kHeartbeatInterval. After a failure, diagnose() reads both: members whose published number is below the
// failed collective's never arrived; members whose heartbeat does not move over a few intervals are gone.
// A rank that arrived less than kPublishInterval before the deadline may be reported missing; deadlines
// are seconds, the interval 100 ms.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "host/comm/c10d_compat.hpp"

namespace zhost::comm::detail {

inline constexpr std::chrono::milliseconds kPublishInterval{100};
inline constexpr std::chrono::milliseconds kHeartbeatInterval{200};

struct GroupProgress {
  GroupProgress(std::string key_prefix_, int group_rank_)
      : key_prefix(std::move(key_prefix_)), group_rank(group_rank_) {}
  const std::string key_prefix;          // "zhost/g/<group name>/"
  const int group_rank;
  std::atomic<uint64_t> entered{0};      // sequence number of the last collective this rank started
  std::atomic<int> last_kind{-1};        // its CollectiveKind
  uint64_t published = 0;                // owned by the tracker
};

struct MemberProgress {
  uint64_t last_seq = 0;  // 0: never started a collective in this group
  std::string last_kind;  // "" when unknown
  bool responding = true;
};

struct PeerReport {
  std::vector<MemberProgress> members;  // by group rank
  std::string store_error;              // set when the store could not be asked (rank 0 may be gone)
};

class ProgressTracker {
 public:
  ProgressTracker(compat::StorePtr store, int global_rank);
  ~ProgressTracker();
  ProgressTracker(const ProgressTracker&) = delete;
  ProgressTracker& operator=(const ProgressTracker&) = delete;

  void add(std::shared_ptr<GroupProgress> group);
  // Reads every member's progress and heartbeat (takes a few heartbeat intervals).
  PeerReport diagnose(const GroupProgress& group, const std::vector<int>& global_ranks);

 private:
  void run();
  void publish_changes();
  void beat();
  uint64_t read_counter(const std::string& key);

  compat::StorePtr store_;
  const std::string heartbeat_key_;
  uint64_t heartbeats_ = 0;
  std::mutex mutex_;  // guards groups_ and stop_ (the store is thread-safe)
  std::condition_variable wake_;
  std::vector<std::weak_ptr<GroupProgress>> groups_;
  bool stop_ = false;
  bool store_failed_logged_ = false;
  std::thread thread_;
};

}  // namespace zhost::comm::detail
