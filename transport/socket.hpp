// TCP sockets with deadlines: every blocking step (connect, accept, send, recv) takes an
// absolute deadline and fails with ACCORD_ERR_TIMEOUT past it, so nothing here can hang.
// Used by the bootstrap store and (later) the TCP transport.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "core/clock.hpp"
#include "core/status.hpp"

namespace accord {

// An IPv4 or IPv6 address with a port.
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;

  int family() const { return storage.ss_family; }
  uint16_t port() const;
  void set_port(uint16_t port);
  std::string to_string() const;  // "127.0.0.1:29500" or "[::1]:29500"
};

// Parses "ip", "ip:port", "[v6]:port", or a host name (resolved; first IPv4 result preferred).
// `default_port` applies when the text has none.
Status parse_address(const std::string& text, uint16_t default_port, SockAddr* out);

// Owning file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Listening socket bound to addr (port 0 = any free port; the bound address is written back).
Status tcp_listen(SockAddr* addr, int backlog, Fd* out);

// Accepts one connection, waiting at most until the deadline (ACCORD_ERR_TIMEOUT past it).
Status tcp_accept(int listen_fd, Deadline deadline, Fd* out);

// Connects, retrying refused connections (the listener may not be up yet) until the deadline.
// `what` names the peer for messages ("the bootstrap server of rank 0").
Status tcp_connect(const SockAddr& addr, Deadline deadline, const char* what, Fd* out);

// Sends / receives exactly `bytes`, or fails: ACCORD_ERR_REMOTE if the peer closed,
// ACCORD_ERR_TIMEOUT past the deadline. `what` names the peer for messages.
Status send_all(int fd, const void* data, size_t bytes, Deadline deadline, const char* what);
Status recv_all(int fd, void* data, size_t bytes, Deadline deadline, const char* what);

// Socket options used everywhere: TCP_NODELAY, close-on-exec, non-blocking.
void set_nodelay(int fd);
void set_nonblocking(int fd);

}  // namespace accord
