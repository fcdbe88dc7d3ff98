// FIFO schedules (collectives on the FIFOs, and sends and receives) as kernels that never wait
// on a peer inside, the stream waiting between them.
//
// Note [Waiting FIFOs]
// ~~~~~~~~~~~~~~~~~~~~
// Without MPS a GPU runs one process's kernels at a time, in time slices (Note [Shared GPU
// sync], gpu_sync.cpp): a FIFO kernel that polls a slot its peer's kernel fills waits for the
// end of its slice at every hand-off. Where a job's hand-offs wait (DeviceEngine::
// hand_offs_wait_: the job's GPU sync is "wait", or the job is staged, whose hand-offs all wait
// at stream level), every FIFO schedule it launches runs on the same FIFOs and the same FIFO
// kernel, cut into kernels whose polls all succeed at once:
//  - a collective (a job on the FIFOs: ranks on other hosts, ACCORD_DEVICE_PROTO=fifo; or a
//    direct job's call that the tuner leaves on the FIFOs): one kernel per step that carries a
//    message (a send, a receive, a receive-reduce-send, or kReduceAll's receives from every
//    rank), with the copies around it;
//  - a batch of sends and receives (Note [Point-to-point schedules]): consecutive steps that
//    are all sends (and the copies to itself) or all receives, at most one message per peer:
//    one half of a round of Note [Point-to-point progress].
// Before a kernel, the stream waits for what its steps would poll (DeviceEngine::WaitEnd, per
// peer and FIFO table, all in this rank's memory as its GPU addresses it):
//  - a receive of message m from p: the slot header's seq reaches m + 1 (the FIFO from p is
//    this rank's: its GPU memory, its shared-memory segment for a host-staged pair, its pinned
//    "in" FIFO that the recv pump fills for a peer over TCP);
//  - a send of message m to p: p has released message m - nslots. After each kernel that
//    received from p, this rank's stream writes how many of p's messages it has released into
//    FifoCtrl::reverse_head of the FIFO to p (p's memory), so p waits on its own memory, not
//    on the head in this rank's; a peer over TCP has no such word: the wait is on this rank's
//    "out" FIFO's head, which the send pump writes once the transport took the slot.
// The host counts what it queued per FIFO (WaitEnd::sent, ::recvd): every kernel of such a job
// that uses the FIFOs comes through here, so these are the kernels' own counts (DevFifo::count).
// Pairs without a point-to-point FIFO send on the collectives' (wait_end gives the same end).
// No deadlock that the spinning kernel avoids: the kernels are the schedule's steps in order,
// and each wait is one the spinning kernel makes at the same point (a kernel waits for all its
// steps' conditions before it starts rather than one after another: a collective's kernel has
// one step; a batch's kernel has messages to different peers in one direction, none of whose
// conditions needs another of them). Tags and sizes are still checked in the kernel (a
// mismatch is an error naming the peer). A peer that dies or never comes: the watchdog's
// release_waits writes every word a stream waits on (fifo_wait records them) after the abort,
// on a stream of its own (rescue_). Cost: a kernel per step of a collective that carries a
// message (hundreds for a 64 MiB all-reduce) and 2 a round of a batch, and a stream write and
// wait per message. Not met on hardware (HARDWARE_RISKS.md, the waiting protocol's items): a
// stream wait on host memory that a pump thread or another process's stream writes, and what
// a kernel per slot costs.
//
// Note [Copy-engine messages]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A FIFO in host memory (a host-staged pair's, in the receiver's shared-memory segment; a TCP
// peer's "out" and "in", pinned) is crossed by the kernel's loads and stores over PCIe, one
// block (engine.cpp, call_blocks: 16 blocks polling host flags halved the bandwidth on an
// H200). Where the stream already waited for a batch's slots (above), a copy engine moves a
// message of ACCORD_P2P_COPY_MIN_BYTES (64 KiB) or more instead, on the same stream: a send's
// payload from the user's buffer into its slot before the kernel, a receive's from its slot
// into the user's buffer before the kernel; the kernel's step is marked copied (Step::copied)
// and only hands the slot off (a send posts the size, tag and seq; a receive checks them and
// releases the slot), so counts, tags and sizes are checked as before. A message of the wrong size or tag
// is still an error naming the peer (the receive's copy has then moved bytes of a call that
// fails anyway). Collectives keep the kernel: their steps reduce as they move. Both ends choose
// alone (a slot's bytes are the same however they got there). Not met on hardware: whether a
// copy engine's writes into host memory are visible to the peer's copy engine once the kernel
// after it posted the seq (the staged protocol's question, HARDWARE_RISKS.md), and the
// threshold, which is a guess: below it a copy's launch may cost more than the kernel's stores
// (ACCORD_P2P_COPY_MIN_BYTES=-1 keeps every message on the kernel: the A/B of gpu-check.sh).
#include <cstring>

