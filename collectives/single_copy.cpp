// All-reduces that copy each byte between ranks once (see single_copy.hpp).
//
// Note [Single copy]: through the shared-memory FIFOs a 2-rank all-reduce moves every byte
// between the two cores twice: the sender copies its half into a slot, the receiver reduces
// out of the slot and copies the result into a slot of the sender's, which copies it out. Each
// copy of a slot line is a line the other core fetches. Here every rank owns one block of the
// output: it reads the peers' parts of that block straight from their input buffers
// (process_vm_readv), reduces them with its own into its output, and writes the result
// straight into the peers' outputs (process_vm_writev), chunk by chunk. Every byte crosses
// between cores once each way, and the kernel's copies write whole lines. Measured on the
// Intel Xeon model 207 VM (2 vCPUs, 2026-11-28), 2 ranks, float sum, `bench/ab.py` with
// ACCORD_SINGLE_COPY=0 against 1, `-n 20 -w 5`, 6 alternated pairs under chrt -f 50, median
// pair ratios (speed) out of place / in place: 16 KiB 1.17 / 1.36, 64 KiB 1.09 / 1.37, 256 KiB
// 1.69 / 1.68, 1 MiB 1.59 / 1.72, 4 MiB 1.29 / 1.59, 16 MiB 1.04 / 1.55 (8 KiB: 1.01 / 1.03);
// but 32 MiB 0.66 / 1.51 and 64 MiB 0.69 / 1.10: out of place, once the ranks' inputs and
// outputs (4 x 32 MiB) no longer fit the caches, every store of an output line first reads
// it, where the FIFOs stream their outputs past the caches
// (Note [Store mode probe]); streaming this rank's own output here too did not help (4-16
// MiB: 0.88-0.96 against ordinary stores). With 4 ranks on the 2 vCPUs (oversubscribed):
// 16 KiB 0.53 / 0.55 and 64 KiB 0.96 / 0.87 (each call's two board posts need every rank to
// run, and they share 2 CPUs), 256 KiB-4 MiB 1.27-1.37 / 0.98-1.53, 16 MiB 0.70 / 1.16. Hence the built-in window (Communicator::decide_single_copy): from 16 KiB (256 KiB
// when the host's ranks outnumber their CPUs) to 32 MiB divided by the number of ranks (16
// MiB for 2), each end set by ACCORD_SINGLE_COPY_MIN and _MAX. The window was measured on this
// one CPU; bench/NOTES-2026-11.md, "Single copy".
//
// The call: every rank posts its buffers' addresses and size on the board (Note [Board]) and
// reads every peer's; computes its block; posts again, empty, and waits for every peer's
// second post, so that no rank returns (and lets its caller reuse the buffers) while a peer
// still reads or writes them. The owner of a block reduces its own operand first (in place,
// its output chunk is that operand, and the first reduction writes there), then the peers' in
// rank order; each block is computed by one rank and copied to the others, so every rank ends
// with the same bits. In place works: a rank's input block b is read only by
// the owner of block b, who also writes that rank's output block b, after reading it.
// Peers that are threads of this process are read and written with plain copies (the board's
// release and acquire order them). A peer that dies fails the call with its rank named: its
// memory is gone (ESRCH), or it never posts (the board's wait watches its pidfd).
//
// The probe at init: process_vm_readv needs the right to ptrace the peer (same user, and with
// Yama's ptrace_scope 1 a process that allowed it: every rank calls prctl(PR_SET_PTRACER,
// PR_SET_PTRACER_ANY) there, as Open MPI does for its single copy); containers may forbid the
// call altogether. So every rank reads a known word of every local peer in another process
// at init, and the job uses this path only if every rank could read every such peer
// (Communicator::decide_single_copy); ranks in different pid namespaces cannot name each
// other's pids and keep the FIFOs.
#include "collectives/single_copy.hpp"

#include <sys/prctl.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/log.hpp"

