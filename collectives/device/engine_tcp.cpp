// GPU buffers between ranks whose pair is TCP (other hosts, another /dev/shm, or
// ACCORD_SHM_DISABLE=1), staged through pinned host memory.
//
// Note [Device data over TCP]: the kernels keep their one protocol (Note [Device FIFOs]): for a
// TCP peer a rank has two FIFOs of its own in pinned host memory, mapped for its GPU, as a
// host-staged pair has in shared memory: "out", which its kernel sends into, and "in", which
// its kernel receives from. They are also the rings of the peer's connection on the
// communicator's device TCP transport (sockets of their own: host collectives use the other
// TCP transport, and the two may run at once; Note [TCP rings in the caller's memory] in
// transport/tcp/tcp_peer.hpp), so no byte is copied on the host: the kernel's stores into an
// "out" slot are the PCIe crossing, the transport's progress thread writes that slot to the
// sockets, and on the other side reads the sockets into an "in" slot that the kernel loads.
// Two pump threads per TCP peer (the proxy, as NCCL's) only pass the flags on: the send pump
// waits for the next message in "out" (the slot's seq), posts it to the transport, and gives
// the kernel a slot back (head) once the transport has written it out; the recv pump waits
// until the kernel has released the slot of message m - nslots, hands it to the transport
// (which takes message m only then), sleeps until message m has arrived, and publishes it
// (size, tag, then seq).
//
// Overlap: a FIFO slot (256 KiB by default) is the chunk. Up to nslots slots are in flight each
// way, so while the transport sends slot m the kernel already writes slot m + 1 (and, on the
// receiver, loads slot m - 1 while slot m arrives): the PCIe crossings and the network transfer
// of one call run at once, in slot-sized chunks. A message of one slot or less still crosses
// PCIe, the network and PCIe one after the other (the latency of a small call). The pumps poll
// the kernels' flags (a kernel cannot wake a thread): a spin of 50 us, then sleeps of 20 us
// (while the transport holds slots the kernel may wait for) growing to 1 ms; the recv pump
// sleeps on the transport's futex for arrivals. Never run on a GPU: on hardware the kernel's
// stores to pinned memory and the socket writes of the same slots are ordered by the seq flag
// and the transport's own counters only (HARDWARE_RISKS.md's pinned-memory items apply).
//
// At destroy, after the kernels ended (release_device), the send pumps first post what the
// kernels wrote (the peer's kernel may still wait for it), then every pump stops, and the
// device TCP transport is destroyed (it writes out what was posted while the peer reads it, for
// up to ACCORD_TIMEOUT_MS) before the FIFOs' memory is freed. The receiving side holds nslots
// messages that its kernel has not taken (before the rings were the FIFOs, twice that), so a
// rank that destroys its communicator right after a send of more than nslots slots waits until
// the peer's kernel takes all but the last nslots. A pump that
// fails (the peer's sockets closed: it died, or it was destroyed while this rank still
// waited) records why; the watchdog fails the collective that waits for that peer
// (DeviceEngine::pump_failure), and not one that no longer needs it.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "collectives/communicator.hpp"
#include "core/log.hpp"
#include "transport/shm/fifo.hpp"

namespace accord {
namespace {

// Polls `ready` with a short spin and then growing sleeps, until it is true or `stop` says so.
// While `busy` (messages are in flight that the other side may finish at any moment) the sleeps
// stay short: a slot waits for the pump to notice it.
template <typename Ready, typename Stop, typename Busy>
bool poll_until(Ready ready, Stop stop, Busy busy) {
  using Clock = std::chrono::steady_clock;
  const auto spin_until = Clock::now() + std::chrono::microseconds(50);
  auto nap = std::chrono::microseconds(20);
  while (!ready()) {
    if (stop()) return false;
    if (Clock::now() < spin_until) continue;
    std::this_thread::sleep_for(busy() ? std::chrono::microseconds(20) : nap);
    nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::microseconds(1000));
  }
  return true;
}

}  // namespace

Status DeviceEngine::connect_tcp(StoreClient* store, const TcpOptions& options, Deadline deadline) {
  return TcpTransport::setup(store, rank_, nranks_, remote_ranks_, options, deadline, &tcp_dev_)
      .prefix("GPU data over TCP: ");
}

