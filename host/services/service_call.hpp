// host/services/service_call.hpp: how the C callbacks of a job's host services (parameter storage, copies)
// run their C++ bodies: with the state of the job the caller's context belongs to (HostServices::job_state,
// never a process global), refused while that job serves none, and every exception turned into a status
// that names the service and the call ("copies->start: ..."), so that nothing throws across the C ABI. A
// failed allocation keeps its code (ZHOST_ERR_OUT_OF_MEMORY), so the engine can say what the job needs.
#pragma once

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <exception>
#include <new>
#include <string>

#include "host/services/host_services.hpp"

namespace zhost {

inline zhost_status* service_error(zhost_status_code code, const std::string& message) {
  return HostServices::make_status(code, message);
}

// Runs body(*state) for `service`->`what`, where `state` is the State the job of `ctx` set for `slot`.
template <typename State, typename Body>
zhost_status* serve_call(zhost_host_context* ctx, JobService slot, const char* service, const char* what, Body&& body) {
  if (!ctx)
    return service_error(ZHOST_ERR_INVALID_ARGUMENT,
                         fmt::format("{}->{}: no host context (pass the one the host gave the plugin)", service, what));
  auto* state = static_cast<State*>(HostServices::job_state(ctx, slot));
  if (!state)
    return service_error(ZHOST_ERR_UNSUPPORTED, fmt::format("{}->{}: no training job is running", service, what));
  try {
    return body(*state);
  } catch (const std::bad_alloc&) {
    return service_error(ZHOST_ERR_OUT_OF_MEMORY, fmt::format("{}->{}: out of memory", service, what));
  } catch (const c10::OutOfMemoryError& e) {
    return service_error(ZHOST_ERR_OUT_OF_MEMORY, fmt::format("{}->{}: {}", service, what, e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return service_error(ZHOST_ERR_INTERNAL, fmt::format("{}->{}: {}", service, what, e.what()));
  }
}

}  // namespace zhost
