// Direct (one-shot) all-reduce and the dissemination barrier.
//
// All-reduce cost for n ranks and S bytes: one step of latency per chunk; each rank sends its
// whole input to each of the n-1 others ((n-1) * S bytes out and in) and reduces all n inputs
// locally in rank order, so every rank computes the same bits. Best for small messages on one
// host, where one cache-line transfer each way beats the ring's 2(n-1) sequential hops.
//
// Barrier: ceil(log2 n) rounds; in round k rank r signals r + 2^k and waits for r - 2^k
// (empty messages). After the last round every rank has heard, transitively, from all.
#include <algorithm>

#include "collectives/schedule.hpp"

namespace accord {

void direct_all_reduce(const ScheduleRequest& req, Schedule* out) {
  const int n = req.nranks, r = req.rank;
  const size_t total = req.count * req.elem_bytes;
  if (total == 0) return;
  const size_t chunk = std::max<size_t>(1, req.chunk_bytes / req.elem_bytes) * req.elem_bytes;
  for (size_t off = 0; off < total; off += chunk) {
    const size_t bytes = std::min(chunk, total - off);
    for (int k = 1; k < n; ++k)
      out->steps.push_back(make_step(StepKind::kSend, Buf::kInput, off, Buf::kOutput, off, bytes, (r + k) % n));
    out->steps.push_back(make_step(StepKind::kReduceAll, Buf::kInput, off, Buf::kOutput, off, bytes, -1, -1, true));
  }
  // With 3+ ranks the running result cannot live in the output buffer when it is also this
  // rank's input (in place): the executor accumulates in scratch.
  if (n >= 3) out->scratch_bytes = std::min(chunk, total);
}

void direct_barrier(const ScheduleRequest& req, Schedule* out) {
  const int n = req.nranks, r = req.rank;
  for (int dist = 1; dist < n; dist *= 2) {
    out->steps.push_back(make_step(StepKind::kSend, Buf::kInput, 0, Buf::kOutput, 0, 0, (r + dist) % n));
    out->steps.push_back(make_step(StepKind::kRecv, Buf::kInput, 0, Buf::kOutput, 0, 0, -1, ((r - dist) % n + n) % n));
  }
}

}  // namespace accord
