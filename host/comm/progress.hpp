// host/comm/progress.hpp: private to host/comm. Tracks how far each rank got, so that a failed or slow
// collective can name the ranks that never arrived and the ranks that stopped responding.
//
// Scheme (cheap on the hot path): starting a collective only bumps an atomic sequence number. A background
// thread publishes each group's latest number to the store ("<prefix>progress/<group rank>") when it
// changed, every kPublishInterval, and a per-process heartbeat ("zhost/alive/<global rank>") every
// kHeartbeatInterval. After a failure, diagnose() reads both: members whose published number is below the
// failed collective's never arrived; members whose heartbeat does not move over a few intervals are gone.
// A rank that arrived less than kPublishInterval before the deadline may be reported missing; deadlines
// are seconds, the interval 100 ms.
//
// The store lives in rank 0's process. The tracker's connection to it gets a reply deadline
// (kStoreAnswerDeadline): when rank 0 is stopped or frozen, diagnose() reports that rank 0 does not answer
// instead of waiting for it, and the destructor leaves a publisher stuck on the frozen store behind rather
// than waiting for it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "host/comm/c10d_compat.hpp"

namespace zhost::comm::detail {

inline constexpr std::chrono::milliseconds kPublishInterval{100};
inline constexpr std::chrono::milliseconds kHeartbeatInterval{200};
// How long a store operation of the tracker may wait for rank 0's answer.
inline constexpr std::chrono::milliseconds kStoreAnswerDeadline{3000};

struct GroupProgress {
  GroupProgress(std::string key_prefix_, int group_rank_)
      : key_prefix(std::move(key_prefix_)), group_rank(group_rank_) {}
  const std::string key_prefix;  // "zhost/g/<group name>/"
  const int group_rank;
  std::atomic<uint64_t> entered{0};  // sequence number of the last collective this rank started
  std::atomic<int> last_kind{-1};    // its CollectiveKind
  uint64_t published = 0;            // owned by the publisher thread
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
  // Two connections of its own to the rendezvous store, one to publish and one to ask (never queued behind
  // another call, nor behind a publisher stuck on a frozen store); their replies get kStoreAnswerDeadline.
  ProgressTracker(compat::StorePtr publish_store, compat::StorePtr ask_store, int global_rank);
  ~ProgressTracker();
  ProgressTracker(const ProgressTracker&) = delete;
  ProgressTracker& operator=(const ProgressTracker&) = delete;

  void add(std::shared_ptr<GroupProgress> group);
  // Reads every member's progress and heartbeat (takes a few heartbeat intervals; at most about
  // kStoreAnswerDeadline more when the store does not answer). Once the store failed to answer, later calls
  // report that at once.
  PeerReport diagnose(const GroupProgress& group, const std::vector<int>& global_ranks);
  // The store did not answer a call (empty while it answers).
  std::string store_error() const;
  // The connection it asks on, for the job's last words to the store (Job::say_goodbye).
  const compat::StorePtr& store() const { return store_; }

 private:
  struct Publisher;  // the background thread's state, shared with it (see ~ProgressTracker)

  compat::StorePtr store_;
  std::shared_ptr<Publisher> publisher_;
};

}  // namespace zhost::comm::detail
