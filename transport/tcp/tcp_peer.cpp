// Rings, frames and channels of one TCP peer (see tcp_peer.hpp, Notes [TCP framing] and
// [TCP liveness]).
#include "transport/tcp/tcp_peer.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/log.hpp"

namespace accord {
namespace {

constexpr int64_t kHalfClosedGraceNs = 300 * 1000000LL;

uint8_t* alloc_ring(size_t bytes) {
  // Page-aligned so that payloads start aligned for the reduction kernels.
  void* p = std::aligned_alloc(4096, (bytes + 4095) & ~size_t{4095});
  return static_cast<uint8_t*>(p);
}

}  // namespace

ProgressBell::ProgressBell() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
ProgressBell::~ProgressBell() {
  if (fd_ >= 0) ::close(fd_);
}
void ProgressBell::ring() {
  // Pairs with the fence the progress thread makes after raising `sleeping` (Dekker): either
  // it sees our update before it polls, or we see it asleep and wake it.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleeping.load(std::memory_order_relaxed) == 0) return;
  uint64_t one = 1;
  ssize_t n = ::write(fd_, &one, sizeof one);
  (void)n;
}
void ProgressBell::drain() {
  uint64_t v;
  ssize_t n = ::read(fd_, &v, sizeof v);
  (void)n;
}

// ---- channels ------------------------------------------------------------------------------

class TcpSender final : public SendChannel {
 public:
  explicit TcpSender(TcpPeer* p) : p_(p) {}
  Status acquire_like(size_t bytes, const void* /*like*/, void** slot,
                      const WaitContext& ctx) override {
    const uint32_t nslots = static_cast<uint32_t>(p_->shape_.nslots);
    if (bytes > p_->shape_.slot_bytes)
      return error(ACCORD_ERR_INTERNAL, "rank %d: a %zu-byte message to rank %d exceeds the TCP slot of %zu bytes",
                   ctx.self_rank, bytes, p_->peer_, p_->shape_.slot_bytes);
    auto ready = [&] {
      return p_->failed() || next_ - p_->tx_done_.load(std::memory_order_acquire) < nslots;
    };
    ACCORD_TRY(wait_for(ready, &p_->tx_word_, &p_->tx_sleeping_, *p_->policy_, ctx, "TCP send space"));
    if (p_->failed())
      return error(ACCORD_ERR_REMOTE, "rank %d: %s (seq %llu) could not send to rank %d over TCP: %s", ctx.self_rank,
                   ctx.operation, static_cast<unsigned long long>(ctx.seq), p_->peer_, p_->cause_.c_str());
    *slot = p_->tx_slot(next_ % nslots);
    return Status::success();
  }
  void post(size_t bytes, uint32_t tag) override {
    p_->tx_meta_[next_ % p_->shape_.nslots] = {static_cast<uint32_t>(bytes), tag};
    ++next_;
    p_->tx_posted_.store(next_, std::memory_order_release);
    p_->bell_->ring();
  }
  size_t max_bytes() const override { return p_->shape_.slot_bytes; }
  const char* name() const override { return "tcp"; }

 private:
  TcpPeer* p_;
  uint32_t next_ = 0;  // messages posted
};

class TcpReceiver final : public RecvChannel {
 public:
  explicit TcpReceiver(TcpPeer* p) : p_(p) {}
  Status wait(const void** data, size_t* bytes, uint32_t* tag, const WaitContext& ctx) override {
    const size_t index = next_ % p_->shape_.nslots;
    TcpPeer::RxSlot& s = p_->rx_slots_[index];
    auto complete = [&] { return s.ready.load(std::memory_order_acquire) == next_ + 1; };
    auto ready = [&] { return complete() || p_->failed(); };
    ACCORD_TRY(wait_for(ready, &p_->rx_word_, &p_->rx_sleeping_, *p_->policy_, ctx, "a TCP message"));
    // Messages that arrived complete before the peer went away are still delivered.
    if (!complete())
      return error(ACCORD_ERR_REMOTE, "rank %d: %s (seq %llu) waited for a message from rank %d over TCP: %s",
                   ctx.self_rank, ctx.operation, static_cast<unsigned long long>(ctx.seq), p_->peer_,
                   p_->cause_.c_str());
    *data = p_->rx_slot(index);
    *bytes = s.total;
    *tag = s.tag;
    return Status::success();
  }
  void release() override {
    ++next_;
    p_->rx_released_.store(next_, std::memory_order_release);
    p_->bell_->ring();  // a socket may be blocked on this slot
  }

