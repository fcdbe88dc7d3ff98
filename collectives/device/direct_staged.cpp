// Note [Staged protocol]: the collectives (all-reduce, reduce-scatter, all-gather, broadcast,
// reduce, and pre-multiplied sums) between ranks on one host whose GPUs cannot all address
// each other (a host-staged pair: GPUs that cannot peer, or ACCORD_P2P_DISABLE=1), staged
// through pinned shared host memory by the copy engines, with no kernel that polls over PCIe
// (the FIFO kernels store into and poll host memory slot by slot, and more blocks made that
// slower: issue 33, item 2). It is the waiting protocol (Note [Waiting protocol],
// direct_call.hpp) over copies: the same one-shot rounds (Note [Direct collectives] for the
// four that are not all-reduces), halves e % 2, kernels per phase and DirectRunner, on device
// memory that is this rank's own.
//
// Memory. Host: each rank's staging area at the end of its shared-memory segment (ShmOptions::
// staging_bytes, ACCORD_STAGED_BYTES, 4 MiB by default), which every local rank maps and
// registers with the device runtime (DeviceEngine::register_slots): kStagedWordBytes of 32-bit
// words (word[from], the last round `from` staged out; tag[h][from], the call signature of its
// round in half h; read[from], the last round `from` has read from this rank's area: all
// written by rank `from`), then two halves. Device: this rank's region, nranks pairs of halves
// of the same size: pair `rank` is its own (the kernels' A writes it), pair p a local copy of
// peer p's halves. The table the kernels see (DevDirect::scratch) points at pair r for rank r,
// so DirectRunner runs unchanged, folding in rank order (the bits of every other path). Cost
// per rank: the area in /dev/shm (pinned), and nranks x both halves of GPU memory.
//
// Note [Staged pipeline]: a round's staging out runs on a stream of the engine's own (side_)
// beside the caller's, so that the copy out of round e + 1 (device -> host) overlaps the copies
// in of round e (host -> device): PCIe carries both directions at once (50-55 GB/s each way on
// the H200's Gen5 x16), and on one stream they took turns. Round e of a call (n elements a
// rank, a reduce-scatter's half holding n of every segment):
//   caller's stream: kernel A (this rank's part -> own device half e % 2), event a_done_
//   side stream: waits for a_done_; waits until every peer's read[rank] >= e - 2 (each has
//     read this rank's host half e % 2 of round e - 2, and checked its tags); copy_async
//     device -> host: what some peer's B reads of own device half e % 2 -> the same bytes of
//     own host half e % 2 (staged_out; nothing: no copy); stream_write_value32: the call's tag
//     into tag[e % 2][rank], then e into word[rank], of every peer's area; event out_done_[e % 2]
//   caller's stream, later: stream_wait_value32(>= e) on word[p] of this rank's area, for every
//     peer p, each followed by copy_async host -> device: what this rank's B reads of peer p's
//     host half e % 2 -> the same bytes of the local copy of p's half (staged_in); waits for
//     out_done_[e % 2]; kernel B (checks every peer's tag[e % 2], then reads the halves as
//     Note [Direct collectives] says); e into read[rank] of every peer's area; then A of round
//     e + 2 and its staging out (on the side stream), as above.
// So A of rounds first and first + 1 run before any copy in, and the side stream is a round
// ahead of the caller's. The call's end (DevCtl::done, by a stream write after the last read
// words, not by the last kernel) follows everything both streams queued for it: B of the last
// round waited for its staging out, and destroy waits for DevCtl::done before it unregisters
// the areas the read words go to. Cost: 2 kernels a round (A and B apart) and, per peer, 3
// stream writes and 2 waits a round.
// What moves (in: from each peer p != rank):
//   all-reduce, all-gather: out all n; in all n of every peer.
//   reduce-scatter: out every segment but the rank's own (which no peer reads: up to two
//     copies); in only segment `rank` of every peer (n elements at rank * the full round's n,
//     Note [Direct slices]; 1 / nranks of the peer's round), the one B folds.
//   broadcast: out the root only; in the root's n, by every other rank; the root copies in
//     nothing (its B reads its own device half).
//   reduce: out every rank but the root (no peer reads the root's half); in the root only,
//     every peer's n.
// A rank that moves nothing still writes its tag, word and read words to every peer and waits
// for every peer's, every round: the arguments below rest on the words, not the copies.
// Why a host half is not overwritten before every peer copied what it needs: a rank writes its
// host half e % 2 again in round e + 2, on the side stream after it saw every peer's read word
// reach e; a peer writes that word on its caller's stream after its copies in of round e
// (stream order). This holds for each collective alike: a host half's only readers are the
// peers' copies in of that round, whichever bytes they take (a broadcast's root is its only
// writer, a reduce's root its only reader). Own device half e % 2: written by A of round e + 2
// only after B of round e (the caller's stream), which waited for the side stream's copy out of
// round e. The local copies are written and read by the caller's stream alone, in order: copied
// in in round e, read by B of round e, copied in again in round e + 2; a local copy (or part of
// one) that this rank does not copy in is never read by its B (staged_in is what B reads: the
// root's half for a broadcast, segment `rank` for a reduce-scatter, nothing on a reduce's other
// ranks). Words only grow, so nothing resets them; a wait is for >= e with a signed difference
// (Note [Direct rounds]). Both safety waits are enforced by the tests: without the read-word
// wait, or without B's wait for the copy out, gpu_staged_tf4_* get wrong elements.
// No deadlock: every wait is for a peer's round at most e (word >= e, read >= e - 2) or for
// this rank's own earlier work (a_done_, out_done_), so along any chain of waits the rounds do
// not grow, and at equal rounds a copy in waits for a copy out, never the other way.
// A mismatched call is caught as in the spinning protocol (kDevBadTag): a peer's tag of round
// e in half e % 2 is its round e's, since it wrote it before its word of round e (stream
// order), and writes that half's tag again only in round e + 2, after this rank's read word of
// round e, which follows this rank's kernel B of round e. Every rank writes its tags in every
// round, whatever it copies, so every collective's B checks every peer's. A dead or stopped
// peer: the watchdog sets DevCtl::abort, then release_waits stores the last waited round into
// this rank's own words and read words (host memory: a plain store), so both streams' waits
// end, and the kernels after them see the abort and do nothing.
// Pre-multiplied sums take it too (scaled in A, Note [Pre-multiplied sum]); sends, receives
// and all-to-all keep the FIFOs in such a job, with the spinning kernel (the waiting
// point-to-point form needs words in a scratch every peer addresses).
// Not yet met hardware: exactness is proven on the simulated runtime only (HARDWARE_RISKS.md).
#include <algorithm>

