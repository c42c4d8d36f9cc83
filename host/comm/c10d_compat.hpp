// host/comm/c10d_compat.hpp: private to host/comm. Every difference between LibTorch 1.13 and 2.x in
// c10d's C++ API lives here, keyed on TORCH_VERSION_MAJOR; NCCL only when ZHOST_WITH_CUDA is defined.
//
// 1.13: ProcessGroupGloo/NCCL derive from c10d::ProcessGroup and implement the collectives there.
// 2.x:  they derive from c10d::Backend (ProcessGroup became a dispatcher in front of backends); the
//       collective methods on Backend have the same names and signatures as 1.13's ProcessGroup.
#pragma once

// The backends' headers are guarded by the macros LibTorch's own CMake targets export (USE_C10D_GLOO, and
// USE_C10D_NCCL from torch_cuda); define them where a build did not pass them on.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif
#if defined(ZHOST_WITH_CUDA) && !defined(USE_C10D_NCCL)
#define USE_C10D_NCCL
#endif

#include <torch/version.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#ifdef ZHOST_WITH_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <c10/util/Exception.h>

#include <chrono>
#include <memory>
#include <string>

namespace zhost::comm::compat {

#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif
using BackendPtr = c10::intrusive_ptr<BackendBase>;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using StorePtr = c10::intrusive_ptr<c10d::Store>;

inline StorePtr make_tcp_store(const std::string& host, int port, bool is_server, int world_size,
                               std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = is_server;
  options.numWorkers = static_cast<std::size_t>(world_size);
  options.waitWorkers = false;  // zhost's own join step names the ranks that are missing
  options.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(host, options);
}

// A TCPStore client waits for the server's reply without a deadline, except that wait() leaves its timeout on
// the connection's socket (SO_RCVTIMEO) for every later reply. Waiting for no keys returns at once and sets
// that deadline: afterwards a reply that does not come within `deadline` throws ("Socket Timeout") instead of
// blocking while the process hosting the store is stopped or frozen (tests/comm/failure_test.cpp, StoppedRank...).
inline void bound_replies(const StorePtr& store, std::chrono::milliseconds deadline) { store->wait({}, deadline); }

inline StorePtr make_prefix_store(const std::string& prefix, const StorePtr& store) {
  return c10::make_intrusive<c10d::PrefixStore>(prefix, store);
}

inline BackendPtr make_gloo(const StorePtr& store, int rank, int size, std::chrono::milliseconds timeout,
                            std::shared_ptr<::gloo::transport::Device> device) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(std::move(device));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

inline std::shared_ptr<::gloo::transport::Device> gloo_device_for_interface(const std::string& interface) {
  return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
}
inline std::shared_ptr<::gloo::transport::Device> gloo_device_for_hostname(const std::string& hostname) {
  return c10d::ProcessGroupGloo::createDeviceForHostname(hostname);
}
inline std::shared_ptr<::gloo::transport::Device> gloo_default_device() {
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

#ifdef ZHOST_WITH_CUDA
inline BackendPtr make_nccl(const StorePtr& store, int rank, int size, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}
#endif

// The first line of an exception's message, without c10's backtrace or Gloo's "[file.cc:123] " prefix.
inline std::string describe_exception(const std::exception& error) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  std::string text = c10_error ? c10_error->what_without_backtrace() : error.what();
  text = text.substr(0, text.find('\n'));
  const size_t location_end = text.find("] ");
  if (!text.empty() && text.front() == '[' && location_end != std::string::npos) text.erase(0, location_end + 2);
  return text;
}

}  // namespace zhost::comm::compat
