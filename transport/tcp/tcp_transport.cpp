// TCP transport setup and its progress thread (see tcp_transport.hpp).
#include "transport/tcp/tcp_transport.hpp"

#include <poll.h>

#include <algorithm>

#include "core/log.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/tcp/interface.hpp"

namespace accord {
namespace {

// After the goodbyes, how long to read what the peers still send before closing: closing a
// socket with unread bytes makes the kernel send a reset instead of a clean end.
constexpr int64_t kDrainMs = 250;

}  // namespace

TcpOptions make_tcp_options(const Settings& settings, const StoreEndpoint& endpoint, size_t slot_bytes,
                            size_t nslots) {
  TcpOptions o;
  o.secret = endpoint.secret;
  o.bootstrap_addr = endpoint.addr;
  o.ifname = settings.socket_ifname;
  o.nsocks = static_cast<int>(settings.socket_nsocks);
  o.slot_bytes = slot_bytes;
  o.nslots = nslots;
  return o;
}

Status TcpTransport::setup(StoreClient* store, int rank, int nranks, const std::vector<int>& remote_ranks,
                           const TcpOptions& options, Deadline deadline, std::unique_ptr<TcpTransport>* out) {
  std::unique_ptr<TcpTransport> t(new TcpTransport());
  t->rank_ = rank;
  t->options_ = options;
  t->nsocks_ = options.nsocks > 0 ? options.nsocks : kDefaultTcpSockets;
  t->peers_.resize(static_cast<size_t>(nranks));
  if (t->nsocks_ > kMaxTcpSockets)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "ACCORD_SOCKET_NSOCKS=%d is too many; use 1..%d", t->nsocks_,
                 kMaxTcpSockets);
  if (options.slot_bytes == 0 || options.slot_bytes > (1u << 31) || options.nslots < 2)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "rank %d: TCP slots of %zu bytes x %zu do not work; use 64 B..2 GiB "
                 "and at least 2 slots", rank, options.slot_bytes, options.nslots);
  for (int p : remote_ranks)
    if (p == rank || p < 0 || p >= nranks)
      return error(ACCORD_ERR_INTERNAL, "rank %d: TCP peer list holds rank %d (nranks %d)", rank, p, nranks);
  if (remote_ranks.empty()) {
    *out = std::move(t);
    return Status::success();
  }

  LocalInterface iface;
  ACCORD_TRY(choose_local_address(options.ifname, &options.bootstrap_addr, &iface).prefix(format("rank %d: ", rank)));
  t->ifname_ = iface.name;
  t->listen_addr_ = iface.addr;
  Fd listener;
  ACCORD_TRY(tcp_listen(&t->listen_addr_, 128, &listener).prefix(format("rank %d: TCP transport: ", rank)));
  ACCORD_TRY(store->set(options.store_prefix + std::to_string(rank), t->listen_addr_.to_string()));
  if (options.after_listen) options.after_listen(t->listen_addr_);

  // Accept from lower ranks on a helper thread while this one connects to higher ranks, so no
  // order of arrival can deadlock.
  std::vector<int> accept_from, connect_to;
  for (int p : remote_ranks) (p < rank ? accept_from : connect_to).push_back(p);
  std::atomic<bool> stop{false};
  AcceptResult accepted;
  Status accept_status;
  std::thread acceptor;
  if (!accept_from.empty())
    acceptor = std::thread([&] {
      RankScope scope(rank, nranks);
      accept_status = tcp_accept_authenticated(listener.get(), options.secret, rank, nranks,
                                               static_cast<uint32_t>(options.slot_bytes), accept_from, deadline,
                                               &stop, &accepted);
    });
  std::map<int, std::vector<Fd>> connected;
  Status s;
  for (int p : connect_to) {
    std::string text;
    s = store->get(options.store_prefix + std::to_string(p), &text, deadline, "rank " + std::to_string(p));
    SockAddr addr;
    if (s.ok()) s = parse_address(text, 0, &addr);
    for (int k = 0; s.ok() && k < t->nsocks_; ++k) {
      TcpHello hello;
      hello.rank = rank;
      hello.peer = p;
      hello.nranks = nranks;
      hello.sock = static_cast<uint32_t>(k);
      hello.nsocks = static_cast<uint32_t>(t->nsocks_);
      hello.slot_bytes = static_cast<uint32_t>(options.slot_bytes);
      Fd fd;
      s = tcp_connect_authenticated(addr, options.secret, hello, deadline, &fd);
      if (s.ok()) connected[p].push_back(std::move(fd));
    }
    if (!s.ok()) break;
  }
  if (!s.ok()) stop.store(true, std::memory_order_release);
  if (acceptor.joinable()) acceptor.join();
  ACCORD_TRY(std::move(s));
  ACCORD_TRY(std::move(accept_status));
  listener.reset();  // strangers arriving after init find a closed port
  t->dropped_ = accepted.dropped;

  PeerShape shape{options.nslots, options.slot_bytes};
  for (auto* group : {&connected, &accepted.sockets})
    for (auto& [p, socks] : *group)
      t->peers_[static_cast<size_t>(p)] =
          std::make_unique<TcpPeer>(rank, p, std::move(socks), shape, &t->options_.policy, &t->bell_);
  t->progress_ = std::thread([tp = t.get(), nranks] {
    RankScope scope(tp->rank_, nranks);
    tp->progress_loop();
  });
  LOG_INFO(kNet, "rank %d: TCP transport ready on %s (%s): %zu remote peers, %d sockets each, %zu slots x %zu KiB",
           rank, t->ifname_.c_str(), t->listen_addr_.to_string().c_str(), remote_ranks.size(), t->nsocks_,
           options.nslots, options.slot_bytes >> 10);
  *out = std::move(t);
  return Status::success();
}

