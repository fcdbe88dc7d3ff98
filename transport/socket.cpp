// TCP helpers with deadlines (see socket.hpp). All sockets are non-blocking; waits use poll()
// with the time left, so a silent peer turns into ACCORD_ERR_TIMEOUT, never a hang.
#include "transport/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

namespace accord {

uint16_t SockAddr::port() const {
  if (storage.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(storage).sin_port);
  if (storage.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(storage).sin6_port);
  return 0;
}

void SockAddr::set_port(uint16_t port) {
  if (storage.ss_family == AF_INET) reinterpret_cast<sockaddr_in&>(storage).sin_port = htons(port);
  if (storage.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6&>(storage).sin6_port = htons(port);
}

std::string SockAddr::to_string() const {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (storage.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(storage).sin_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(port());
  }
  if (storage.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(storage).sin6_addr, buf, sizeof buf);
    return "[" + std::string(buf) + "]:" + std::to_string(port());
  }
  return "(no address)";
}

Status parse_address(const std::string& text, uint16_t default_port, SockAddr* out) {
  std::string host = text;
  std::string port_text;
  if (!host.empty() && host[0] == '[') {
    size_t close = host.find(']');
    if (close == std::string::npos)
      return error(ACCORD_ERR_INVALID_ARGUMENT, "address '%s': missing ']' after an IPv6 address", text.c_str());
    if (close + 1 < host.size() && host[close + 1] == ':') port_text = host.substr(close + 2);
    host = host.substr(1, close - 1);
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    size_t colon = host.find(':');
    port_text = host.substr(colon + 1);
    host = host.substr(0, colon);
  }
  uint16_t port = default_port;
  if (!port_text.empty()) {
    char* end = nullptr;
    long p = std::strtol(port_text.c_str(), &end, 10);
    if (*end != '\0' || p < 0 || p > 65535)
      return error(ACCORD_ERR_INVALID_ARGUMENT, "address '%s': port '%s' is not a number in 0..65535",
                   text.c_str(), port_text.c_str());
    port = static_cast<uint16_t>(p);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "cannot resolve address '%s': %s; give an IP address or a host name "
                 "that resolves on this machine", host.c_str(), gai_strerror(rc));
  const addrinfo* pick = res;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  }
  *out = SockAddr{};
  std::memcpy(&out->storage, pick->ai_addr, pick->ai_addrlen);
  out->len = pick->ai_addrlen;
  out->set_port(port);
  freeaddrinfo(res);
  return Status::success();
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

Status tcp_listen(SockAddr* addr, int backlog, Fd* out) {
  Fd fd(socket(addr->family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return system_error(errno, "socket() for a listener on %s", addr->to_string().c_str());
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr->storage), addr->len) != 0) {
    int e = errno;
    return system_error(e, "cannot listen on %s (bind)%s", addr->to_string().c_str(),
                        e == EADDRINUSE ? "; another process holds the port: pick another MASTER_PORT"
                        : e == EADDRNOTAVAIL ? "; the address is not on this machine: check MASTER_ADDR / "
                                               "ACCORD_BOOTSTRAP_ADDR"
                                             : "");
  }
  if (listen(fd.get(), backlog) != 0) return system_error(errno, "listen() on %s", addr->to_string().c_str());
  socklen_t len = sizeof addr->storage;
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr->storage), &len);
  addr->len = len;
  *out = std::move(fd);
  return Status::success();
}

Status tcp_accept(int listen_fd, Deadline deadline, Fd* out) {
  for (;;) {
    int c = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c >= 0) {
      set_nodelay(c);
      *out = Fd(c);
      return Status::success();
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
      return system_error(errno, "accept()");
    if (deadline.expired()) return error(ACCORD_ERR_TIMEOUT, "no connection arrived before the deadline");
    pollfd p{listen_fd, POLLIN, 0};
    poll(&p, 1, deadline.remaining_ms(1000));
  }
}

Status tcp_connect(const SockAddr& addr, Deadline deadline, const char* what, Fd* out) {
  int last_err = 0;
  int backoff_ms = 1;
  for (;;) {
    Fd fd(socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return system_error(errno, "socket() to connect to %s", what);
    int rc = connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      int n = poll(&p, 1, deadline.remaining_ms(1000));
      if (n > 0) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        rc = -1;
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      set_nodelay(fd.get());
      *out = std::move(fd);
      return Status::success();
    }
    last_err = errno;
    if (last_err != ECONNREFUSED && last_err != ETIMEDOUT && last_err != ENETUNREACH &&
        last_err != EHOSTUNREACH && last_err != ECONNRESET && last_err != EINTR && last_err != EAGAIN)
      return system_error(last_err, "connect to %s at %s", what, addr.to_string().c_str());
    if (deadline.expired())
      return error(ACCORD_ERR_TIMEOUT,
                   "could not connect to %s at %s within %lld ms (last error: %s); is it running, and is "
                   "the address reachable from this host?",
                   what, addr.to_string().c_str(), static_cast<long long>(deadline.budget_ms()),
                   std::strerror(last_err));
    int sleep_ms = std::min(backoff_ms, deadline.remaining_ms(backoff_ms));
    usleep(static_cast<useconds_t>(sleep_ms) * 1000);
    backoff_ms = std::min(backoff_ms * 2, 100);
  }
}

Status send_all(int fd, const void* data, size_t bytes, Deadline deadline, const char* what) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (deadline.expired())
        return error(ACCORD_ERR_TIMEOUT, "sending to %s: no progress within %lld ms", what,
                     static_cast<long long>(deadline.budget_ms()));
      pollfd pfd{fd, POLLOUT, 0};
      poll(&pfd, 1, deadline.remaining_ms(1000));
      continue;
    }
    int e = errno;
    if (e == EPIPE || e == ECONNRESET)
      return error(ACCORD_ERR_REMOTE, "%s closed the connection (%s)", what, std::strerror(e));
    return system_error(e, "send to %s", what);
  }
  return Status::success();
}

Status recv_all(int fd, void* data, size_t bytes, Deadline deadline, const char* what) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return error(ACCORD_ERR_REMOTE, "%s closed the connection", what);
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (deadline.expired())
        return error(ACCORD_ERR_TIMEOUT, "waiting for %s: nothing arrived within %lld ms", what,
                     static_cast<long long>(deadline.budget_ms()));
      pollfd pfd{fd, POLLIN, 0};
      poll(&pfd, 1, deadline.remaining_ms(1000));
      continue;
    }
    int e = errno;
    if (e == ECONNRESET) return error(ACCORD_ERR_REMOTE, "%s reset the connection", what);
    return system_error(e, "recv from %s", what);
  }
  return Status::success();
}

}  // namespace accord
