// Recursive-doubling all-reduce, for small messages.
//
// With p the largest power of two <= n: ranks p..n-1 first fold their input into rank r-p;
// then in round k (k < log2 p) rank r exchanges its partial result with r ^ 2^k and both
// combine "lower rank's partial op higher rank's partial", so partners, and in the end all
// ranks, compute the same bits; finally ranks r < n-p send the result to r+p.
//
// Cost: log2(p) exchange rounds (+2 when n is not a power of two); each rank sends its whole
// buffer once per round, log2(p) * S bytes. It needs only pairwise progress, which suits
// oversubscribed hosts (more ranks than cores), where waiting for all n-1 peers at once, as
// the direct algorithm does, costs a scheduling round trip per peer.
#include <algorithm>

#include "collectives/schedule.hpp"

namespace accord {

void recursive_doubling_all_reduce(const ScheduleRequest& req, Schedule* out) {
  const int n = req.nranks, r = req.rank;
  const size_t total = req.count * req.elem_bytes;
  if (total == 0) return;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extras = n - p;
  const size_t chunk = std::max<size_t>(1, req.chunk_bytes / req.elem_bytes) * req.elem_bytes;
  const Buf in = Buf::kInput, o = Buf::kOutput;
  for (size_t off = 0; off < total; off += chunk) {
    const size_t bytes = std::min(chunk, total - off);
    if (r >= p) {  // fold in, then wait for the result
      out->steps.push_back(make_step(StepKind::kSend, in, off, o, off, bytes, r - p));
      out->steps.push_back(make_step(StepKind::kRecv, o, off, o, off, bytes, -1, r - p));
      continue;
    }
    Buf mine = in;  // where this rank's partial result is
    const int rounds = __builtin_ctz(static_cast<unsigned>(p));
    if (r < extras) {
      Step s = make_step(StepKind::kRecvReduce, in, off, o, off, bytes, -1, r + p, rounds == 0);
      s.message_right = true;  // r < r + p: own input is the left operand
      out->steps.push_back(s);
      mine = o;
    }
    for (int k = 0; k < rounds; ++k) {
      const int partner = r ^ (1 << k);
      out->steps.push_back(make_step(StepKind::kSend, mine, off, o, off, bytes, partner));
      Step s = make_step(StepKind::kRecvReduce, mine, off, o, off, bytes, -1, partner, k == rounds - 1);
      s.message_right = partner > r;
      out->steps.push_back(s);
      mine = o;
    }
    if (rounds == 0 && r >= extras && mine == in)  // n == 1
      out->steps.push_back(make_step(StepKind::kCopy, in, off, o, off, bytes, -1, -1, true));
    if (r < extras) out->steps.push_back(make_step(StepKind::kSend, o, off, o, off, bytes, r + p));
  }
}

}  // namespace accord