Status DeviceEngine::add_tcp_pump(int peer, size_t fifo_bytes, void** out_fifo, void** in_fifo) {
  auto p = std::make_unique<TcpPump>();
  p->peer = peer;
  const std::string where = format("rank %d: FIFOs in pinned host memory for GPU data to rank %d over TCP: ", rank_, peer);
  ACCORD_TRY(rt_->alloc_host_pinned(fifo_bytes, &p->out).prefix(where));
  Status s = rt_->alloc_host_pinned(fifo_bytes, &p->in).prefix(where);
  if (!s.ok()) {
    (void)rt_->free_host_pinned(p->out);
    return s;
  }
  std::memset(p->out, 0, fifo_bytes);  // an empty FIFO
  std::memset(p->in, 0, fifo_bytes);
  // The peer's TCP rings are the FIFOs' slots (Note [TCP rings in the caller's memory]): the
  // transport writes the kernel's messages out of "out" and reads the peer's into "in".
  TcpPeer* tp = tcp_dev_->peer(peer);
  if (tp == nullptr || tcp_dev_->sender(peer)->max_bytes() != shape_.slot_bytes) {
    (void)rt_->free_host_pinned(p->out);
    (void)rt_->free_host_pinned(p->in);
    return error(ACCORD_ERR_INTERNAL, "%sthe TCP transport for GPU data has no connection of the FIFOs' shape to rank %d",
                 where.c_str(), peer);
  }
  tp->use_rings(FifoView(p->out, shape_, nullptr).slot_data(0), FifoView(p->in, shape_, nullptr).slot_data(0),
                shape_.slot_stride());
  *out_fifo = p->out;
  *in_fifo = p->in;
  pumps_.push_back(std::move(p));
  return Status::success();
}

void DeviceEngine::start_tcp_pumps() {
  for (auto& p : pumps_) {
    TcpPump* pump = p.get();
    send_pumps_running_.fetch_add(1, std::memory_order_acq_rel);
    pump->send = std::thread([this, pump] {
      pump_send(pump);
      send_pumps_running_.fetch_sub(1, std::memory_order_acq_rel);
    });
    pump->recv = std::thread([this, pump] { pump_recv(pump); });
  }
  if (!pumps_.empty())
    LOG_INFO(kGpu, "rank %d: GPU data to %zu rank%s over TCP, staged through pinned host memory (2 pump threads each)",
             rank_, pumps_.size(), pumps_.size() == 1 ? "" : "s");
}

void DeviceEngine::stop_tcp_pumps() {
  if (pumps_.empty()) return;
  // Send pumps first post what the kernels wrote (they never wait for the transport, but a
  // stuck one is not waited for past ACCORD_TIMEOUT_MS); then every pump is told to stop.
  pumps_stop_.store(1, std::memory_order_release);
  const Deadline deadline = Deadline::after_ms(settings_.timeout_ms);
  while (send_pumps_running_.load(std::memory_order_acquire) > 0 && !deadline.expired())
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  pumps_stop_.store(2, std::memory_order_release);
  pumps_abort_.store(true, std::memory_order_release);
  for (auto& p : pumps_)
    if (p->send.joinable()) p->send.join();
  for (auto& p : pumps_)
    if (p->recv.joinable()) p->recv.join();
  // The transport writes out what was posted and may still receive into the FIFOs: it goes
  // before their memory (Note [TCP rings in the caller's memory]).
  tcp_dev_.reset();
  for (auto& p : pumps_) {
    (void)rt_->free_host_pinned(p->out);
    (void)rt_->free_host_pinned(p->in);
  }
  pumps_.clear();
}

Status DeviceEngine::pump_failure(int peer) {
  for (auto& p : pumps_)
    if (p->peer == peer && p->failed.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(p->mu);
      return p->failure;
    }
  return Status::success();
}

void DeviceEngine::pump_failed(TcpPump* p, Status s, const char* what) {
  std::lock_guard<std::mutex> lock(p->mu);
  p->failure = std::move(s).prefix(format("rank %d: %s rank %d over TCP: ", rank_, what, p->peer));
  p->failed.store(true, std::memory_order_release);
}

namespace {
WaitContext pump_context(int rank, int peer, const std::atomic<bool>* abort, const char* what) {
  WaitContext ctx;
  ctx.deadline = Deadline::never();  // an idle job sends nothing for as long as it likes
  ctx.abort_flag = abort;
  ctx.self_rank = rank;
  ctx.peer_rank = peer;
  ctx.operation = what;
  return ctx;
}
}  // namespace

