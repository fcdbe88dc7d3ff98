// Bandwidth of one TCP channel between two processes over loopback: rank 1 (a forked child)
// sends messages of a given size as fast as the channel takes them, rank 0 receives and
// touches nothing (the payload is not generated or checked: this measures the transport).
// Default matrix: 64 KiB and 4 MiB messages x 1 and 4 sockets. Not run by the test suite:
//   build-tcp/tests/tcp/tcp_bench [--bytes B --nsocks K --mib TOTAL]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tcp_test_util.hpp"

using namespace accord;
using namespace accord::tcptest;

namespace {

// Returns GB/s (1e9 bytes per second) seen by the receiver, or a negative value on failure.
double run(size_t bytes, int nsocks, size_t total_bytes) {
  TcpOptions o;
  o.nsocks = nsocks;
  o.slot_bytes = bytes;
  const size_t n = std::max<size_t>(total_bytes / bytes, 16);
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    ::close(fds[1]);
    StoreEndpoint ep;
    if (read(fds[0], &ep, sizeof ep) != static_cast<ssize_t>(sizeof ep)) _exit(3);
    Rank r;
    if (!open_rank(ep, 1, 2, o, &r).ok()) _exit(2);
    for (size_t m = 0; m < n; ++m)
      if (!send_msg(r.tcp->sender(0), bytes, 0, m, wait_ctx(1, 0, 30000), false).ok()) _exit(1);
    r.tcp.reset();
    _exit(0);
  }
  ::close(fds[0]);
  StoreEndpoint ep;
  Status s = start_store("127.0.0.1:0", &ep);
  if (write(fds[1], &ep, sizeof ep) != static_cast<ssize_t>(sizeof ep)) s = error(ACCORD_ERR_SYSTEM, "pipe");
  ::close(fds[1]);
  Rank r;
  if (s.ok()) s = open_rank(ep, 0, 2, o, &r);
  // Time from the first message on, so setup does not count.
  int64_t t0 = 0;
  for (size_t m = 0; s.ok() && m < n; ++m) {
    const void* data;
    size_t got;
    uint32_t tag;
    s = r.tcp->receiver(1)->wait(&data, &got, &tag, wait_ctx(0, 1, 30000));
    if (s.ok()) r.tcp->receiver(1)->release();
    if (m == 0) t0 = now_ns();
  }
  const double secs = (now_ns() - t0) / 1e9;
  int status = 0;
  waitpid(pid, &status, 0);
  if (!s.ok()) {
    fprintf(stderr, "bench failed: %s\n", s.message().c_str());
    return -1;
  }
  return static_cast<double>(bytes) * static_cast<double>(n - 1) / secs / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes = {64 << 10, 4 << 20};
  std::vector<int> socks = {1, 4};
  size_t total = size_t{2} << 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--bytes") sizes = {static_cast<size_t>(std::atoll(argv[i + 1]))};
    else if (k == "--nsocks") socks = {std::atoi(argv[i + 1])};
    else if (k == "--mib") total = static_cast<size_t>(std::atoll(argv[i + 1])) << 20;
  }
  printf("%12s %7s %10s\n", "message", "nsocks", "GB/s");
  for (size_t b : sizes)
    for (int k : socks) {
      double best = 0;
      for (int rep = 0; rep < 3; ++rep) best = std::max(best, run(b, k, total));
      printf("%9zu KiB %7d %10.2f\n", b >> 10, k, best);
      fflush(stdout);
    }
  return 0;
}