SendChannel* TcpTransport::sender(int peer) const {
  const TcpPeer* p = peers_[static_cast<size_t>(peer)].get();
  return p ? p->sender() : nullptr;
}

TcpPeer* TcpTransport::peer(int rank) const { return peers_[static_cast<size_t>(rank)].get(); }

RecvChannel* TcpTransport::receiver(int peer) const {
  const TcpPeer* p = peers_[static_cast<size_t>(peer)].get();
  return p ? p->receiver() : nullptr;
}

void TcpTransport::progress_loop() {
  std::vector<pollfd> fds;
  std::vector<std::pair<TcpPeer*, size_t>> owner;
  bool closing = false, goodbyes = false;
  int64_t flush_until = 0, drain_until = 0;
  for (;;) {
    // Raise `sleeping` before looking at the rings (ProgressBell::ring pairs with this fence).
    bell_.sleeping.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const int64_t now = now_ns();
    if (!closing && stop_.load(std::memory_order_acquire)) {
      closing = true;
      flush_until = now + options_.linger_ms * 1000000LL;
    }
    bool all_flushed = true, all_done = true;
    for (auto& p : peers_) {
      if (!p) continue;
      p->enqueue_posted();
      if (!closing) p->unblock_if_room();
      all_flushed = all_flushed && p->flushed();
      all_done = all_done && p->done_for_close();
    }
    if (closing) {
      if (!goodbyes && (all_flushed || now >= flush_until)) {
        if (!all_flushed)
          LOG_WARN(kNet, "rank %d: closing TCP connections with messages not yet sent after %lld ms (peers not "
                   "reading)", rank_, static_cast<long long>(options_.linger_ms));
        for (auto& p : peers_)
          if (p) p->queue_goodbyes();
        goodbyes = true;
        drain_until = now + kDrainMs * 1000000LL;
      }
      if (goodbyes && (all_done || now >= drain_until)) break;
    }
    fds.clear();
    owner.clear();
    fds.push_back({bell_.fd(), POLLIN, 0});
    owner.emplace_back(nullptr, 0);
    for (auto& p : peers_) {
      if (!p || (p->failed() && !closing)) continue;
      for (size_t s = 0; s < p->nsocks(); ++s) {
        const short ev = p->poll_events(s, closing);
        if (ev < 0) continue;
        fds.push_back({p->fd(s), ev, 0});
        owner.emplace_back(p.get(), s);
      }
    }
    poll(fds.data(), fds.size(), closing ? 10 : 100);
    bell_.sleeping.store(0, std::memory_order_relaxed);
    if (fds[0].revents) bell_.drain();
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents) owner[i].first->on_events(owner[i].second, fds[i].revents, closing);
    const int64_t after = now_ns();
    for (auto& p : peers_)
      if (p) p->check_liveness(after);
  }
}

TcpTransport::~TcpTransport() {
  if (progress_.joinable()) {
    stop_.store(true, std::memory_order_release);
    bell_.sleeping.store(1, std::memory_order_relaxed);  // make sure ring() writes
    bell_.ring();
    progress_.join();
  }
}

}  // namespace accord
