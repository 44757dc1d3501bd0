// serve::PeerSocket: the handler's socket found from the connection's addresses, and a client that
// hangs up seen as gone, on real loopback TCP connections (IPv4 and IPv6 where the host has it).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "serve/peer_socket.h"

namespace medtune::serve {
namespace {

int port_of(int fd, bool peer) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if ((peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len)) != 0)
    return -1;
  return a.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in&>(a).sin_port)
                                : ntohs(reinterpret_cast<sockaddr_in6&>(a).sin6_port);
}

// A listening socket on loopback, a client connected to it and the accepted server side.
struct Connection {
  int listener = -1, client = -1, server = -1;
  bool open(int family) {
    listener = ::socket(family, SOCK_STREAM, 0);
    sockaddr_storage a{};
    socklen_t len;
    if (family == AF_INET) {
      auto& v4 = reinterpret_cast<sockaddr_in&>(a);
      v4.sin_family = AF_INET;
      v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      len = sizeof v4;
    } else {
      auto& v6 = reinterpret_cast<sockaddr_in6&>(a);
      v6.sin6_family = AF_INET6;
      v6.sin6_addr = in6addr_loopback;
      len = sizeof v6;
    }
    if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(listener, 1) != 0) return false;
    len = sizeof a;
    ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
    client = ::socket(family, SOCK_STREAM, 0);
    if (::connect(client, reinterpret_cast<sockaddr*>(&a), len) != 0) return false;
    server = ::accept(listener, nullptr, nullptr);
    return server >= 0;
  }
  ~Connection() {
    for (int fd : {listener, client, server})
      if (fd >= 0) ::close(fd);
  }
};

bool gone_within(const PeerSocket& p, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (p.client_connected()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

void check(int family, const std::string& host) {
  Connection c;
  if (!c.open(family)) GTEST_SKIP() << "no loopback for family " << family << " on this host";
  const int server_port = port_of(c.server, false), client_port = port_of(c.client, false);
  const PeerSocket p = PeerSocket::find(server_port, host, client_port);
  ASSERT_TRUE(p.found());
  EXPECT_EQ(p.fd(), c.server);  // not the client's end, which has the same two ports swapped
  EXPECT_TRUE(p.client_connected());
  // Bytes from the client (a pipelined request) do not make it look gone.
  ASSERT_EQ(1, ::write(c.client, "x", 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(p.client_connected());
  EXPECT_FALSE(PeerSocket::find(server_port, host, client_port + 1).found());
  EXPECT_FALSE(PeerSocket::find(server_port, family == AF_INET ? "127.0.0.2" : "::2", client_port).found());
  ::close(c.client);
  c.client = -1;
  EXPECT_TRUE(gone_within(p, std::chrono::milliseconds(2000)));  // loopback delivers the FIN at once
}

TEST(PeerSocket, FindsTheServerSideAndSeesTheClientHangUpIPv4) { check(AF_INET, "127.0.0.1"); }
TEST(PeerSocket, FindsTheServerSideAndSeesTheClientHangUpIPv6) { check(AF_INET6, "::1"); }

TEST(PeerSocket, NotFoundMeansConnected) {
  const PeerSocket p = PeerSocket::find(1, "192.0.2.1", 1);
  EXPECT_FALSE(p.found());
  EXPECT_TRUE(p.client_connected());  // nothing to go by: the request runs to its limits
}

}  // namespace
}  // namespace medtune::serve
