// host/engine/stop_request.cpp: Note [Stop at a step boundary]: an async-signal-safe flag.
#include "host/engine/stop_request.hpp"

#include <signal.h>

#include <atomic>

#include "host/core/error.hpp"

namespace zhost::engine {
namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_installed{false};
struct sigaction g_previous_term {
}, g_previous_int{};

extern "C" void note_stop_signal(int signal) { g_signal.store(signal); }

}  // namespace

StopRequest::StopRequest() {
  ZHOST_ASSERT(!g_installed.exchange(true));
  g_signal.store(0);
  struct sigaction action {};
  action.sa_handler = note_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &action, &g_previous_term);
  ::sigaction(SIGINT, &action, &g_previous_int);
}

StopRequest::~StopRequest() {
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  g_installed.store(false);
}

bool StopRequest::requested() { return g_signal.load() != 0; }

const char* StopRequest::signal_name() {
  switch (g_signal.load()) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "no signal";
  }
}

}  // namespace zhost::engine
