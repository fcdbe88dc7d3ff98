// Point-to-point: sends and receives between two ranks on host buffers, NCCL's ncclSend /
// ncclRecv. Only the two ranks of a pair take part; the others are not involved, so no
// schedule: the communicator moves the messages on its channels itself.
//
// Note [Point-to-point progress]: the calls of one group (all-to-all: a send to and a receive
// from every peer) must progress together, or two ranks that each send before they receive a
// message larger than the channel's FIFO wait for each other forever. So a batch is cut into
// chunks (at most chunk_bytes_ and one slot) and runs in rounds: in each round a rank sends
// the next chunk to every peer it still has bytes for, then receives the next chunk from
// every peer it still expects bytes from. A rank waits for a receive only after posting its
// sends of that round, so whoever it waits for is at an earlier round or has posted; a send
// waits only for a rank at least nslots - 2 rounds behind (it consumes one message per
// round): along any chain of waits the rounds decrease, and no cycle can form. Several
// calls for one peer go in call order, NCCL's matching rule, one after the other.
//
// Every message carries the tag of (send, count, dtype) of its call; the receiver compares it
// with its own call's, so a count or dtype that differs between the two ranks, or a peer that
// is in another collective, is ACCORD_ERR_MISMATCH instead of a silent misread.
// Cost: bytes / chunk messages per call, one copy in and one copy out of the FIFO slot.
//
// Note [Point-to-point schedules]: on device buffers the same batch (one send or receive, or
// a group's for this communicator) is a schedule (point_to_point_schedule, algorithms/
// point_to_point.cpp) in the same rounds, run as one collective kernel on the caller's stream
// (Note [Kernels on the caller's stream], device/engine.cpp) through the device FIFOs of every
// route (one GPU, p2p, ipc, host-staged). Its steps name their buffers by address
// (Buf::kAddress) and carry their call's tag, so the kernel checks every message as the host
// path does: a count or dtype that differs from the peer's is a mismatch naming the rank, the
// peer and the step, and a send with no receive ends at ACCORD_TIMEOUT_MS through the
// watchdog, naming the rank it waited for. A group that mixes collectives with sends and
// receives on device buffers launches its collectives at their call and its sends and
// receives at the group's end (every rank does the same, so they still match).
//
// Note [Point-to-point FIFOs]: a pair of ranks that address each other's GPU memory (p2p or
// ipc: one GPU, or peers) has, beside its FIFO for the collectives, a second FIFO each way for
// sends and receives only, in the receiver's GPU memory (the same allocation and handle as the
// first, after it): kP2pFifoSlots slots of a quarter of ACCORD_DEVICE_P2P_BYTES (8 MiB: 2 MiB
// slots, against the collectives' 256 KiB). A batch's messages to and from such a peer are
// cut at its slot size (point_to_point_schedule's piece per peer; both ends of a pair cut
// alike, since every rank computes the pair's route alike and the setting is one of the
// settings every rank shares), so a send of 64 MiB is 32 hand-offs instead of 256, each moved
// by all the kernel's blocks (Note [Blocks]: one per 16 KiB, up to ACCORD_GPU_BLOCKS). The
// kernel is the FIFO kernel, unchanged: DevCall::peers points at the sends' table, whose
// FIFOs have counts and arrival counters of their own (DevFifo::count, ::arrive), so the
// collectives' FIFO counts never see a point-to-point message (nor the host's counts of the
// waiting form, Note [Waiting FIFOs], which keeps them per FIFO). Pairs without one
// (host-staged, TCP) send and receive on the collectives' FIFOs, as before, and their entries
// of the sends' table are the collectives' FIFOs. The progress argument of Note
// [Point-to-point progress] is about messages and rounds, not their sizes, and needs 4 slots
// or more (Note [FIFO depth]): it holds unchanged. Memory: 8 MiB of GPU memory per peer that
// can address this GPU (7 peers: 56 MiB). Not measured on a GPU yet (issue 35's 200 GB/s).
//
// Note [Waiting point-to-point]: where a job's hand-offs wait at stream level (the waiting
// protocol of processes sharing a GPU without MPS, and every staged job), a batch runs on the
// same FIFOs and the same FIFO kernel, cut into kernels that never wait inside: Note [Waiting
// FIFOs] (device/fifo_wait.cpp), which collectives on the FIFOs share.
#include <algorithm>
#include <cstring>

#include "collectives/communicator.hpp"
#include "collectives/device/dev_call.hpp"
#include "collectives/device/direct.hpp"
#include "collectives/kernels/reduce_kernels.hpp"
#include "core/log.hpp"

