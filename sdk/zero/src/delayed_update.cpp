// sdk/zero/src/delayed_update.cpp: the background optimizer step of the delayed parameter update
// (Note [Delayed parameter update] in the header).
#include "zhost/zero/delayed_update.hpp"

#include <utility>

#include "zhost/cpp/plugin.hpp"

namespace zhost::zero {

DelayedUpdate::~DelayedUpdate() {
  if (thread_.joinable()) thread_.join();
}

void DelayedUpdate::start(std::function<void()> step) {
  if (thread_.joinable())
    throw sdk::PluginError(ZHOST_ERR_INTERNAL, "delayed update: a step started while the previous one runs");
  failure_ = nullptr;
  thread_ = std::thread([this, step = std::move(step)] {
    try {
      step();
    } catch (...) {
      failure_ = std::current_exception();
    }
  });
}

bool DelayedUpdate::wait() {
  if (!thread_.joinable()) return false;
  thread_.join();
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
  return true;
}

}  // namespace zhost::zero
