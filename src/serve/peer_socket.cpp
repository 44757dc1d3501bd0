#include "serve/peer_socket.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>

namespace medtune::serve {

namespace {

// The numeric host and the port of a socket address, as httplib's detail::get_ip_and_port.
bool host_and_port(const sockaddr_storage& addr, socklen_t len, std::string* host, int* port) {
  if (addr.ss_family == AF_INET) *port = ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  else if (addr.ss_family == AF_INET6) *port = ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  else return false;
  char buf[NI_MAXHOST];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) != 0)
    return false;
  *host = buf;
  return true;
}

bool matches(int fd, int local_port, const std::string& remote_addr, int remote_port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  std::string host;
  int port = -1;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;  // not a socket
  if (!host_and_port(addr, len, &host, &port) || port != local_port) return false;
  len = sizeof addr;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;  // listening, or closed
  return host_and_port(addr, len, &host, &port) && port == remote_port && host == remote_addr;
}

}  // namespace

PeerSocket PeerSocket::find(int local_port, const std::string& remote_addr, int remote_port) {
  // /proc/self/fd lists exactly the open descriptors (Linux, the platform medtune serves on).
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return PeerSocket(-1);
  const int own = ::dirfd(dir);
  int found = -1;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    if (fd != own && matches(fd, local_port, remote_addr, remote_port)) {
      found = fd;
      break;
    }
  }
  ::closedir(dir);
  return PeerSocket(found);
}

bool PeerSocket::client_connected() const {
  if (fd_ < 0) return true;
  pollfd p{fd_, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return true;  // nothing to report, or poll failed: keep serving
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) == 0;
}

}  // namespace medtune::serve
