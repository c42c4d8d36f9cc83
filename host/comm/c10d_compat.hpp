// host/comm/c10d_compat.hpp: private to host/comm. zhost's one contact with c10d's C++ API (LibTorch 2.11 and
// later: ProcessGroupGloo/NCCL are c10d::Backend objects); NCCL only when ZHOST_WITH_CUDA is defined.
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

#include <arpa/inet.h>
#include <c10/util/Exception.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

namespace zhost::comm::compat {

using BackendBase = c10d::Backend;
using BackendPtr = c10::intrusive_ptr<BackendBase>;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using StorePtr = c10::intrusive_ptr<c10d::Store>;

namespace detail {

// Note [Bounded store replies]
// A TCPStore client waits for the server's replies to get, add, check and the like without a deadline: with
// the process hosting the store stopped (SIGSTOP, a frozen node), every rank would block in its next store call
// for good. LibTorch 1.13's wait() happened to leave its timeout on the client's socket (SO_RCVTIMEO); 2.x waits
// with poll() and leaves the socket unbounded. So zhost finds the client's socket itself, the one descriptor
// that the store's constructor opened connected to the store's port, and bound_replies() sets SO_RCVTIMEO on
// it: a reply that does not come within the deadline then throws "Socket Timeout" (c10d's recv check) instead of
// blocking. Waiting for keys is unaffected (poll() with its own timeout comes before the recv). Tested by
// tests/comm/failure_test.cpp (StoppedRank...) and tests/training/supervision_test.cpp (StoppedRank, ranks 0-2).
inline std::set<int> open_descriptors() {
  std::set<int> fds;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    const int own = ::dirfd(dir);  // the listing's own descriptor, closed again below
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] != '.' && std::atoi(entry->d_name) != own) fds.insert(std::atoi(entry->d_name));
    }
    ::closedir(dir);
  }
  return fds;
}

// The descriptor of `fds` connected to a peer at TCP port `port` (a store client's socket), or -1.
inline int socket_connected_to_port(const std::set<int>& fds, int port) {
  for (int fd : fds) {
    sockaddr_storage peer{};
    socklen_t length = sizeof peer;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) continue;
    int peer_port = -1;
    if (peer.ss_family == AF_INET) peer_port = ntohs(reinterpret_cast<const sockaddr_in*>(&peer)->sin_port);
    if (peer.ss_family == AF_INET6) peer_port = ntohs(reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_port);
    if (peer_port == port) return fd;
  }
  return -1;
}

struct ClientSockets {
  std::mutex mutex;
  std::map<const c10d::Store*, int> fd_of;  // a store made by make_tcp_store -> its client's socket
};
inline ClientSockets& client_sockets() {
  static ClientSockets sockets;
  return sockets;
}

}  // namespace detail

inline StorePtr make_tcp_store(const std::string& host, int port, bool is_server, int world_size,
                               std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = is_server;
  options.numWorkers = static_cast<std::size_t>(world_size);
  options.waitWorkers = false;  // zhost's own join step names the ranks that are missing
  options.timeout = timeout;
  const std::set<int> before = detail::open_descriptors();
  StorePtr store = c10::make_intrusive<c10d::TCPStore>(host, options);
  std::set<int> opened;
  for (int fd : detail::open_descriptors())
    if (!before.count(fd)) opened.insert(fd);
  const int client = detail::socket_connected_to_port(opened, port);
  std::lock_guard<std::mutex> lock(detail::client_sockets().mutex);
  detail::client_sockets().fd_of[store.get()] = client;
  return store;
}

// Note [Bounded store replies]: every later reply on `store`'s connection within `deadline`, or an exception.
// A store that make_tcp_store did not make (a HashStore) has no connection to bound.
inline void bound_replies(const StorePtr& store, std::chrono::milliseconds deadline) {
  int fd = -1;
  {
    std::lock_guard<std::mutex> lock(detail::client_sockets().mutex);
    const auto found = detail::client_sockets().fd_of.find(store.get());
    if (found != detail::client_sockets().fd_of.end()) fd = found->second;
  }
  if (fd < 0) return;
  timeval limit{};
  limit.tv_sec = static_cast<time_t>(deadline.count() / 1000);
  limit.tv_usec = static_cast<suseconds_t>((deadline.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
}

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
