// host/comm/store_listener.hpp: waiting until rank 0's rendezvous store accepts connections.
//
// LibTorch 1.13's TCPStore client retries a refused connection only after a pause of about a second, so
// a rank that comes up before rank 0 has opened the store (the usual case when ranks are forked: Note
// [Forked ranks]) would lose that second. The other ranks first try plain TCP connections every 10 ms
// and hand over to the TCPStore client once one is accepted. At the deadline the caller fails the rendezvous
// itself: the client would otherwise wait out a timeout of its own on top.
#pragma once

#include <chrono>
#include <string>

namespace zhost::comm::detail {

// True once a TCP connection to host:port was accepted (and closed again); false at the deadline.
bool wait_until_listening(const std::string& host, int port, std::chrono::steady_clock::time_point deadline);

}  // namespace zhost::comm::detail