#include "collectives/device/dev_kernels.hpp"
#include "collectives/device/direct.hpp"
#include "collectives/device/direct_call.hpp"
#include "core/log.hpp"

namespace accord::dev {

namespace {
// Bytes [at, at + bytes) of a half.
struct StagedPiece {
  size_t at, bytes;
};
// What rank `me` copies in from rank `from`'s host half in a round of `bytes` per rank (a
// reduce-scatter: per segment, segment k at k * stride, the bytes of the call's full round:
// Note [Direct slices]): what its kernel B reads of `from`'s half (Note [Direct collectives]).
// At most one piece; returns how many.
int staged_in(uint32_t coll, int root, int from, int me, size_t bytes, size_t stride, StagedPiece* out) {
  if (bytes == 0) return 0;
  switch (coll) {
    case kCollReduceScatter:  // its own segment of every rank's round
      *out = {static_cast<size_t>(me) * stride, bytes};
      return 1;
    case kCollBroadcast:  // the root's, which the root itself reads in its own device half
      *out = {0, bytes};
      return from == root ? 1 : 0;
    case kCollReduce:  // only the root folds
      *out = {0, bytes};
      return me == root ? 1 : 0;
    default:  // all-reduce, all-gather: everything
      *out = {0, bytes};
      return 1;
  }
}
// What rank `me` stages out of its device half: every byte some peer copies in (staged_in's
// union over the peers; in a short last round of a reduce-scatter, the gaps between its
// segments too). At most two pieces; returns how many.
int staged_out(uint32_t coll, int root, int me, int nranks, size_t bytes, size_t stride, StagedPiece* out) {
  if (bytes == 0) return 0;
  switch (coll) {
    case kCollReduceScatter: {  // every segment but its own
      int k = 0;
      const size_t mine = static_cast<size_t>(me) * stride;
      if (me > 0) out[k++] = {0, mine - stride + bytes};
      if (me + 1 < nranks) out[k++] = {mine + stride, static_cast<size_t>(nranks - me - 2) * stride + bytes};
      return k;
    }
    case kCollBroadcast:
      *out = {0, bytes};
      return me == root ? 1 : 0;
    case kCollReduce:  // no peer reads the root's
      *out = {0, bytes};
      return me != root ? 1 : 0;
    default:
      *out = {0, bytes};
      return 1;
  }
}
}  // namespace

Status DirectEngine::open_staged(const DirectSetup& s) {
  staged_ = true;
  staged_why_ = s.staged_why;
  // Its collectives wait in the stream anyway (launch_staged), and so do its sends and receives
  // (Note [Waiting FIFOs], the device engine's): wait_ is the waiting form of the direct
  // protocol only. The staged words are host memory: release_staged raises them itself.
  wait_ = false;
  half_bytes_ = direct_half_bytes(s.staged_bytes);
  flag_bytes_ = 0;  // the words are in host memory
  if (nranks_ > kStagedMaxRanks || s.staging.size() != static_cast<size_t>(nranks_))
    return error(ACCORD_ERR_INTERNAL, "staged protocol with %d ranks (at most %d) and %zu staging areas", nranks_,
                 kStagedMaxRanks, s.staging.size());
  staging_ = s.staging;
  staging_dev_.assign(staging_.size(), nullptr);
  for (int r = 0; r < nranks_; ++r) {
    void* at = nullptr;
    ACCORD_TRY(rt_->device_address(staging_[static_cast<size_t>(r)], &at)
                   .prefix(format("rank %d's staging area (registered shared memory): ", r)));
    staging_dev_[static_cast<size_t>(r)] = static_cast<uint8_t*>(at);
  }
  const size_t pair = 2 * half_bytes_;
  ACCORD_TRY(rt_->alloc_device(s.device, pair * static_cast<size_t>(nranks_), &mine_)
                 .prefix(format("%zu bytes for the local copies of %d ranks' halves (ACCORD_STAGED_BYTES): ",
                                pair * static_cast<size_t>(nranks_), nranks_)));
  std::vector<uint8_t*> table(static_cast<size_t>(nranks_), nullptr);
  for (int r = 0; r < nranks_; ++r) table[static_cast<size_t>(r)] = static_cast<uint8_t*>(mine_) + pair * static_cast<size_t>(r);
  scratch_ = table;
  ACCORD_TRY(upload_table(table, s));
  // Note [Staged pipeline]
  ACCORD_TRY(rt_->create_stream(s.device, &side_).prefix("the staging-out stream: "));
  for (Event* e : {&a_done_, &out_done_[0], &out_done_[1]})
    ACCORD_TRY(rt_->create_event(s.device, e).prefix("the staged protocol's events: "));
  // Note [Freeing memory peers map]: no peer maps this memory, but a free waits for the
  // device, so it goes with the communicator's other device memory, in its hold.
  held_ = s.hold != nullptr ? s.hold : ProcessHold::join(format("staged %p", mine_), 1, rt_);
  return Status::success();
}
static_assert(kStagedMaxRanks == static_cast<int>(kStagedTagStride) &&
                  kStagedReadWord == kStagedMaxRanks + 2 * static_cast<int>(kStagedTagStride),
              "the staging area's words: word[from] (a round staged out), tag[h][from], then read[from] (a round "
              "copied in and folded: Note [Staged pipeline])");

Status DirectEngine::launch_staged(const DevLaunch& launch, Stream stream, bool* partial) {
  *partial = false;
  DevLaunch l = launch;
  DevDirect& d = l.direct;
  const uint64_t rounds = direct_rounds(d);
  auto word = [&](int at, int from) {
    return reinterpret_cast<uint32_t*>(staging_dev_[static_cast<size_t>(at)]) + from;
  };
  auto tag = [&](int at, uint32_t h, int from) { return word(at, kStagedMaxRanks + static_cast<int>(h * kStagedTagStride) + from); };
  d.stage_tags = tag(rank_, 0, 0);
  if (rounds == 0) {  // nothing to move: one kernel that only says it began and ended
    d.phase = 0;
    d.last = 1;
    return launch_phase(l, stream);
  }
  const size_t es = l.call.elem_bytes;
  auto host_half = [&](int r, uint32_t h) { return staging_[static_cast<size_t>(r)] + kStagedWordBytes + h * half_bytes_; };
  auto read = [&](int at, int from) { return word(at, kStagedReadWord + from); };
  auto round_bytes = [&](uint64_t k) { return std::min<uint64_t>(d.chunk_elems, d.count - k * d.chunk_elems) * es; };
  const size_t stride = round_bytes(0);  // Note [Direct slices]: the full round's, the segments' stride
  // Note [Staged pipeline]. A of round k (phase 0 alone), then what it wrote staged out on the
  // side stream: the host half waits until every peer has read its round k - 2, then the copy
  // out, the tags and the words; recorded as round k's staging out.
  auto a_then_out = [&](uint64_t k) -> Status {
    const uint32_t e = d.round + static_cast<uint32_t>(k), h = e & 1u;
    d.phase_round = static_cast<uint32_t>(k);
    d.phase = 1;
    d.last = 0;
    d.then_next = 0;
    ACCORD_TRY(launch_phase(l, stream).prefix(format("round %u, phase 0: ", e)));
    *partial = true;
    ACCORD_TRY(rt_->record_event(a_done_, stream).prefix(format("round %u: ", e)));
    ACCORD_TRY(rt_->stream_wait_event(side_, a_done_).prefix(format("round %u: ", e)));
    for (int r = 0; r < nranks_; ++r) {
      if (r == rank_) continue;
      ACCORD_TRY(rt_->stream_write_value32(side_, &l.call.ctl->waiting_peer, static_cast<uint32_t>(r))
                     .prefix(format("round %u: ", e)));
      ACCORD_TRY(rt_->stream_wait_value32(side_, read(rank_, r), e - 2, DeviceRuntime::WaitCondition::kGeq)
                     .prefix(format("round %u: waiting for rank %d to have read round %u: ", e, r, e - 2)));
    }
    const size_t bytes = round_bytes(k);
    uint8_t* own = scratch_[static_cast<size_t>(rank_)] + h * half_bytes_;
    StagedPiece out[2];
    const int nout = staged_out(d.coll, d.root, rank_, nranks_, bytes, stride, out);
    for (int i = 0; i < nout; ++i)
      ACCORD_TRY(rt_->copy_async(CopyKind::kDeviceToHost, host_half(rank_, h) + out[i].at, own + out[i].at,
                                 out[i].bytes, side_)
                     .prefix(format("round %u: staging out: ", e)));
    for (int r = 0; r < nranks_; ++r) {
      if (r == rank_) continue;
      ACCORD_TRY(rt_->stream_write_value32(side_, tag(r, h, rank_), l.call.tag).prefix(format("round %u: telling rank %d: ", e, r)));
      ACCORD_TRY(rt_->stream_write_value32(side_, word(r, rank_), e).prefix(format("round %u: telling rank %d: ", e, r)));
    }
    return rt_->record_event(out_done_[h], side_).prefix(format("round %u: ", e));
  };
  // Before the first waits of this call: release_waits reaches past the side stream's (read
  // words of rounds up to round - 1) too.
  waited_round_.store(d.round - 1, std::memory_order_release);
  ACCORD_TRY(a_then_out(0));
  if (rounds > 1) ACCORD_TRY(a_then_out(1));
  for (uint64_t k = 0; k < rounds; ++k) {
    const uint32_t e = d.round + static_cast<uint32_t>(k), h = e & 1u;
    const size_t bytes = round_bytes(k);
    waited_round_.store(e, std::memory_order_release);  // before the waits: release_waits reaches past them
    StagedPiece in[1];
    for (int r = 0; r < nranks_; ++r) {
      if (r == rank_) continue;
      // The peer this stream waits on next, for the watchdog's message (DevCtl is pinned).
      ACCORD_TRY(rt_->stream_write_value32(stream, &l.call.ctl->waiting_peer, static_cast<uint32_t>(r))
                     .prefix(format("round %u: ", e)));
      ACCORD_TRY(rt_->stream_wait_value32(stream, word(rank_, r), e, DeviceRuntime::WaitCondition::kGeq)
                     .prefix(format("round %u: waiting for rank %d: ", e, r)));
      const int nin = staged_in(d.coll, d.root, r, rank_, bytes, stride, in);
      for (int i = 0; i < nin; ++i)
        ACCORD_TRY(rt_->copy_async(CopyKind::kHostToDevice, scratch_[static_cast<size_t>(r)] + h * half_bytes_ + in[i].at,
                                   host_half(r, h) + in[i].at, in[i].bytes, stream)
                       .prefix(format("round %u: staging in rank %d's half: ", e, r)));
    }
    // B reads this rank's own device half, which the side stream copies out: both done first
    // (and the call's last kernel, which says the call ended, after everything it staged out).
    ACCORD_TRY(rt_->stream_wait_event(stream, out_done_[h]).prefix(format("round %u: ", e)));
    d.phase_round = static_cast<uint32_t>(k);
    d.phase = 2;
    d.last = 0;
    d.then_next = 0;
    ACCORD_TRY(launch_phase(l, stream).prefix(format("round %u, phase 1: ", e)));
    // This rank has read round e of every peer's host half, and B has checked the peers' tags
    // of it: each peer may write that half and those tags again.
    for (int r = 0; r < nranks_; ++r)
      if (r != rank_)
        ACCORD_TRY(rt_->stream_write_value32(stream, read(r, rank_), e).prefix(format("round %u: telling rank %d: ", e, r)));
    if (k + 2 < rounds) ACCORD_TRY(a_then_out(k + 2));
  }
  // The call ended (end_call's DevCtl::done), after the last writes above: destroy waits for
  // it before it unregisters the areas they go to.
  return rt_->stream_write_value64(stream, &l.call.ctl->done, l.call.seq).prefix("the call's end: ");
}

// The words this rank's stream waits on are in its own area, in host memory: the watchdog
// stores them itself (never lowering one a peer already raised).
void DirectEngine::release_staged() {
  const uint32_t e = waited_round_.load(std::memory_order_acquire);
  if (e == 0 || staging_.empty()) return;
  auto* words = reinterpret_cast<uint32_t*>(staging_[static_cast<size_t>(rank_)]);
  auto raise = [e](uint32_t* w) {
    uint32_t now = __atomic_load_n(w, __ATOMIC_ACQUIRE);
    while (static_cast<int32_t>(now - e) < 0 &&
           !__atomic_compare_exchange_n(w, &now, e, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    }
  };
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    raise(&words[r]);
    raise(&words[kStagedReadWord + r]);  // the side stream's waits (Note [Staged pipeline])
  }
}

}  // namespace accord::dev
