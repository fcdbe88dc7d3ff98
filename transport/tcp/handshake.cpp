// Challenge-response over the job secret for every TCP data socket (see handshake.hpp).
#include "transport/tcp/handshake.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "core/crypto.hpp"
#include "core/log.hpp"

namespace accord {
namespace {

constexpr uint32_t kVersion = 1;
constexpr size_t kNonceBytes = 16;
constexpr size_t kChallengeBytes = 4 + kNonceBytes;          // "ACT1" nonce_a
constexpr size_t kFieldsBytes = 7 * 4;                       // version .. slot_bytes
constexpr size_t kClaimBytes = 4 + kFieldsBytes + kNonceBytes + 32;
constexpr size_t kProofBytes = 4 + 32;                       // "ACT3" mac_a
// A stranger gets this long to prove the secret: long enough for any real rank (it answers
// from memory), short enough that idle connections cannot pile up.
constexpr int64_t kHandshakeMs = 1000;
constexpr size_t kMaxPending = 64;

Digest connector_mac(const Secret& secret, const uint8_t* nonce_a, const uint8_t* fields, const uint8_t* nonce_c) {
  std::string m = "accord-tcp-connect";
  m.append(reinterpret_cast<const char*>(nonce_a), kNonceBytes);
  m.append(reinterpret_cast<const char*>(fields), kFieldsBytes);
  m.append(reinterpret_cast<const char*>(nonce_c), kNonceBytes);
  return hmac_sha256(secret.data(), secret.size(), m.data(), m.size());
}

Digest acceptor_mac(const Secret& secret, const uint8_t* nonce_c, const uint8_t* nonce_a) {
  std::string m = "accord-tcp-accept";
  m.append(reinterpret_cast<const char*>(nonce_c), kNonceBytes);
  m.append(reinterpret_cast<const char*>(nonce_a), kNonceBytes);
  return hmac_sha256(secret.data(), secret.size(), m.data(), m.size());
}

void put_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
uint32_t get_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

std::string peer_name(int fd) {
  SockAddr a;
  a.len = sizeof a.storage;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.len) != 0) return "(unknown address)";
  return a.to_string();
}

struct Pending {
  Fd fd;
  int64_t limit_ns = 0;
  uint8_t nonce[kNonceBytes];
  uint8_t buf[kClaimBytes];
  size_t got = 0;
};

}  // namespace

Status tcp_connect_authenticated(const SockAddr& addr, const Secret& secret, const TcpHello& hello,
                                 Deadline deadline, Fd* out) {
  const std::string what = format("rank %d (TCP socket %u of %u, %s)", hello.peer, hello.sock + 1, hello.nsocks,
                                  addr.to_string().c_str());
  Fd fd;
  ACCORD_TRY(tcp_connect(addr, deadline, what.c_str(), &fd).prefix(format("rank %d: ", hello.rank)));
  uint8_t challenge[kChallengeBytes];
  ACCORD_TRY(recv_all(fd.get(), challenge, sizeof challenge, deadline, what.c_str()).prefix(format("rank %d: ", hello.rank)));
  if (std::memcmp(challenge, "ACT1", 4) != 0)
    return error(ACCORD_ERR_SYSTEM, "rank %d: %s did not answer like an Accord TCP listener; another program may "
                 "hold the port rank %d published", hello.rank, what.c_str(), hello.peer);
  uint8_t claim[kClaimBytes];
  std::memcpy(claim, "ACT2", 4);
  uint8_t* f = claim + 4;
  put_u32(f + 0, kVersion);
  put_u32(f + 4, static_cast<uint32_t>(hello.rank));
  put_u32(f + 8, static_cast<uint32_t>(hello.peer));
  put_u32(f + 12, static_cast<uint32_t>(hello.nranks));
  put_u32(f + 16, hello.sock);
  put_u32(f + 20, hello.nsocks);
  put_u32(f + 24, hello.slot_bytes);
  uint8_t* nonce_c = f + kFieldsBytes;
  ACCORD_TRY(random_bytes(nonce_c, kNonceBytes));
  Digest mac = connector_mac(secret, challenge + 4, f, nonce_c);
  std::memcpy(nonce_c + kNonceBytes, mac.data(), mac.size());
  ACCORD_TRY(send_all(fd.get(), claim, sizeof claim, deadline, what.c_str()).prefix(format("rank %d: ", hello.rank)));
  uint8_t proof[kProofBytes];
  Status s = recv_all(fd.get(), proof, sizeof proof, deadline, what.c_str());
  if (s.code() == ACCORD_ERR_REMOTE)
    return error(ACCORD_ERR_INVALID_USAGE, "rank %d: %s refused the connection: the job secret or the settings "
                 "differ (nranks, ACCORD_SHM_SLOT_BYTES, Accord version); see rank %d's output", hello.rank,
                 what.c_str(), hello.peer);
  ACCORD_TRY(std::move(s).prefix(format("rank %d: ", hello.rank)));
  Digest want = acceptor_mac(secret, nonce_c, challenge + 4);
  if (std::memcmp(proof, "ACT3", 4) != 0 || !constant_time_equal(proof + 4, want.data(), want.size()))
    return error(ACCORD_ERR_SYSTEM, "rank %d: %s could not prove it knows the job secret; refusing it (another "
                 "program may listen on the port rank %d published)", hello.rank, what.c_str(), hello.peer);
  *out = std::move(fd);
  return Status::success();
}

