// host/engine/rank_agreement.hpp: every rank learns whether any rank failed a collective phase (a checkpoint
// save, a storage swap), and why.
#pragma once

#include <exception>
#include <string>

#include "host/comm/comm.hpp"

namespace zhost::engine {

// Collective. `error` is this rank's failure ("" when it succeeded). Returns "" when no rank failed; else this
// rank's own error when it failed, or "rank R: <its error>" of the lowest failing rank R (up to 2 KiB of it), so
// that whichever rank's exit is reported first names the real cause.
std::string agreed_failure(comm::Comm& world, const std::string& error);

// Runs `body`; returns "" or what it threw, the error to agree on.
template <typename Body>
std::string capture_error(Body&& body) {
  try {
    body();
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace zhost::engine