namespace accord {
namespace {

uint32_t p2p_tag(const CollArgs& a) {
  uint64_t h = 1469598103934665603ULL;
  for (uint64_t v :
       {uint64_t{0x70327031}, static_cast<uint64_t>(a.count), static_cast<uint64_t>(a.dtype)})
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ULL;
    }
  return static_cast<uint32_t>(h ^ (h >> 32));
}

// One call's bytes, in the order they go.
struct Pending {
  const CollArgs* call = nullptr;
  size_t bytes = 0;
  size_t done = 0;
  uint32_t tag = 0;
};

}  // namespace

// Sends to and receives from this rank pair in call order, each pair of equal count and
// dtype (tag): INVALID_USAGE or MISMATCH otherwise, naming the two calls.
template <class SendOf, class RecvOf>
static Status check_self_pairs(int rank, size_t nsends, size_t nrecvs, SendOf send_of, RecvOf recv_of) {
  if (nsends != nrecvs)
    return error(
        ACCORD_ERR_INVALID_USAGE,
        "rank %d: %zu sends to itself but %zu receives from itself in one group; "
        "each send to this rank needs a receive of the same count and dtype in the same group",
        rank, nsends, nrecvs);
  for (size_t i = 0; i < nsends; ++i) {
    const Pending s = send_of(i), r = recv_of(i);
    if (s.tag != r.tag || s.bytes != r.bytes)
      return error(ACCORD_ERR_MISMATCH,
                   "rank %d: send to itself of %zu elements does not match the receive from "
                   "itself of %zu elements (or their dtypes differ); make them equal",
                   rank, s.call->count, r.call->count);
  }
  return Status::success();
}

Status DeviceEngine::enqueue_device_p2p(const std::vector<CollArgs>& ops, void* user_stream) {
  RankScope scope(rank_, nranks_);
  const char* name = ops.size() == 1 ? collective_name(ops[0].coll) : "send/recv group";
  Stream us;
  ACCORD_TRY(device_stream(user_stream, name, &us));
  std::vector<P2pCall> calls;
  std::vector<Pending> self_sends, self_recvs;
  for (const CollArgs& a : ops) {
    size_t in_bytes = 0, out_bytes = 0;
    ACCORD_TRY(comm_.check_args(a, &in_bytes, &out_bytes));
    if (a.count == 0) continue;  // nothing to match: NCCL's zero-byte calls complete at once
    const bool send = a.coll == Collective::kSend;
    const int peer = a.root;
    if (peer != rank_ && (static_cast<size_t>(peer) >= dev_route_of_.size() ||
                          dev_route_of_[static_cast<size_t>(peer)] < 0))
      return error(ACCORD_ERR_UNSUPPORTED,
                   "rank %d: %s with peer %d on GPU buffers: this rank has no device FIFO with rank "
                   "%d (it has no GPU, or is on another host or /dev/shm); pass host buffers "
                   "(stream NULL) for this pair",
                   rank_, collective_name(a.coll), peer, peer);
    const Pending p{&a, in_bytes, 0, p2p_tag(a)};
    if (peer == rank_) (send ? self_sends : self_recvs).push_back(p);
    const void* buf = send ? a.send : a.recv;
    calls.push_back(P2pCall{send, peer, reinterpret_cast<uintptr_t>(buf), in_bytes, p.tag});
  }
  ACCORD_TRY(check_self_pairs(
      rank_, self_sends.size(), self_recvs.size(), [&](size_t i) { return self_sends[i]; },
      [&](size_t i) { return self_recvs[i]; }));
  Schedule sched;
  point_to_point_schedule(calls, rank_, nranks_, p2p_piece_, &sched);  // Note [Point-to-point FIFOs]
  if (sched.steps.empty()) return Status::success();
  dev::DevLaunch launch;
  std::memset(static_cast<void*>(&launch), 0, sizeof launch);
  launch.call.dtype = ACCORD_UINT8;
  launch.call.op = ACCORD_SUM;
  launch.call.elem_bytes = 1;
  launch.call.tag = p2p_tag(CollArgs{Collective::kSend, nullptr, nullptr, 0, ACCORD_UINT8, ACCORD_SUM, 0});
  if (hand_offs_wait_) return launch_fifo_waiting(name, sched, launch, us, user_stream, /*p2p=*/true);
  return launch_schedule(name, sched, &launch, us, user_stream, /*direct=*/false, /*p2p=*/true);
}

