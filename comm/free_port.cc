#include "comm/free_port.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ditserve::comm {

absl::StatusOr<int> PickFreePort(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), "0", &hints, &res);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("PickFreePort: cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      int port = 0;
      if (addr.ss_family == AF_INET) {
        port = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
      } else if (addr.ss_family == AF_INET6) {
        port = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
      }
      close(fd);
      freeaddrinfo(res);
      if (port > 0) return port;
      return absl::InternalError("PickFreePort: unexpected address family");
    }
    last_error = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(res);
  return absl::UnavailableError(
      absl::StrCat("PickFreePort: cannot bind a port on '", host, "': ", last_error));
}

}  // namespace ditserve::comm
