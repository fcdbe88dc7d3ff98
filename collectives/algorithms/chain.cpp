// Pipelined chain broadcast and reduce.
//
// The ranks form a chain starting after the root (reduce) or at the root (broadcast), and the
// buffer moves along it in chunks, so for large S every link carries S bytes once and the
// time approaches S / bandwidth + (n-1) chunk hops; small messages pay n-1 hops.
// Broadcast: root -> root+1 -> ... -> root+n-1. Reduce: root+1 -> ... -> root+n-1 -> root,
// each hop adding its input (the message is the left operand), the root applying avg.
#include <algorithm>

#include "collectives/schedule.hpp"

namespace accord {
namespace {

// A chain step on the same offset of input and output.
Step make(StepKind kind, int send_peer, int recv_peer, size_t off, size_t bytes, bool postop = false) {
  return make_step(kind, Buf::kInput, off, Buf::kOutput, off, bytes, send_peer, recv_peer, postop);
}

}  // namespace

void chain_broadcast(const ScheduleRequest& req, Schedule* out) {
  const int n = req.nranks;
  const size_t total = req.count * req.elem_bytes;
  const size_t chunk = std::max<size_t>(1, req.chunk_bytes / req.elem_bytes) * req.elem_bytes;
  const int pos = ((req.rank - req.root) % n + n) % n;  // place in the chain
  const int next = (req.rank + 1) % n, prev = (req.rank - 1 + n) % n;
  for (size_t off = 0; off < total; off += chunk) {
    const size_t bytes = std::min(chunk, total - off);
    if (pos == 0) {
      if (n > 1) out->steps.push_back(make(StepKind::kSend, next, -1, off, bytes));
      if (!req.in_place) out->steps.push_back(make(StepKind::kCopy, -1, -1, off, bytes));
    } else if (pos < n - 1) {
      out->steps.push_back(make(StepKind::kRecvCopySend, next, prev, off, bytes));
    } else {
      out->steps.push_back(make(StepKind::kRecv, -1, prev, off, bytes));
    }
  }
}

void chain_reduce(const ScheduleRequest& req, Schedule* out) {
  const int n = req.nranks;
  const size_t total = req.count * req.elem_bytes;
  const size_t chunk = std::max<size_t>(1, req.chunk_bytes / req.elem_bytes) * req.elem_bytes;
  // Chain position: root+1 is first (pos 0), the root is last (pos n-1).
  const int pos = ((req.rank - req.root - 1) % n + n) % n;
  const int next = (req.rank + 1) % n, prev = (req.rank - 1 + n) % n;
  for (size_t off = 0; off < total; off += chunk) {
    const size_t bytes = std::min(chunk, total - off);
    if (n == 1) {
      if (!req.in_place) out->steps.push_back(make(StepKind::kCopy, -1, -1, off, bytes, true));
    } else if (pos == 0) {
      out->steps.push_back(make(StepKind::kSend, next, -1, off, bytes));
    } else if (pos < n - 1) {
      out->steps.push_back(make(StepKind::kRecvReduceSend, next, prev, off, bytes));
    } else {
      out->steps.push_back(make(StepKind::kRecvReduce, -1, prev, off, bytes, true));
    }
  }
}

}  // namespace accord
