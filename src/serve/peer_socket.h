// Whether the client of an HTTP request is still connected, for handlers that compute before they
// write (a non-streamed completion): its job is cancelled when the client hangs up, as a streamed
// one's is when a write fails.
//
// Why by search: Debian's cpp-httplib 0.11.4 gives a handler the connection's addresses
// (httplib::Request: local_port, remote_addr, remote_port) but not its socket, and the method that
// owns the socket is private. A TCP connection is named by those addresses, so the handler's socket
// is the one open socket of this process with that local port and that peer.
#pragma once

#include <string>

namespace medtune::serve {

class PeerSocket {
 public:
  // The socket whose local port is local_port and whose peer is remote_addr:remote_port (as
  // getnameinfo(NI_NUMERICHOST) writes it, like httplib); not found() when there is none.
  static PeerSocket find(int local_port, const std::string& remote_addr, int remote_port);

  bool found() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  // False once the peer has closed or reset the connection (a TLS client's close_notify too: the
  // check is on the TCP stream, poll's POLLRDHUP, not on pending bytes); true while it is open and
  // when no socket was found. A client that half-closes (shutdown(SHUT_WR)) and still waits for
  // its answer is taken as gone: HTTP/1.1 clients do not do that.
  bool client_connected() const;

 private:
  explicit PeerSocket(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace medtune::serve