// Message m of "out" goes out of its slot as it is (the TCP ring is the FIFO); the slot is
// released to the kernel once the transport has written it to the sockets.
void DeviceEngine::pump_send(TcpPump* p) {
  RankScope scope(rank_, nranks_);
  FifoView out(p->out, shape_, nullptr);
  SendChannel* tcp = tcp_dev_->sender(p->peer);
  TcpPeer* tp = tcp_dev_->peer(p->peer);
  const WaitContext ctx = pump_context(rank_, p->peer, &pumps_abort_, "GPU data to a TCP peer");
  const uint32_t nslots = static_cast<uint32_t>(shape_.nslots);
  uint32_t released = 0;
  auto release_sent = [&] {
    const uint32_t sent = tp->sent();
    if (sent != released) out.ctrl->head.store(released = sent, std::memory_order_release);
  };
  for (uint32_t m = 0;; ++m) {
    SlotHeader& h = out.headers[m % nslots];
    // A peer that fails while posted messages are still unsent: the kernel may wait for their
    // slots, so the failure is recorded now (the watchdog ends the call that waits).
    auto lost = [&] { return released != m && tp->failed(); };
    auto ready = [&] {
      release_sent();
      return h.seq.load(std::memory_order_acquire) == m + 1 || lost();
    };
    // Stopping (1): the kernels have ended, so whatever they wrote is there now (and what was
    // posted, the transport writes out before it closes).
    if (!poll_until(ready, [&] { return pumps_stop_.load(std::memory_order_acquire) != 0; },
                    [&] { return released != m; }))
      return;
    if (h.seq.load(std::memory_order_acquire) != m + 1)
      return pump_failed(p,
                         error(ACCORD_ERR_REMOTE, "%u message%s not sent: %s", m - released,
                               m - released == 1 ? "" : "s", tp->failure().c_str()),
                         "sending GPU data to");
    const size_t bytes = h.size & ((1u << kOffsetShift) - 1);
    const uint8_t* data = out.slot_data(m % nslots);
    void* slot = nullptr;
    // Never waits: the kernel wrote slot m after the transport had sent message m - nslots.
    Status s = tcp->acquire_like(bytes, data, &slot, ctx);
    if (!s.ok()) return pump_failed(p, std::move(s), "sending GPU data to");
    if (slot != data) std::memcpy(slot, data, bytes);  // not expected: the rings are the FIFO
    tcp->post(bytes, h.tag);
  }
}

// Message m arrives from the sockets straight into slot m % nslots of "in" (the TCP ring is the
// FIFO): the pump first waits until the kernel has released message m - nslots and hands that
// slot to the transport (release_to), then sleeps until message m is complete and publishes its
// header.
void DeviceEngine::pump_recv(TcpPump* p) {
  RankScope scope(rank_, nranks_);
  FifoView in(p->in, shape_, nullptr);
  TcpPeer* tp = tcp_dev_->peer(p->peer);
  const WaitContext ctx = pump_context(rank_, p->peer, &pumps_abort_, "GPU data from a TCP peer");
  const uint32_t nslots = static_cast<uint32_t>(shape_.nslots);
  uint32_t head = 0;
  for (uint32_t m = 0;; ++m) {
    auto room = [&] {
      head = in.ctrl->head.load(std::memory_order_acquire);
      tp->release_to(head);
      return m - head < nslots;
    };
    // Full only while the kernel is behind (or not yet at the call): the naps may grow.
    if (!poll_until(room, [&] { return pumps_stop_.load(std::memory_order_acquire) == 2; },
                    [] { return false; }))
      return;
    Status s = tp->wait_arrived(m, ctx);
    if (!s.ok()) {
      if (pumps_stop_.load(std::memory_order_acquire) == 2) return;  // destroyed
      return pump_failed(p, std::move(s), "receiving GPU data from");
    }
    uint32_t bytes = 0, tag = 0;
    (void)tp->arrived(m, &bytes, &tag);
    SlotHeader& h = in.headers[m % nslots];
    h.size = bytes;
    h.tag = tag;
    h.seq.store(m + 1, std::memory_order_release);
  }
}

}  // namespace accord
