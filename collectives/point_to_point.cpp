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
#include <algorithm>
#include <cstring>

#include "collectives/communicator.hpp"
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
    if (s.size() != r.size())
      return error(
          ACCORD_ERR_INVALID_USAGE,
          "rank %d: %zu sends to itself but %zu receives from itself in one group; "
          "each send to this rank needs a receive of the same count and dtype in the same group",
          rank_, s.size(), r.size());
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i].tag != r[i].tag || s[i].bytes != r[i].bytes)
        return error(ACCORD_ERR_MISMATCH,
                     "rank %d: send to itself of %zu elements does not match the receive from "
                     "itself of %zu elements (or their dtypes differ); make them equal",
                     rank_, s[i].call->count, r[i].call->count);
      std::memmove(r[i].call->recv, s[i].call->send, s[i].bytes);
    }
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
