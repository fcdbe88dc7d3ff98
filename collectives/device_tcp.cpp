// GPU buffers between ranks whose pair is TCP (other hosts, another /dev/shm, or
// ACCORD_SHM_DISABLE=1), staged through pinned host memory.
//
// Note [Device data over TCP]: the kernels keep their one protocol (Note [Device FIFOs]): for a
// TCP peer a rank has two FIFOs of its own in pinned host memory, mapped for its GPU, as a
// host-staged pair has in shared memory: "out", which its kernel sends into, and "in", which
// its kernel receives from. Two pump threads per TCP peer connect them to the peer's: the send
// pump waits for the next message in "out" (the slot's seq), sends its bytes and tag on the
// communicator's device TCP transport (sockets of their own: host collectives use the other
// TCP transport, and the two may run at once), and releases the slot (head); the recv pump
// takes the next TCP message, waits for a free slot in "in" (head), copies the message there
// and publishes it (size, tag, then seq). So every message crosses PCIe twice and the network
// once, one after the other: correct and exact, not yet overlapped (NCCL's proxy pipelines
// the copies with the sends in chunks). The pumps poll the kernels' flags (a kernel cannot wake
// a thread): a spin of 50 us, then sleeps of 20 us to 1 ms.
//
// At destroy, after the kernels ended (release_device), the send pumps first send what the
// kernels wrote (the peer's kernel may still wait for it; for up to ACCORD_TIMEOUT_MS), then
// every pump stops. A pump that
// fails (the peer's sockets closed: it died, or it was destroyed while this rank still
// waited) records why; the watchdog fails the collective that waits for that peer
// (Communicator::pump_failure), and not one that no longer needs it.
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
template <typename Ready, typename Stop>
bool poll_until(Ready ready, Stop stop) {
  using Clock = std::chrono::steady_clock;
  const auto spin_until = Clock::now() + std::chrono::microseconds(50);
  auto nap = std::chrono::microseconds(20);
  while (!ready()) {
    if (stop()) return false;
    if (Clock::now() < spin_until) continue;
    std::this_thread::sleep_for(nap);
    nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::microseconds(1000));
  }
  return true;
}

}  // namespace

Status Communicator::add_tcp_pump(int peer, size_t fifo_bytes, void** out_fifo, void** in_fifo) {
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
  *out_fifo = p->out;
  *in_fifo = p->in;
  pumps_.push_back(std::move(p));
  return Status::success();
}

void Communicator::start_tcp_pumps() {
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

void Communicator::stop_tcp_pumps() {
  if (pumps_.empty()) return;
  // Send pumps first send what the kernels wrote, for up to ACCORD_TIMEOUT_MS (a peer that
  // stopped reading would hold them in the TCP wait for ever); then every pump is told to stop.
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
  for (auto& p : pumps_) {
    (void)rt_->free_host_pinned(p->out);
    (void)rt_->free_host_pinned(p->in);
  }
  pumps_.clear();
}

Status Communicator::pump_failure(int peer) {
  for (auto& p : pumps_)
    if (p->peer == peer && p->failed.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(p->mu);
      return p->failure;
    }
  return Status::success();
}

void Communicator::pump_failed(TcpPump* p, Status s, const char* what) {
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

void Communicator::pump_send(TcpPump* p) {
  RankScope scope(rank_, nranks_);
  FifoView out(p->out, shape_, nullptr);
  SendChannel* tcp = tcp_dev_->sender(p->peer);
  const WaitContext ctx = pump_context(rank_, p->peer, &pumps_abort_, "GPU data to a TCP peer");
  const uint32_t nslots = static_cast<uint32_t>(shape_.nslots);
  for (uint32_t m = 0;; ++m) {
    SlotHeader& h = out.headers[m % nslots];
    auto ready = [&] { return h.seq.load(std::memory_order_acquire) == m + 1; };
    // Stopping (1): the kernels have ended, so whatever they wrote is there now.
    if (!poll_until(ready, [&] { return pumps_stop_.load(std::memory_order_acquire) != 0; })) return;
    const size_t bytes = h.size & ((1u << kOffsetShift) - 1);
    const uint32_t tag = h.tag;
    const uint8_t* data = out.slot_data(m % nslots);
    void* slot = nullptr;
    Status s = tcp->acquire_like(bytes, data, &slot, ctx);
    if (!s.ok()) return pump_failed(p, std::move(s), "sending GPU data to");
    std::memcpy(slot, data, bytes);
    tcp->post(bytes, tag);
    out.ctrl->head.store(m + 1, std::memory_order_release);
  }
}

void Communicator::pump_recv(TcpPump* p) {
  RankScope scope(rank_, nranks_);
  FifoView in(p->in, shape_, nullptr);
  RecvChannel* tcp = tcp_dev_->receiver(p->peer);
  const WaitContext ctx = pump_context(rank_, p->peer, &pumps_abort_, "GPU data from a TCP peer");
  const uint32_t nslots = static_cast<uint32_t>(shape_.nslots);
  for (uint32_t m = 0;; ++m) {
    const void* data = nullptr;
    size_t bytes = 0;
    uint32_t tag = 0;
    Status s = tcp->wait(&data, &bytes, &tag, ctx);
    if (!s.ok()) {
      if (pumps_stop_.load(std::memory_order_acquire) == 2) return;  // destroyed
      return pump_failed(p, std::move(s), "receiving GPU data from");
    }
    // A free slot: the kernel has released the message nslots before this one.
    auto room = [&] { return m - in.ctrl->head.load(std::memory_order_acquire) < nslots; };
    if (!poll_until(room, [&] { return pumps_stop_.load(std::memory_order_acquire) == 2; })) return;
    SlotHeader& h = in.headers[m % nslots];
    std::memcpy(in.slot_data(m % nslots), data, bytes);
    h.size = static_cast<uint32_t>(bytes);
    h.tag = tag;
    h.seq.store(m + 1, std::memory_order_release);
    tcp->release();
  }
}

}  // namespace accord
