// host/comm/store_listener.cpp: plain TCP connection attempts until the store's port accepts one.
#include "host/comm/store_listener.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

namespace zhost::comm::detail {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kRetryInterval{10};
constexpr std::chrono::milliseconds kConnectWait{200};  // for one attempt (a slow link, a shaped netns)

// One non-blocking connect to `address`, waited for at most until `until`.
bool accepts(const addrinfo& address, Clock::time_point until) {
  const int fd = ::socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, address.ai_protocol);
  if (fd < 0) return false;
  bool connected = ::connect(fd, address.ai_addr, address.ai_addrlen) == 0;
  if (!connected && errno == EINPROGRESS) {
    pollfd poll_fd{fd, POLLOUT, 0};
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (::poll(&poll_fd, 1, static_cast<int>(std::max<int64_t>(wait, 0))) == 1) {
      int error = 0;
      socklen_t length = sizeof error;
      connected = ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
    }
  }
  ::close(fd);
  return connected;
}

}  // namespace

bool wait_until_listening(const std::string& host, int port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  while (Clock::now() < deadline) {
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) == 0) {
      bool ok = false;
      for (const addrinfo* address = found; address != nullptr && !ok; address = address->ai_next) {
        ok = accepts(*address, std::min(deadline, Clock::now() + kConnectWait));
      }
      ::freeaddrinfo(found);
      if (ok) return true;
    }
    std::this_thread::sleep_for(kRetryInterval);
  }
  return false;
}

}  // namespace zhost::comm::detail
