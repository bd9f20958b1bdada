#include "core/dist/net.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/common/check.h"

namespace colossal::dist {

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

bool is_local_host(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), "0", &hints, &res) != 0 || res == nullptr) return false;
  bool local = false;
  for (addrinfo* a = res; a != nullptr && !local; a = a->ai_next) {
    int fd = ::socket(a->ai_family, SOCK_STREAM, 0);
    if (fd < 0) continue;
    local = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;  // port 0: any; fails for another machine's address
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return local;
}

int find_free_port(const std::string& host) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  COLOSSAL_CHECK(fd >= 0, "[net] socket() failed: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  if (rc == 0) rc = ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int err = errno;
  ::close(fd);
  COLOSSAL_CHECK(rc == 0, "[net] cannot bind a free port on ", host, ": ", std::strerror(err));
  return ntohs(addr.sin_port);
}

std::string local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), "9", &hints, &res);
  COLOSSAL_CHECK(rc == 0 && res != nullptr, "[net] cannot resolve '", host, "': ",
                 ::gai_strerror(rc));
  int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  // connect() on a UDP socket only picks the route and source address.
  int crc = fd >= 0 ? ::connect(fd, res->ai_addr, res->ai_addrlen) : -1;
  ::freeaddrinfo(res);
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  int grc = crc == 0 ? ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) : -1;
  int err = errno;
  if (fd >= 0) ::close(fd);
  COLOSSAL_CHECK(grc == 0, "[net] no route towards '", host, "': ", std::strerror(err));
  char buf[INET_ADDRSTRLEN] = {0};
  ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf));
  return buf;
}

}  // namespace colossal::dist