 private:
  TcpPeer* p_;
  uint32_t next_ = 0;  // messages released
};

// ---- peer ----------------------------------------------------------------------------------

TcpPeer::TcpPeer(int rank, int peer, std::vector<Fd> socks, PeerShape shape, const WaitPolicy* policy,
                 ProgressBell* bell)
    : rank_(rank), peer_(peer), shape_(shape), policy_(policy), bell_(bell) {
  socks_.resize(socks.size());
  for (size_t i = 0; i < socks.size(); ++i) socks_[i].fd = std::move(socks[i]);
  tx_data_.reset(alloc_ring(shape.nslots * shape.slot_bytes));
  rx_data_.reset(alloc_ring(shape.nslots * shape.slot_bytes));
  stride_.store(shape.slot_bytes, std::memory_order_relaxed);
  tx_base_.store(tx_data_.get(), std::memory_order_release);
  rx_base_.store(rx_data_.get(), std::memory_order_release);
  tx_meta_.resize(shape.nslots);
  tx_pieces_left_.assign(shape.nslots, 0);
  rx_slots_.reset(new RxSlot[shape.nslots]);
  sender_ = std::make_unique<TcpSender>(this);
  receiver_ = std::make_unique<TcpReceiver>(this);
}

TcpPeer::~TcpPeer() = default;

// Note [TCP rings in the caller's memory]. Before any message: the progress thread reads the
// bases with acquire loads, and nothing refers to the rings of its own any more.
void TcpPeer::use_rings(uint8_t* tx, uint8_t* rx, size_t stride) {
  stride_.store(stride, std::memory_order_relaxed);
  tx_base_.store(tx, std::memory_order_release);
  rx_base_.store(rx, std::memory_order_release);
  tx_data_.reset();
  rx_data_.reset();
}

bool TcpPeer::arrived(uint32_t m, uint32_t* bytes, uint32_t* tag) const {
  const RxSlot& s = rx_slots_[m % shape_.nslots];
  if (s.ready.load(std::memory_order_acquire) != m + 1) return false;
  *bytes = s.total;
  *tag = s.tag;
  return true;
}

// As TcpReceiver::wait: asleep on the futex word the progress thread bumps, and messages that
// arrived complete before the peer went away are still delivered.
Status TcpPeer::wait_arrived(uint32_t m, const WaitContext& ctx) {
  const RxSlot& s = rx_slots_[m % shape_.nslots];
  auto complete = [&] { return s.ready.load(std::memory_order_acquire) == m + 1; };
  ACCORD_TRY(wait_for([&] { return complete() || failed(); }, &rx_word_, &rx_sleeping_, *policy_, ctx,
                      "a TCP message"));
  if (complete()) return Status::success();
  return error(ACCORD_ERR_REMOTE, "rank %d: %s waited for message %u from rank %d over TCP: %s", ctx.self_rank,
               ctx.operation, static_cast<unsigned>(m), peer_, cause_.c_str());
}

void TcpPeer::release_to(uint32_t n) {
  if (rx_released_.load(std::memory_order_relaxed) == n) return;
  rx_released_.store(n, std::memory_order_release);
  bell_->ring();  // a socket may be blocked on a slot now free
}

void TcpPeer::notify_tx() {
  tx_word_.fetch_add(1, std::memory_order_release);
  wake_if_sleeping(&tx_word_, &tx_sleeping_);
}

void TcpPeer::notify_rx() {
  rx_word_.fetch_add(1, std::memory_order_release);
  wake_if_sleeping(&rx_word_, &rx_sleeping_);
}

void TcpPeer::fail(std::string cause) {
  if (failed()) return;
  cause_ = std::move(cause);
  LOG_INFO(kNet, "rank %d: TCP link to rank %d is down: %s", rank_, peer_, cause_.c_str());
  failed_.store(true, std::memory_order_release);
  notify_tx();
  notify_rx();
}

void TcpPeer::enqueue_posted() {
  const uint32_t posted = tx_posted_.load(std::memory_order_acquire);
  const uint32_t nslots = static_cast<uint32_t>(shape_.nslots);
  const uint32_t n = static_cast<uint32_t>(socks_.size());
  while (tx_queued_ != posted) {
    const uint32_t m = tx_queued_++;
    const uint32_t slot = m % nslots;
    const TxMeta meta = tx_meta_[slot];
    const uint32_t pieces = std::clamp<uint32_t>(meta.bytes / kMinPieceBytes, 1, n);
    const uint32_t base = meta.bytes / pieces, extra = meta.bytes % pieces;
    uint32_t off = 0;
    for (uint32_t i = 0; i < pieces; ++i) {
      const uint32_t len = base + (i < extra ? 1 : 0);
      TxFrame f{{kFrameData, m, meta.tag, meta.bytes, off, len}, tx_slot(slot) + off, 0, static_cast<int>(slot)};
      socks_[(m + i) % n].txq.push_back(f);
      off += len;
    }
    tx_pieces_left_[slot] = pieces;
  }
}

short TcpPeer::poll_events(size_t s, bool closing) const {
  const Sock& k = socks_[s];
  if (k.finished) return -1;
  short ev = 0;
  if (!k.txq.empty()) ev |= POLLOUT;
  if (closing) {
    ev |= POLLIN | POLLRDHUP;
  } else if (k.blocked) {
    // Until the receiver frees a slot, only a hang-up matters; the bell wakes us on release.
    if (!k.peer_closed) ev |= POLLRDHUP;
  } else {
    ev |= POLLIN | POLLRDHUP;
  }
  return ev == 0 ? -1 : ev;
}

void TcpPeer::unblock_if_room() {
  const uint32_t released = rx_released_.load(std::memory_order_acquire);
  for (size_t s = 0; s < socks_.size(); ++s) {
    Sock& k = socks_[s];
    if (!k.blocked || k.finished || k.rx.seq - released >= shape_.nslots) continue;
    k.blocked = false;
    // The header is already read: the rest of the frame (maybe nothing) need not raise POLLIN.
    recv_some(s);
  }
}

void TcpPeer::on_events(size_t s, short revents, bool closing) {
  Sock& k = socks_[s];
  if (k.finished) return;
  if ((revents & (POLLOUT | POLLERR | POLLHUP)) && !k.txq.empty()) send_some(s);
  if (k.finished) return;
  if (closing) {
    if (revents & (POLLIN | POLLRDHUP | POLLERR | POLLHUP)) discard_some(s);
    return;
  }
  if (k.blocked) {
    if (revents & (POLLRDHUP | POLLHUP)) k.peer_closed = true;
    if (revents & POLLERR) {
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(k.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) finish_socket(s, std::strerror(err), true);
    }
    return;
  }
  if (revents & (POLLIN | POLLRDHUP | POLLERR | POLLHUP)) recv_some(s);
}

void TcpPeer::send_some(size_t s) {
  Sock& k = socks_[s];
  while (!k.txq.empty()) {
    TxFrame& f = k.txq.front();
    const size_t total = sizeof(FrameHeader) + f.header.piece_bytes;
    iovec iov[2];
    int iovcnt = 0;
    if (f.written < sizeof(FrameHeader)) {
      iov[iovcnt++] = {reinterpret_cast<uint8_t*>(&f.header) + f.written, sizeof(FrameHeader) - f.written};
      if (f.header.piece_bytes > 0) iov[iovcnt++] = {const_cast<uint8_t*>(f.payload), f.header.piece_bytes};
    } else {
      const size_t done = f.written - sizeof(FrameHeader);
      iov[iovcnt++] = {const_cast<uint8_t*>(f.payload) + done, f.header.piece_bytes - done};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(iovcnt);
    ssize_t n = sendmsg(k.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR) continue;
      finish_socket(s, std::strerror(errno), true);
      return;
    }
    f.written += static_cast<size_t>(n);
    if (f.written < total) continue;
    const int slot = f.slot;
    k.txq.pop_front();
    if (slot < 0) {
      // Goodbye written: nothing more will be sent on this socket.
      shutdown(k.fd.get(), SHUT_WR);
      continue;
    }
    if (--tx_pieces_left_[static_cast<size_t>(slot)] != 0) continue;
    // Slots complete out of order across sockets; the ring frees them in order.
    uint32_t done = tx_done_.load(std::memory_order_relaxed);
    const uint32_t before = done;
    while (done != tx_queued_ && tx_pieces_left_[done % shape_.nslots] == 0) ++done;
    if (done != before) {
      tx_done_.store(done, std::memory_order_release);
      notify_tx();
    }
  }
}

// Returns true when the frame in k.rx may be read into its slot.
bool TcpPeer::accept_header(Sock& k, size_t s) {
  const FrameHeader& h = k.rx;
  auto bad = [&](const char* why) {
    finish_socket(s, nullptr, true);
    fail(format("rank %d sent a malformed TCP frame on socket %zu (%s); do all ranks run the same Accord build?",
                peer_, s, why));
    return false;
  };
  if (h.kind != kFrameData) return bad("unknown frame kind");
  const uint32_t released = rx_released_.load(std::memory_order_acquire);
  if (k.rx_have_seq && static_cast<int32_t>(h.seq - k.rx_last_seq) <= 0) return bad("message numbers out of order");
  if (static_cast<int32_t>(h.seq - released) < 0) return bad("a message that was already delivered");
  if (h.seq - released >= shape_.nslots) {
    k.blocked = true;  // Note [TCP framing]: wait for the receiver to free a slot
    return false;
  }
  if (h.total_bytes > shape_.slot_bytes || h.offset > h.total_bytes || h.piece_bytes > h.total_bytes - h.offset)
    return bad("a piece outside the message or a message larger than a slot");
  RxSlot& slot = rx_slots_[h.seq % shape_.nslots];
  if (!slot.active || slot.seq != h.seq) {
    slot.active = true;
    slot.seq = h.seq;
    slot.total = h.total_bytes;
    slot.tag = h.tag;
    slot.got = 0;
  } else if (slot.total != h.total_bytes || slot.tag != h.tag || h.piece_bytes > slot.total - slot.got) {
    return bad("pieces of one message disagree");
  }
  k.rx_have_seq = true;
  k.rx_last_seq = h.seq;
  return true;
}

void TcpPeer::recv_some(size_t s) {
  Sock& k = socks_[s];
  for (;;) {
    if (k.rx_header_got == sizeof(FrameHeader) && !k.rx_accepted) {
      if (!accept_header(k, s)) return;  // blocked on the ring, or failed
      k.rx_accepted = true;
    }
    if (k.rx_accepted && k.rx_payload_got == k.rx.piece_bytes) {
      RxSlot& slot = rx_slots_[k.rx.seq % shape_.nslots];
      slot.got += k.rx.piece_bytes;
      if (slot.got == slot.total) {
        slot.active = false;
        slot.ready.store(k.rx.seq + 1, std::memory_order_release);
        notify_rx();
      }
      k.rx_header_got = 0;
      k.rx_payload_got = 0;
      k.rx_accepted = false;
      continue;
    }
    const bool header = k.rx_header_got < sizeof(FrameHeader);
    uint8_t* dst = header ? reinterpret_cast<uint8_t*>(&k.rx) + k.rx_header_got
                          : rx_slot(k.rx.seq % shape_.nslots) + k.rx.offset + k.rx_payload_got;
    const size_t want = header ? sizeof(FrameHeader) - k.rx_header_got : k.rx.piece_bytes - k.rx_payload_got;
    ssize_t n = ::recv(k.fd.get(), dst, want, MSG_DONTWAIT);
    if (n == 0) {
      finish_socket(s, "closed", false);
      return;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR) continue;
      finish_socket(s, std::strerror(errno), true);
      return;
    }
    if (!header) {
      k.rx_payload_got += static_cast<size_t>(n);
      continue;
    }
    k.rx_header_got += static_cast<size_t>(n);
    if (k.rx_header_got == sizeof(FrameHeader) && k.rx.kind == kFrameGoodbye) {
      k.goodbye = true;
      k.rx_header_got = 0;
    }
  }
}