Status tcp_accept_authenticated(int listen_fd, const Secret& secret, int rank, int nranks, uint32_t slot_bytes,
                                const std::vector<int>& expect_from, Deadline deadline,
                                const std::atomic<bool>* stop, AcceptResult* out) {
  std::map<int, uint32_t> announced;  // rank -> nsocks it said it opens
  std::map<int, uint32_t> arrived;
  std::vector<Pending> pending;
  auto missing = [&] {
    std::string m;
    for (int p : expect_from) {
      auto a = announced.find(p);
      if (a == announced.end() || arrived[p] < a->second) m += (m.empty() ? "" : ", ") + std::to_string(p);
    }
    return m;
  };
  auto drop = [&](size_t i, const char* why) {
    // The first stranger is worth a warning; a flood of them is worth one line each at debug.
    if (out->dropped == 0)
      LOG_WARN(kNet, "rank %d: dropped a TCP connection from %s: %s (a stranger, or a process of another job)", rank,
               peer_name(pending[i].fd.get()).c_str(), why);
    else
      LOG_DEBUG(kNet, "rank %d: dropped a TCP connection from %s: %s", rank, peer_name(pending[i].fd.get()).c_str(),
                why);
    ++out->dropped;
    pending.erase(pending.begin() + static_cast<long>(i));
  };

  for (;;) {
    if (missing().empty()) return Status::success();
    if (stop != nullptr && stop->load(std::memory_order_acquire))
      return error(ACCORD_ERR_ABORTED, "rank %d: stopped accepting TCP connections", rank);
    if (deadline.expired())
      return error(ACCORD_ERR_TIMEOUT, "rank %d: rank(s) %s did not open authenticated TCP connections to this rank "
                   "within %lld ms; are they running, can they reach this host's address (firewall, "
                   "ACCORD_SOCKET_IFNAME), and do they use the same job secret?",
                   rank, missing().c_str(), static_cast<long long>(deadline.budget_ms()));
    std::vector<pollfd> fds;
    fds.push_back({listen_fd, POLLIN, 0});
    int64_t t = now_ns();
    int wait_ms = deadline.remaining_ms(100);
    for (const Pending& p : pending) {
      fds.push_back({p.fd.get(), POLLIN, 0});
      wait_ms = std::min<int64_t>(wait_ms, std::max<int64_t>(0, (p.limit_ns - t) / 1000000 + 1));
    }
    poll(fds.data(), fds.size(), wait_ms);

    // Data first (indices of fds match pending), then new connections.
    for (size_t i = pending.size(); i-- > 0;) {
      Pending& p = pending[i];
      if (fds[i + 1].revents == 0) continue;
      ssize_t n = recv(p.fd.get(), p.buf + p.got, kClaimBytes - p.got, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        drop(i, "it closed before proving the job secret");
        continue;
      }
      if (n < 0) continue;
      p.got += static_cast<size_t>(n);
      if (p.got < kClaimBytes) continue;
      const uint8_t* f = p.buf + 4;
      const uint8_t* nonce_c = f + kFieldsBytes;
      Digest want = connector_mac(secret, p.nonce, f, nonce_c);
      if (std::memcmp(p.buf, "ACT2", 4) != 0 || !constant_time_equal(nonce_c + kNonceBytes, want.data(), want.size())) {
        drop(i, "it did not prove it knows the job secret");
        continue;
      }
      // The secret is right, so this is a rank of our job: a disagreement is a configuration
      // error worth failing init for, not a stranger to ignore.
      const uint32_t version = get_u32(f);
      const int from = static_cast<int>(get_u32(f + 4));
      const int to = static_cast<int>(get_u32(f + 8));
      const int their_nranks = static_cast<int>(get_u32(f + 12));
      const uint32_t sock = get_u32(f + 16), nsocks = get_u32(f + 20), their_slot = get_u32(f + 24);
      if (version != kVersion)
        return error(ACCORD_ERR_INVALID_USAGE, "rank %d: rank %d speaks TCP protocol version %u, this rank %u; run "
                     "the same Accord build on every host", rank, from, version, kVersion);
      if (to != rank || their_nranks != nranks ||
          std::find(expect_from.begin(), expect_from.end(), from) == expect_from.end())
        return error(ACCORD_ERR_INVALID_USAGE, "rank %d of %d: a TCP connection from rank %d of %d meant for rank %d "
                     "arrived here; do all ranks agree on nranks and on which ranks share a host (ACCORD_HOST_ID)?",
                     rank, nranks, from, their_nranks, to);
      if (their_slot != slot_bytes)
        return error(ACCORD_ERR_INVALID_USAGE, "rank %d: rank %d uses %u-byte TCP slots and this rank %u; set the "
                     "same ACCORD_SHM_SLOT_BYTES on every rank", rank, from, their_slot, slot_bytes);
      auto a = announced.emplace(from, nsocks).first;
      std::vector<Fd>& socks = out->sockets[from];
      if (nsocks == 0 || nsocks != a->second || sock >= nsocks || (sock < socks.size() && socks[sock].valid()))
        return error(ACCORD_ERR_INVALID_USAGE, "rank %d: rank %d opened TCP socket %u of %u twice or inconsistently; "
                     "was it started twice with the same rank?", rank, from, sock, nsocks);
      uint8_t proof[kProofBytes];
      std::memcpy(proof, "ACT3", 4);
      Digest mine = acceptor_mac(secret, nonce_c, p.nonce);
      std::memcpy(proof + 4, mine.data(), mine.size());
      // A fresh socket's send buffer always takes 36 bytes.
      if (send(p.fd.get(), proof, sizeof proof, MSG_DONTWAIT | MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof proof))
        return system_error(errno, "rank %d: answering rank %d's TCP handshake", rank, from);
      if (socks.size() < nsocks) socks.resize(nsocks);
      socks[sock] = std::move(p.fd);
      ++arrived[from];
      pending.erase(pending.begin() + static_cast<long>(i));
    }
    t = now_ns();
    for (size_t i = pending.size(); i-- > 0;)
      if (t >= pending[i].limit_ns) drop(i, "it sent nothing valid within 1 s");
    for (;;) {
      int c = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c < 0) break;
      Pending p;
      p.fd = Fd(c);
      set_nodelay(c);
      p.limit_ns = now_ns() + kHandshakeMs * 1000000LL;
      ACCORD_TRY(random_bytes(p.nonce, kNonceBytes));
      uint8_t challenge[kChallengeBytes];
      std::memcpy(challenge, "ACT1", 4);
      std::memcpy(challenge + 4, p.nonce, kNonceBytes);
      if (send(c, challenge, sizeof challenge, MSG_DONTWAIT | MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof challenge))
        continue;  // gone already
      if (pending.size() >= kMaxPending) drop(0, "too many unauthenticated connections at once");
      pending.push_back(std::move(p));
    }
  }
}

}  // namespace accord
