// host/services/device_copies.hpp: the host side of zhost_copy_services (zhost/host.h): copies between host
// memory and the training device's memory, for offload tiers and partition plugins, and page-locked host
// buffers that such copies can overlap from.
//
// Three ways to copy, chosen once per job from the training device:
//   CUDA       the copy runs on a copy stream of its own (one for each direction), after an event
//              recorded on the compute stream at start(); wait() synchronises with an event recorded after
//              it, order_compute_after() makes the compute stream wait for that event. Pinned buffers of
//              the host-services table come from LibTorch's pinned-memory allocator.
//   immediate  training in host memory: start() copies at once and hands back no copy.
//   deferred   debug.deferred_device_copies = true, CPU jobs only, for tests: the host claims separate device
//              memory, so that plugins take the staged path they take on a GPU, and runs each copy as late
//              as the contract allows (at order_compute_after() or wait()). A plugin that reads a
//              destination before waiting, or overwrites a source too early, then computes with stale
//              values, and equality tests catch it. Copies never waited for are reported at the end.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

#include "zhost/host.h"

namespace zhost::engine {
class TraceWriter;
}

namespace zhost {

class HostServices;

class DeviceCopies {
 public:
  // Serves copies for a job training on `device` through `services` (and, on CUDA, pinned buffers) until
  // destroyed; `deferred` (debug.deferred_device_copies) asks for the deferred mode, a usage error on CUDA.
  DeviceCopies(const at::Device& device, HostServices& services, bool deferred);
  ~DeviceCopies();
  DeviceCopies(const DeviceCopies&) = delete;
  DeviceCopies& operator=(const DeviceCopies&) = delete;
  // Records every copy from now on in `trace` (Note [Trace file]), or stops with nullptr.
  void set_trace(engine::TraceWriter* trace);

  struct State;

 private:
  std::unique_ptr<State> state_;
  HostServices& services_;
};

}  // namespace zhost
