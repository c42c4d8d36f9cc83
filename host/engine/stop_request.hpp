// host/engine/stop_request.hpp: SIGTERM and SIGINT as a request to stop at the next step boundary.
//
// Note [Stop at a step boundary]: a job that saves checkpoints (checkpoint.interval or checkpoint.at_end) and
// keeps checkpoint.on_signal catches SIGTERM and SIGINT in every rank while it trains. The handler only sets
// a flag; each step's loss all-reduce carries the flag, so all ranks see a request made to any of them at the
// same step, save a checkpoint there and stop (exit code 0 for the ranks). zhost's launcher forwards the
// signal to its ranks and, for such a job, waits comm.timeout_s for them before it kills them; its own exit
// code still says it was interrupted (128 + the signal).
#pragma once

namespace zhost::engine {

// Catches SIGTERM and SIGINT while alive (at most one at a time); the previous handlers come back after.
class StopRequest {
 public:
  StopRequest();
  ~StopRequest();
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  // Whether a signal arrived, and its name ("SIGTERM"; "no signal" before one).
  static bool requested();
  static const char* signal_name();
};

}  // namespace zhost::engine
