// One rank of a small TCP job, for the multi-host harness (netns/): run it once per "host"
// (network namespace). Rank 0 also runs the bootstrap store on --store ADDR:PORT; every rank
// sets up the TCP transport to all others (interface from ACCORD_SOCKET_IFNAME, else the one
// that routes to the store), then sends --mib MiB around a ring forwards and backwards, so
// every pair carries data both ways, and checks every byte. Prints one line per rank:
//   rank R host H if I addr A: sent S MiB ... ok
// The secret comes from ACCORD_SECRET (every rank the same), never from the command line.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/crypto.hpp"
#include "core/settings.hpp"
#include "tcp_test_util.hpp"

using namespace accord;
using namespace accord::tcptest;

namespace {

int fail(int rank, const Status& s) {
  fprintf(stderr, "rank %d: FAILED: %s\n", rank, s.message().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int rank = -1, nranks = 2;
  double mib = 16;
  std::string store_addr;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--rank") rank = std::atoi(argv[i + 1]);
    else if (k == "--nranks") nranks = std::atoi(argv[i + 1]);
    else if (k == "--store") store_addr = argv[i + 1];
    else if (k == "--mib") mib = std::atof(argv[i + 1]);
  }
  const char* secret_text = getenv("ACCORD_SECRET");
  if (rank < 0 || rank >= nranks || store_addr.empty() || secret_text == nullptr) {
    fprintf(stderr, "usage: ACCORD_SECRET=... %s --rank R --nranks N --store IP:PORT [--mib M]\n", argv[0]);
    return 2;
  }
  Settings settings;
  Status s = load_settings(&settings);
  if (!s.ok()) return fail(rank, s);
  StoreEndpoint ep;
  s = parse_address(store_addr, 0, &ep.addr);
  if (!s.ok()) return fail(rank, s);
  const std::string st = std::string("accord-secret:") + secret_text;
  const Digest d = sha256(st.data(), st.size());
  std::memcpy(ep.secret.data(), d.data(), d.size());
  if (rank == 0) {
    s = start_store_server(&ep, 30000);
    if (!s.ok()) return fail(rank, s);
  }
  TcpOptions o = make_tcp_options(settings, ep, 1 << 20, 8);
  Rank r;
  s = open_rank(ep, rank, nranks, o, &r, 20000);
  if (!s.ok()) return fail(rank, s);

  const size_t n = static_cast<size_t>(mib) > 0 ? static_cast<size_t>(mib) : 1;
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  const int64_t t0 = now_ns();
  size_t sent = 0;
  for (int dir = 0; dir < (nranks > 2 ? 2 : 1); ++dir) {
    const int to = dir == 0 ? next : prev, from = dir == 0 ? prev : next;
    for (size_t m = 0; m < n; ++m) {
      // Sizes vary so that pieces, empty messages and partial slots all cross the link.
      const size_t bytes = m % 5 == 4 ? m % 3 : o.slot_bytes - (m % 7);
      sent += bytes;
      s = send_msg(r.tcp->sender(to), bytes, static_cast<uint32_t>(m), m * 64 + rank, wait_ctx(rank, to, 20000));
      if (s.ok()) s = recv_msg(r.tcp->receiver(from), bytes, static_cast<uint32_t>(m), m * 64 + from,
                               wait_ctx(rank, from, 20000));
      if (!s.ok()) return fail(rank, s);
    }
  }
  const double secs = (now_ns() - t0) / 1e9;
  char host[256] = "?";
  gethostname(host, sizeof host);
  printf("rank %d host %s if %s addr %s nsocks %d: sent %.1f MiB to %d peer(s) in %.2f s (%.0f Mbit/s sent) ok\n",
         rank, host, r.tcp->interface_name().c_str(), r.tcp->listen_address().to_string().c_str(), r.tcp->nsocks(),
         sent / 1048576.0, nranks > 2 ? 2 : 1, secs, sent * 8.0 / secs / 1e6);
  fflush(stdout);
  return 0;
}