Status Communicator::run_point_to_point(const std::vector<CollArgs>& ops) {
  RankScope scope(rank_, nranks_);
  if (!sticky_.ok())
    return Status(sticky_.code(),
                  format("rank %d: %s refused: this communicator failed earlier and cannot be used "
                         "again (destroy it and create a new one). The earlier error: %s",
                         rank_, ops.empty() ? "send" : collective_name(ops[0].coll),
                         sticky_.message().c_str()));
  const size_t n = static_cast<size_t>(nranks_);
  std::vector<std::vector<Pending>> sends(n), recvs(n);
  std::vector<size_t> next_send(n, 0), next_recv(n, 0);
  for (const CollArgs& a : ops) {
    size_t in_bytes = 0, out_bytes = 0;
    ACCORD_TRY(check_args(a, &in_bytes, &out_bytes));
    if (a.count == 0) continue;  // nothing to match: NCCL's zero-byte calls complete at once
    Pending p{&a, in_bytes, 0, p2p_tag(a)};
    (a.coll == Collective::kSend ? sends : recvs)[static_cast<size_t>(a.root)].push_back(p);
  }
  // To itself: the sends and receives pair in call order, a copy each.
  {
    std::vector<Pending>& s = sends[static_cast<size_t>(rank_)];
    std::vector<Pending>& r = recvs[static_cast<size_t>(rank_)];
    ACCORD_TRY(check_self_pairs(
        rank_, s.size(), r.size(), [&](size_t i) { return s[i]; }, [&](size_t i) { return r[i]; }));
    for (size_t i = 0; i < s.size(); ++i) std::memmove(r[i].call->recv, s[i].call->send, s[i].bytes);
    s.clear();
    r.clear();
  }
  WaitContext ctx;
  ctx.deadline = Deadline::after_ms_coarse(settings_.timeout_ms);
  ctx.abort_flag = &abort_;
  ctx.self_rank = rank_;
  ctx.seq = ++p2p_seq_;
  ctx.pidfds = links_.pidfd.data();
  ctx.nranks = static_cast<int>(links_.pidfd.size());
  ctx.death_notes = links_.death_notes;
  ctx.departures = links_.departures;
  ctx.seq_clock = SeqClock::kNone;  // Note [Departures]: p2p_seq_ is not in step between ranks
  auto at_peer = [&](size_t peer, const char* op) -> const WaitContext& {
    ctx.peer_rank = static_cast<int>(peer);
    ctx.peer_pidfd = links_.pidfd[peer];
    ctx.operation = op;
    return ctx;
  };
  auto run = [&]() -> Status {
    for (bool busy = true; busy;) {
      busy = false;
      for (size_t peer = 0; peer < n; ++peer) {
        if (next_send[peer] == sends[peer].size()) continue;
        Pending& p = sends[peer][next_send[peer]];
        SendChannel* ch = links_.send[peer];
        const size_t piece = std::min({p.bytes - p.done, chunk_bytes_, ch->max_bytes()});
        const uint8_t* from = static_cast<const uint8_t*>(p.call->send) + p.done;
        void* slot = nullptr;
        ACCORD_TRY(ch->acquire_like(piece, from, &slot, at_peer(peer, "send")));
        kernels::copy_to_peer(slot, from, piece);  // Note [Copies into a peer's slot]
        ch->post(piece, p.tag);
        p.done += piece;
        if (p.done == p.bytes) ++next_send[peer];
        busy = true;
      }
      for (size_t peer = 0; peer < n; ++peer) {
        if (next_recv[peer] == recvs[peer].size()) continue;
        Pending& p = recvs[peer][next_recv[peer]];
        RecvChannel* ch = links_.recv[peer];
        const void* msg = nullptr;
        size_t got = 0;
        uint32_t tag = 0;
        ACCORD_TRY(ch->wait(&msg, &got, &tag, at_peer(peer, "recv")));
        if (tag != p.tag || got > p.bytes - p.done) {
          ch->release();
          return error(
              ACCORD_ERR_MISMATCH,
              "rank %d: recv of %zu elements from rank %d (p2p seq %llu): rank %d sent "
              "something else (a send of another count or dtype, or a collective); the send and "
              "the receive "
              "must have the same count and dtype, and every rank the same calls in the same order",
              rank_, p.call->count, static_cast<int>(peer),
              static_cast<unsigned long long>(ctx.seq), static_cast<int>(peer));
        }
        std::memcpy(static_cast<uint8_t*>(p.call->recv) + p.done, msg, got);
        ch->release();
        p.done += got;
        if (p.done == p.bytes) ++next_recv[peer];
        busy = true;
      }
    }
    return Status::success();
  };
  return finish_call(run());
}

}  // namespace accord