void TcpPeer::discard_some(size_t s) {
  Sock& k = socks_[s];
  static thread_local uint8_t sink[64 << 10];
  for (;;) {
    ssize_t n = ::recv(k.fd.get(), sink, sizeof sink, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) k.finished = true;
    return;
  }
}

void TcpPeer::finish_socket(size_t s, const char* how, bool hard) {
  Sock& k = socks_[s];
  k.finished = true;
  k.txq.clear();
  if (first_finish_ns_ == 0) first_finish_ns_ = now_ns();
  if (hard && how != nullptr) {
    fail(format("rank %d's TCP socket %zu of %zu failed (%s): the process died, or its host or the network went "
                "down; look at rank %d's output", peer_, s + 1, socks_.size(), how, peer_));
    return;
  }
  check_liveness(now_ns());
}

void TcpPeer::check_liveness(int64_t now) {
  if (failed() || first_finish_ns_ == 0) return;
  bool all = true, goodbye = true;
  for (const Sock& k : socks_) {
    all = all && k.finished;
    goodbye = goodbye && k.goodbye;
  }
  if (!all && now - first_finish_ns_ < kHalfClosedGraceNs) return;
  if (all && goodbye)
    fail(format("rank %d closed its TCP connections cleanly (it destroyed its communicator) while this rank still "
                "expected messages from or room at it; do all ranks make the same calls in the same order?", peer_));
  else
    fail(format("rank %d closed its TCP connection without a goodbye: the process died or was killed; look at "
                "rank %d's output", peer_, peer_));
}

bool TcpPeer::flushed() const {
  if (failed()) return true;
  for (const Sock& k : socks_)
    if (!k.finished && !k.txq.empty()) return false;
  return tx_done_.load(std::memory_order_relaxed) == tx_queued_;
}

void TcpPeer::queue_goodbyes() {
  if (failed()) return;
  for (Sock& k : socks_) {
    if (k.finished || k.goodbye_queued) continue;
    k.goodbye_queued = true;
    k.txq.push_back(TxFrame{{kFrameGoodbye, 0, 0, 0, 0, 0}, nullptr, 0, -1});
  }
}

bool TcpPeer::done_for_close() const {
  if (failed()) return true;
  for (const Sock& k : socks_)
    if (!k.finished) return false;
  return true;
}

}  // namespace accord