#include "collectives/communicator.hpp"
#include "core/log.hpp"

namespace accord {

DeviceEngine::WaitEnd& DeviceEngine::wait_end(int peer, bool p2p) {
  const size_t at = static_cast<size_t>(peer);
  const size_t n = static_cast<size_t>(nranks_);
  return p2p && wait_ends_[n + at].nslots != 0 ? wait_ends_[n + at] : wait_ends_[at];
}

namespace {

// Calls f(peer, receive) for every message step `s` takes: a receive or a send per peer.
template <class F>
void messages_of(const Step& s, int rank, int nranks, F f) {
  switch (s.kind) {
    case StepKind::kSend:
      f(s.send_peer, false);
      break;
    case StepKind::kRecv:
    case StepKind::kRecvReduce:
      f(s.recv_peer, true);
      break;
    case StepKind::kRecvReduceSend:
    case StepKind::kRecvReduceCopySend:
    case StepKind::kRecvCopySend:
      f(s.recv_peer, true);
      f(s.send_peer, false);
      break;
    case StepKind::kReduceAll:
      for (int r = 0; r < nranks; ++r)
        if (r != rank) f(r, true);
      break;
    case StepKind::kCopy:
      break;
  }
}

}  // namespace

// The steps of the next kernel from steps[*i] on (see the Note for which go together): a
// collective's, one step that carries a message with the copies around it; a batch's, steps
// in one direction, at most one message per peer. *messages: whether any step carries one.
static Schedule next_kernel(const std::vector<Step>& steps, size_t* i, int rank, int nranks, bool p2p,
                            bool* messages) {
  Schedule part;
  std::vector<bool> used(static_cast<size_t>(nranks), false);
  int direction = -1;  // of a batch's kernel: 0 sends, 1 receives; -1: no message yet
  *messages = false;
  for (; *i < steps.size(); ++*i) {
    const Step& s = steps[*i];
    bool fits = true, any = false;
    messages_of(s, rank, nranks, [&](int peer, bool recv) {
      any = true;
      if (!p2p) {
        fits = fits && !*messages;
        return;
      }
      const int d = recv ? 1 : 0;
      fits = fits && (direction < 0 || direction == d) && !used[static_cast<size_t>(peer)];
      direction = fits ? d : direction;
      if (fits) used[static_cast<size_t>(peer)] = true;
    });
    if (!fits) break;
    *messages = *messages || any;
    part.steps.push_back(s);
  }
  return part;
}

Status DeviceEngine::launch_fifo_waiting(const char* name, const Schedule& sched, const dev::DevLaunch& launch,
                                         Stream us, void* user_stream, bool p2p) {
  auto* ctl = static_cast<dev::DevCtl*>(ctl_dev_);
  Status failed;
  bool queued = false;  // some kernel or wait of this call is on the stream
  for (size_t i = 0; i < sched.steps.size() && failed.ok();) {
    bool messages = false;
    Schedule part = next_kernel(sched.steps, &i, rank_, nranks_, p2p, &messages);
    // The kernel's call counts as begun once the stream reaches its waits: the watchdog's
    // deadline runs from there (Note [Device watchdog]), as for a kernel that polls.
    if (messages) failed = rt_->stream_write_value64(us, &ctl->started, dev_seq_ + 1);
    queued = queued || messages;
    for (const Step& s : part.steps)
      messages_of(s, rank_, nranks_, [&](int peer, bool recv) {
        if (!failed.ok()) return;
        WaitEnd& w = wait_end(peer, p2p);
        if (recv) {
          auto* seq = reinterpret_cast<uint32_t*>(w.headers + (w.recvd % w.nslots) * dev::kSlotHeaderBytes);
          failed = fifo_wait(us, seq, w.recvd + 1, peer);
        } else if (w.sent >= w.nslots) {
          failed = fifo_wait(us, w.released, w.sent + 1 - w.nslots, peer);
        }
      });
    if (failed.ok() && p2p) failed = copy_messages(&part, us);
    if (failed.ok()) {
      dev::DevLaunch l = launch;
      Status st = launch_schedule(name, part, &l, us, user_stream, /*direct=*/false, p2p);
      if (!st.ok()) return queued ? queued_in_part(name, st) : st;
      queued = true;
    }
    for (const Step& s : part.steps)
      messages_of(s, rank_, nranks_, [&](int peer, bool recv) {
        if (!failed.ok()) return;
        WaitEnd& w = wait_end(peer, p2p);
        if (!recv) {
          ++w.sent;
        } else if (++w.recvd, w.tell != nullptr) {
          failed = rt_->stream_write_value32(us, w.tell, w.recvd)
                       .prefix(format("telling rank %d it may reuse %u FIFO slots: ", peer, w.recvd));
        }
      });
  }
  if (failed.ok()) return failed;
  return queued_in_part(name, failed.prefix(format("rank %d: %s: ", rank_, name)));
}

// Note [Copy-engine messages]: the sends and receives of a batch's kernel through FIFOs in
// host memory, of copy_min_bytes() or more, moved on `us` and marked copied; after the
// stream's waits for their slots, before the kernel.
Status DeviceEngine::copy_messages(Schedule* part, Stream us) {
  for (Step& s : part->steps) {
    const bool send = s.kind == StepKind::kSend;
    if ((!send && s.kind != StepKind::kRecv) || s.bytes < copy_min_bytes()) continue;
    const int peer = send ? s.send_peer : s.recv_peer;
    const WaitEnd& w = wait_end(peer, /*p2p=*/true);
    if ((send ? w.send_slots : w.recv_slots) == nullptr) continue;  // GPU memory: the kernel moves it
    uint8_t* slot = send ? w.send_slots + (w.sent % w.nslots) * w.slot_stride
                         : w.recv_slots + (w.recvd % w.nslots) * w.slot_stride;
    ACCORD_TRY((send ? rt_->copy_async(CopyKind::kDeviceToHost, slot, reinterpret_cast<const void*>(s.src_off),
                                       s.bytes, us)
                     : rt_->copy_async(CopyKind::kHostToDevice, reinterpret_cast<void*>(s.dst_off), slot, s.bytes, us))
                   .prefix(format("%s of %zu bytes %s rank %d by a copy engine: ", send ? "a send" : "a receive",
                                  s.bytes, send ? "to" : "from", peer)));
    s.copied = true;
    ++copied_messages_;
  }
  return Status::success();
}

Status DeviceEngine::fifo_wait(Stream us, uint32_t* word, uint32_t value, int peer) {
  {
    // Before the wait is queued: release_waits must reach past it.
    std::lock_guard<std::mutex> lock(fifo_waits_mu_);
    uint32_t& last = fifo_waits_[word];
    if (static_cast<int32_t>(value - last) > 0 || last == 0) last = value;
  }
  // The peer this stream waits on, for the watchdog's message (as a spinning kernel says after
  // a long wait): DevCtl is pinned host memory the host reads freely.
  Status s = rt_->stream_write_value32(us, &static_cast<dev::DevCtl*>(ctl_dev_)->waiting_peer,
                                       static_cast<uint32_t>(peer));
  if (s.ok()) s = rt_->stream_wait_value32(us, word, value, DeviceRuntime::WaitCondition::kGeq);
  return s.prefix(format("waiting for rank %d: ", peer));
}

void DeviceEngine::release_waits() {
  if (direct_ != nullptr) direct_->release_waits();
  if (rescue_.id == 0) return;
  std::lock_guard<std::mutex> lock(fifo_waits_mu_);
  for (const auto& [word, value] : fifo_waits_) {
    Status s = rt_->stream_write_value32(rescue_, word, value);
    if (!s.ok()) {
      LOG_WARN(kGpu, "rank %d: ending the stream's wait for a FIFO hand-off failed: %s", rank_, s.message().c_str());
      return;
    }
  }
}

// Some of a call's kernels and waits are queued (the waiting and staged forms, Note [Waiting
// protocol]; Note [Waiting FIFOs]), then `failed`: its peers may be in it already, and this
// rank's rounds or counts no longer match theirs.
Status DeviceEngine::queued_in_part(const std::string& what, const Status& failed) {
  Status s(failed.code(), format("rank %d: %s on GPU %d: queued in part, then: %s; the communicator cannot go on: "
                                 "destroy it and create a new one%s",
                                 rank_, what.c_str(), device_, failed.message().c_str(), dead_peer_note().c_str()));
  comm_.set_sticky(s);
  __atomic_store_n(&static_cast<dev::DevCtl*>(ctl_host_)->abort, 1u, __ATOMIC_RELEASE);
  release_waits();
  return s;
}

}  // namespace accord
