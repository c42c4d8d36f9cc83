// plugins/offload_nvme/op_queue.hpp: the NVMe tier's asynchrony. store/load/drop become operations run in
// submission order by one worker thread (so a load after a store of the same key reads what was stored),
// each with an event the caller completes with wait_event/test_event (docs/abi.md "Events"). The caller's
// buffer is borrowed until then, as the ABI says.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "zhost/core.h"
#include "zhost/zhost.h"

// The ABI's opaque event type, defined by this tier: one operation's completion.
struct zhost_tier_event {
  bool done = false;
  zhost_status_code code = ZHOST_OK;
  std::string error;
};

namespace zhost::nvme_tier {

class OpQueue {
 public:
  OpQueue();
  ~OpQueue();  // runs what is queued, then joins the worker; frees events nobody completed
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // Queues `op`; returns its event (owned by the caller until completed), or NULL when `with_event` is false
  // (an operation that cannot fail, such as a drop).
  zhost_tier_event* submit(std::function<void()> op, bool with_event = true);
  // Blocks until the event's operation finished, frees the event, and throws its failure if it failed.
  void wait(zhost_tier_event* event);
  // Like wait() when the operation finished (returns true); false while it runs.
  bool test(zhost_tier_event* event);
  // Blocks until the event's operation finished; the event stays the caller's.
  void block_until_done(zhost_tier_event* event);
  // Blocks until every queued operation finished (for export_state, which reads on the caller's thread).
  void drain();

 private:
  void work();
  void check_owned(zhost_tier_event* event) const;
  void complete(zhost_tier_event* event);

  std::mutex mutex_;
  std::condition_variable todo_cv_, done_cv_;
  std::deque<std::pair<std::function<void()>, zhost_tier_event*>> todo_;
  std::set<zhost_tier_event*> live_;  // handed out, not yet completed by the caller
  bool busy_ = false, stopping_ = false;
  std::thread worker_;
};

}  // namespace zhost::nvme_tier