namespace accord {
namespace {

// What a rank posts on the board for the call.
struct Addresses {
  uint64_t input;
  uint64_t output;
  uint64_t bytes;
};

enum class Way { kRead, kWrite };

std::string move_process_memory(Way way, pid_t pid, void* local, const void* remote, size_t bytes, bool* gone) {
  *gone = false;
  auto* l = static_cast<uint8_t*>(local);
  auto* r = static_cast<uint8_t*>(const_cast<void*>(remote));
  while (bytes > 0) {
    iovec lv{l, bytes}, rv{r, bytes};
    const ssize_t got = way == Way::kRead ? process_vm_readv(pid, &lv, 1, &rv, 1, 0)
                                          : process_vm_writev(pid, &lv, 1, &rv, 1, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      *gone = errno == ESRCH;
      return strerror(errno);
    }
    if (got == 0) return "no byte moved";
    l += got;
    r += got;
    bytes -= static_cast<size_t>(got);
  }
  return "";
}

}  // namespace

std::string read_process_memory(pid_t pid, void* local, const void* remote, size_t bytes, bool* gone) {
  return move_process_memory(Way::kRead, pid, local, remote, bytes, gone);
}

std::string write_process_memory(pid_t pid, void* remote, const void* local, size_t bytes, bool* gone) {
  return move_process_memory(Way::kWrite, pid, const_cast<void*>(local), remote, bytes, gone);
}

void allow_peers_to_read_memory() {
  FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  if (f == nullptr) return;
  int scope = 0;
  const bool read = std::fscanf(f, "%d", &scope) == 1;
  std::fclose(f);
  if (read && scope == 1) prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
}

const uint64_t* single_copy_probe_word() {
  static const volatile uint64_t word = kSingleCopyProbeValue;
  return const_cast<const uint64_t*>(&word);
}

Status execute_single_copy(Board& board, const std::vector<SingleCopyPeer>& peers, const SingleCopyCall& c,
                           void* tmp, WaitContext* ctx, int64_t timeout_ms) {
  const int n = ctx->nranks, me = ctx->self_rank;
  const auto* input = static_cast<const uint8_t*>(c.input);
  auto* output = static_cast<uint8_t*>(c.output);
  long step = 0;  // ACCORD_FAULT's steps: 0 before the first post, then one per chunk
  auto fault_point = [&] {
    if (c.fault != nullptr && c.fault_step == step) trigger_fault(*c.fault);
    ++step;
  };
  fault_point();

  bool timed = false;
  // Waits for `q`'s post of board call `seq` and checks that it is this call.
  auto line_of = [&](int q, uint32_t seq, size_t want, const BoardLine** out) -> Status {
    const BoardLine* line = board.line(q, seq);
    if (!board.ready(line, seq)) {
      if (!timed) ctx->deadline = Deadline::after_ms_coarse(timeout_ms);
      timed = true;
      ctx->peer_rank = q;
      ctx->peer_pidfd = ctx->pidfds[q];
      ACCORD_TRY(board.wait(line, q, seq, *ctx));
    }
    if (line->tag != c.tag || line->bytes != want)
      return error(ACCORD_ERR_MISMATCH,
                   "rank %d: %s (seq %llu): rank %d is making a different call (another collective, count, dtype, "
                   "op or root); every rank must make the same calls in the same order (ACCORD_CHECK=1 names the "
                   "difference)",
                   me, ctx->operation, static_cast<unsigned long long>(ctx->seq), q);
    *out = line;
    return Status::success();
  };

  const Addresses mine{reinterpret_cast<uintptr_t>(c.input), reinterpret_cast<uintptr_t>(c.output), c.bytes};
  board.post(c.seq, &mine, sizeof mine, c.tag);
  board.wake_readers(c.seq);
  Addresses at[kBoardMaxRanks];
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    const BoardLine* line = nullptr;
    ACCORD_TRY(line_of(q, c.seq, sizeof(Addresses), &line));
    std::memcpy(&at[q], line->data, sizeof(Addresses));
    if (at[q].bytes != c.bytes)
      return error(ACCORD_ERR_MISMATCH,
                   "rank %d: %s (seq %llu) of %zu bytes, but rank %d called it with %llu bytes; the ranks called it "
                   "with different counts or dtypes (ACCORD_CHECK=1 names the difference)",
                   me, ctx->operation, static_cast<unsigned long long>(ctx->seq), c.bytes, q,
                   static_cast<unsigned long long>(at[q].bytes));
  }

