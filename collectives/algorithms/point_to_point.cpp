// Point-to-point batches as schedules: the sends and receives of one group (NCCL's
// ncclGroupStart/End of ncclSend/ncclRecv calls, an all-to-all) on device buffers, as the steps
// of one collective kernel (Note [Point-to-point schedules], collectives/point_to_point.cpp).
//
// The steps follow the host path's rounds (Note [Point-to-point progress]): each call is cut
// into pieces of at most its peer's piece_bytes (one slot of that peer's FIFO, Note
// [Point-to-point FIFOs]), and in every round a rank sends the next piece to every peer it
// still has bytes for, then receives the next piece from every peer it still expects bytes
// from. Calls for one peer go in call order, one after the other (NCCL's
// matching rule). Sends to and receives from this rank pair in call order as copies, first.
// Cost: one message per piece; a round sends at most one message to each peer.
#include <algorithm>

#include "collectives/schedule.hpp"

namespace accord {

void point_to_point_schedule(const std::vector<P2pCall>& calls, int rank, int nranks,
                             const std::vector<size_t>& piece_bytes, Schedule* out) {
  out->steps.clear();
  out->scratch_bytes = 0;
  const size_t n = static_cast<size_t>(nranks);
  auto piece_of = [&](size_t peer) {
    return peer < piece_bytes.size() && piece_bytes[peer] > 0 ? piece_bytes[peer] : size_t{1};
  };
  struct Pending {
    const P2pCall* call;
    size_t done;
  };
  std::vector<std::vector<Pending>> sends(n), recvs(n);
  std::vector<const P2pCall*> self_sends, self_recvs;
  for (const P2pCall& c : calls) {
    if (c.bytes == 0 || c.peer < 0 || c.peer >= nranks) continue;
    if (c.peer == rank)
      (c.send ? self_sends : self_recvs).push_back(&c);
    else
      (c.send ? sends : recvs)[static_cast<size_t>(c.peer)].push_back(Pending{&c, 0});
  }
  for (size_t i = 0; i < self_sends.size() && i < self_recvs.size(); ++i) {
    const size_t bytes =
        self_sends[i]->bytes < self_recvs[i]->bytes ? self_sends[i]->bytes : self_recvs[i]->bytes;
    out->steps.push_back(make_step(StepKind::kCopy, Buf::kAddress, self_sends[i]->addr,
                                   Buf::kAddress, self_recvs[i]->addr, bytes));
  }
  std::vector<size_t> next_send(n, 0), next_recv(n, 0);
  auto piece = [&](std::vector<Pending>& queue, size_t* next, bool send, size_t peer) {
    if (*next == queue.size()) return false;
    Pending& p = queue[*next];
    const size_t bytes = std::min(p.call->bytes - p.done, piece_of(peer));
    const uint64_t at = p.call->addr + p.done;
    Step s = send ? make_step(StepKind::kSend, Buf::kAddress, at, Buf::kOutput, 0, bytes,
                              static_cast<int>(peer))
                  : make_step(StepKind::kRecv, Buf::kInput, 0, Buf::kAddress, at, bytes, -1,
                              static_cast<int>(peer));
    s.tag = p.call->tag;
    out->steps.push_back(s);
    p.done += bytes;
    if (p.done == p.call->bytes) ++*next;
    return true;
  };
  for (bool busy = true; busy;) {
    busy = false;
    for (size_t peer = 0; peer < n; ++peer)
      busy = piece(sends[peer], &next_send[peer], true, peer) || busy;
    for (size_t peer = 0; peer < n; ++peer)
      busy = piece(recvs[peer], &next_recv[peer], false, peer) || busy;
  }
}

}  // namespace accord