  // A failed copy from or to `q`: its death if it died, else what the system said.
  auto failed = [&](int q, const char* what, const std::string& why, bool gone) -> Status {
    if (gone) {
      ctx->peer_rank = q;
      ctx->peer_pidfd = ctx->pidfds[q];
      ACCORD_TRY(check_wait(*ctx, what));
      return error(ACCORD_ERR_REMOTE, "rank %d: peer rank %d died during %s (seq %llu): %s it failed (%s); look at "
                   "rank %d's output for why it exited",
                   me, q, ctx->operation, static_cast<unsigned long long>(ctx->seq), what, why.c_str(), q);
    }
    return error(ACCORD_ERR_SYSTEM, "rank %d: %s (seq %llu): %s rank %d (pid %d) failed: %s; set "
                 "ACCORD_SINGLE_COPY=0 to move host buffers through shared memory instead",
                 me, ctx->operation, static_cast<unsigned long long>(ctx->seq), what, q,
                 static_cast<int>(peers[static_cast<size_t>(q)].pid), why.c_str());
  };

  // This rank's block: whole cache lines where the element size allows (two ranks then never
  // write one line of an output).
  const size_t es = c.elem_bytes;
  const size_t count = c.bytes / es;
  const size_t align = std::max<size_t>(1, 64 / es);
  const size_t per = ((count + n - 1) / n + align - 1) / align * align;
  const size_t lo = std::min(count, per * static_cast<size_t>(me)), hi = std::min(count, lo + per);
  const size_t chunk = std::max<size_t>(1, kSingleCopyChunk / es);
  for (size_t off = lo; off < hi; off += chunk) {
    fault_point();
    const size_t m = std::min(chunk, hi - off), b = m * es, ob = off * es;
    // Peer q's operand for this chunk: its buffer (a thread of this process), or a copy in tmp.
    auto operand = [&](int q, const void** p) -> Status {
      const SingleCopyPeer& peer = peers[static_cast<size_t>(q)];
      const auto* theirs = reinterpret_cast<const uint8_t*>(at[q].input) + ob;
      if (peer.same_process) return *p = theirs, Status::success();
      bool gone = false;
      const std::string why = read_process_memory(peer.pid, tmp, theirs, b, &gone);
      if (!why.empty()) return failed(q, "reading the input of", why, gone);
      *p = tmp;
      return Status::success();
    };
    // This rank's operand first: in place, the output chunk is the input chunk, so it must be
    // consumed by the first reduction, which writes there.
    kernels::ReduceArgs k;
    k.count = m;
    uint8_t* dst = output + ob;
    k.a = input + ob;
    for (int q = 0, left = n - 1; q < n; ++q) {
      if (q == me) continue;
      ACCORD_TRY(operand(q, &k.b));
      k.dst0 = dst;
      k.divisor = --left == 0 ? c.divisor : 0;
      c.reduce(k);
      k.a = dst;
    }
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      const SingleCopyPeer& peer = peers[static_cast<size_t>(q)];
      auto* theirs = reinterpret_cast<uint8_t*>(at[q].output) + ob;
      if (peer.same_process) {
        kernels::copy(theirs, dst, b, false);
        continue;
      }
      bool gone = false;
      const std::string why = write_process_memory(peer.pid, theirs, dst, b, &gone);
      if (!why.empty()) return failed(q, "writing the output of", why, gone);
    }
  }
  if (c.fault != nullptr && c.fault_step >= step) trigger_fault(*c.fault);

  // Done: no peer may return while this rank still reads or writes its buffers.
  board.post(c.seq + 1, &mine, 0, c.tag);
  board.wake_readers(c.seq + 1);
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    const BoardLine* line = nullptr;
    ACCORD_TRY(line_of(q, c.seq + 1, 0, &line));
  }
  return Status::success();
}

}  // namespace accord
