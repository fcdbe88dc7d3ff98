// Note [Direct protocol]: all-reduce between ranks whose GPUs can address each other (one GPU,
// or peers), by direct loads and stores of each other's scratch, with no FIFO: one
// synchronization per round (one-shot) or two (two-shot), where the FIFO has one hand-off per
// slot. Written once for nvcc and the host compiler, as CallRunner (dev_call.hpp, Note [One
// protocol, two executors]): dev_kernel.cu runs it with CudaLanes, the simulated runtime with
// HostLanes; the lanes are the same.
//
// Scratch (one per rank, allocated at init and mapped into every peer: a pointer between
// threads, CUDA IPC between processes; direct.cpp): the flags, then two data halves of
// DevDirect::half_bytes. A call is cut into rounds of at most chunk_elems elements; round
// numbers run on across calls (Note [Direct rounds]), and round e uses half e % 2 only, in
// both forms. In round e, for every slice s (Note [Direct slices]):
//  - one-shot: the rank copies its input into its half (A), stores flag(0, s) = e into every
//    peer's scratch, waits until every peer's flag(0, s) in its own scratch reaches e, then
//    folds all ranks' halves in rank order into its output (B);
//  - two-shot (chunks of a quarter: the half's first quarter holds the input, its second the
//    results): the rank copies its input into the first quarter (A); flag 0 as above; it folds
//    its own part r (the round's elements cut in nranks parts) from every rank's first quarter
//    into its second quarter and stores that into every peer's second quarter (B, the
//    all-gather by stores); flag(1, s) = e to every peer, wait for every peer's; copies its
//    second quarter to its output (C).
// Every rank folds in rank order, as the host executor and the FIFO kernel do (reduce_all), so
// every path gives the same bits.
//
// Why nothing is overwritten before it was read, with no "done reading" round: in round e a
// rank writes only halves e % 2 (its own in A, the peers' in two-shot's B), which were last
// read in round e - 2. A rank is in round e only after it saw every peer's flag(0) of round
// e - 1, and a peer stores that after it has finished round e - 2 (program order in the block
// that owns the slice, a fence before the flag; or, when round e - 1 began a kernel, the whole
// previous kernel). In two-shot's B the writer has even seen the owner's flag(0) of round e.
// Rounds e and e + 1 use different halves, so a peer that is one round ahead (never two: that
// needs this rank's flag of the round between) writes the other half. One-shot and two-shot
// calls follow each other freely: the argument is about halves and rounds, not forms.
// Flags are 64-bit words (the call signature's tag above the round), in the receiver's
// scratch: flag(phase, slice, from) at ((phase * kDirectMaxSlices + slice) * nranks + from).
// They only grow, so nothing resets them; a wait is for round >= e, as a peer may be a round
// ahead. A flag of exactly round e whose tag is not this call's is a mismatched call
// (kDevBadTag).
//
// Note [Direct collectives]: the other collectives in the same rounds and halves, one
// synchronization a round (the one-shot shape): a round carries n of the call's count elements
// per rank (reduce-scatter: per segment, so a round's half holds the nranks segments of n,
// segment k at k times the call's full round, Note [Direct slices]); A puts this rank's part
// into its half (reduce-scatter: every segment; all-gather and reduce: its input; broadcast:
// the root only), flag 0 as above (every rank, the root's peers too: a flag also says "done
// reading the round before"), then B: reduce-scatter folds its own segment from every rank's
// half, all-gather copies every rank's half to its place in the output, broadcast copies the
// root's, reduce's root folds all. The argument above holds
// unchanged: a round writes only halves e % 2.
//
// Note [Waiting protocol]: processes that share a GPU without MPS never run kernels at the
// same time (time slices of about 2 ms, issue 34), so a kernel that waits for a peer's flag
// holds the GPU until its slice ends, and every synchronization costs a slice. The waiting
// protocol (ACCORD_SHARED_GPU_SYNC=wait, Note [Shared GPU sync] in gpu_sync.cpp) runs the same
// rounds, halves and data movement as the spinning one, cut at its synchronizations: every
// phase of a round (A, B, and two-shot's C above; DirectRunner::phase) is a kernel of its own
// (DevDirect::phase) that only reads and writes data, and each exchange between two phases is
// done by the stream: after the kernel of phase p, one stream_write_value32 of round e into
// every peer's word (phase p, from this rank) in the peer's scratch (direct_wait_word: the low
// half of flag(p, slice 0, this rank), so the layout is unchanged), then one
// stream_wait_value32 (>= e, wrapping) on every peer's word in this rank's scratch. A stream
// blocked in such a wait holds no time slice, so the other process's kernels run at once.
// The kernel of a round's last phase also runs phase 0 (A) of the next round
// (DevDirect::then_next): A of round e + 1 writes only halves (e + 1) % 2, which the peers
// last read in round e - 1, and this stream has waited for every peer's flag 0 of round e
// (stored after their round e - 1) before it; so a call of R rounds is 1 + R (phases - 1)
// kernels.
// Why nothing is overwritten before it was read: the argument above, word for word, with "a
// peer stores flag(0) of round e - 1 after it finished round e - 2" holding by stream order
// (the peer's write of its word follows its kernels of round e - 2). Flags carry no call
// signature in this form (one 32-bit word a write), so a mismatched call is not caught on the
// device; ACCORD_CHECK=1 compares calls on the host. Only the call's last kernel writes
// DevCtl::done, so the watchdog watches the call until its last wait has passed; a wait on a
// peer that died is ended by the watchdog writing the word itself (DirectEngine::
// release_waits), after DevCtl::abort, so the kernels after it do nothing.
//
// Note [Direct rounds]: every rank numbers rounds from 1 at init and adds the rounds of each
// direct call (ceil(count / chunk_elems)); the ranks make the same calls, so they agree. The
// 32-bit round wraps after 4 billion rounds; waits compare with a signed difference.
//
// Note [Direct slices]: a round is cut into nslices slices (the same on every rank: from the
// round's size alone), slice s handled by block s % nblocks, so a slice is always the same
// block's within a kernel. Ranks may launch different numbers of blocks (each GPU's share of
// multiprocessors); every block of every rank must be resident at once, as for the FIFO
// kernel (Note [Blocks]). The safety argument above holds per slice within a kernel, and only
// because slice s is the same elements of the halves in every round of a call: slices, two-shot's
// parts and a reduce-scatter's segments are cut from the call's full round (span(),
// min(count, chunk_elems)) and clipped to the round's n, so a shorter last round uses a prefix of
// each. They were cut from each round's own n: then slice s of a short last round e covered
// elements of other slices of round e - 2, which another block of a peer could still be reading
// (its flag 0 of round e - 1 speaks for slice s only), and all-reduce, reduce-scatter,
// broadcast and reduce of three or more rounds with a short last one came out wrong on
// simulated GPUs in most runs (bench/: *_perf_gpus_rounds). Powers of two fill every round, so
// nccl-tests on the H200 never met it. Calls may cut differently (their spans differ): a
// peer's flag of the next call comes from its next kernel, which started after its whole
// previous one, so after it read every slice of the call before.
//
// Note [Registered inputs]: a call whose input lies in a buffer this rank registered (Note
// [User buffers mapped into peers], user_buffers.cpp), or any input in a job of threads (Note
// [Inputs read where they lie], direct_path.cpp), skips A: the peers read it straight from its
// buffer (one-shot all-reduce and reduce: all of the round; two-shot: each its own part, in B;
// reduce-scatter: each its own segment; all-gather: every rank's; broadcast: the root's),
// which every peer has mapped since the (collective) registration.
// Registrations have slots, the same on every rank (collective and in the same order), and
// DevDirect::user holds every rank's buffer of every slot as this GPU addresses it (slot
// kDirectPointerSlot: the offset is the input's own address). Which rank took which way is
// agreed per round and slice on the device: with its flag 0, each rank's leader stores a
// descriptor (slot + 1, or 0 for "in my scratch"; the input's offset in the registered
// buffer) into every peer's scratch, at (round parity, slice, rank), before the flag (store64
// fences first, so a peer that sees the flag sees the descriptor). B reads them after the wait.
// A rank describes its input the same way in every round of a call. Since the owner may
// overwrite its input once its own kernel ends, a call in which some rank's input was read
// from its own buffer ends with one more exchange (flag 1, which the forms of one
// synchronization a round do not otherwise use) after its last round: a rank leaves the call
// only after every peer has read it. Not after every round: within a call no rank writes its
// input where a peer reads it (below), and a peer's flag 0 of round e + 1 (stored after its B
// of round e, per slice) already says it is done with round e. Every rank reads the same
// descriptors, so every rank takes that exchange or none. A descriptor of parity e % 2 is
// rewritten in round e + 2 only after its reader's flag 0 of round e + 1, stored after it left
// round e (per slice, as the flags). Two-shot needs no exchange more: its flag 1 of a slice,
// which every rank stores after its B, already says that every peer has folded its part of
// that slice from this rank's input; so two-shot may also run in place, as its C (the only
// write of the output) comes after that flag and writes only the slice's elements.
// In place, the output is written where a peer reads only in a one-shot all-reduce, which so
// keeps the scratch (the same traffic: the copy A saves would be a copy of the output after
// the exchange); an all-gather's own segment is not copied, a broadcast root's not either; a
// reduce-scatter's output is its own segment, which only this rank folds, and a reduce's is
// read by its root only, but a fold of more than 2 + kMoveMoreSources ranks reads its output
// back (Note [Folding in one pass]), so there only a rank folded in the first pass reads in
// place (DeviceEngine::reads_input_in_place). A pre-multiplied sum and the waiting protocol
// keep the scratch (DeviceEngine::prepare_direct).
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/device/dev_call.hpp"

namespace accord::dev {

constexpr uint32_t kDirectMaxSlices = 16;
constexpr uint64_t kDirectSliceBytes = 32 << 10;  // the least a slice carries, when the round can
// Note [Registered inputs]: registrations a call may read directly (slots of DevDirect::user).
constexpr int32_t kDirectUserSlots = 32;
// Note [Inputs read where they lie]: the slot of a descriptor whose offset is the input's own
// address (ranks that are threads of one process address each other's pointers).
constexpr int32_t kDirectPointerSlot = kDirectUserSlots;

// Bytes of a scratch's flags for `nranks` ranks, padded to 256 (the data halves follow): the
// flags of Note [Direct protocol] (2 x kDirectMaxSlices words per rank), then the descriptors
// of Note [Registered inputs] (two 64-bit words per round parity, slice and rank).
constexpr uint64_t kDirectDescWordsPerRank = 2ull * 2ull * kDirectMaxSlices;
ACCORD_HD constexpr uint64_t direct_flag_bytes(int32_t nranks) {
  return (((2ull * kDirectMaxSlices + kDirectDescWordsPerRank) * static_cast<uint64_t>(nranks) * 8 + 255) / 256) *
         256;
}

// Note [Staged protocol] (direct_staged.cpp): the stride of DevDirect::stage_tags' halves,
// and so the most ranks the staged protocol takes.
constexpr uint32_t kStagedTagStride = 64;

// Note [Waiting protocol]: the kernels of a call, per round (phases, then an exchange
// between two of them): 3 for a two-shot all-reduce, 2 for every other direct form.
constexpr uint32_t kDirectMaxPhases = 3;
ACCORD_HD constexpr uint32_t direct_phases(uint32_t coll, uint32_t proto) {
  return coll == kCollAllReduce && proto == kProtoTwoShot ? kDirectMaxPhases : 2;
}
// The 32-bit word of flag(phase, slice 0, from) in a scratch: its low half (little-endian, as
// x86, Arm and every NVIDIA GPU are), which the waiting protocol's streams write and wait on.
ACCORD_HD inline uint32_t* direct_wait_word(uint8_t* scratch, int32_t nranks, uint32_t phase, int32_t from) {
  return reinterpret_cast<uint32_t*>(reinterpret_cast<uint64_t*>(scratch) +
                                     static_cast<uint64_t>(phase) * kDirectMaxSlices * nranks + from);
}

// The rounds of a call: ceil(count / chunk_elems) (Note [Direct rounds]).
ACCORD_HD constexpr uint64_t direct_rounds(const DevDirect& d) {
  return d.chunk_elems == 0 ? 0 : (d.count + d.chunk_elems - 1) / d.chunk_elems;
}

template <class Lanes>
class DirectRunner {
 public:
  ACCORD_HD DirectRunner(const DevCall& c, const DevDirect& d, Lanes& lanes) : c_(c), d_(d), L_(lanes) {}

  ACCORD_HD bool run() {
    bool ok = begin_call(L_, c_);
    if (!ok) fail(kDevAborted, -1, 0, 0);
    scalar_ = premul_scalar(c_);
    const uint64_t rounds = direct_rounds(d_);
    if (d_.phase != 0) {  // Note [Waiting protocol]: one phase of one round, no wait inside
      for (uint32_t i = 0; ok && i < (d_.then_next != 0 ? 2u : 1u); ++i) {
        const uint64_t k = d_.phase_round + i;
        const uint64_t base = k * d_.chunk_elems;
        const uint64_t n = k < rounds ? (d_.count - base < d_.chunk_elems ? d_.count - base : d_.chunk_elems) : 0;
        round_index_ = static_cast<uint32_t>(k);
        const uint32_t e = d_.round + static_cast<uint32_t>(k);
        if (i == 0 && d_.phase > 1 && d_.stage_tags != nullptr && L_.block() == 0) ok = stage_tags_match(e);
        for (uint32_t s = L_.block(); ok && n > 0 && s < d_.nslices; s += c_.nblocks) phase(i == 0 ? d_.phase - 1 : 0, e, base, n, s);
      }
      if (d_.last != 0) {
        end_call(L_, c_, /*fold_deltas=*/false);
      } else {  // the stream's write of the round's word follows this kernel
        L_.publish();
        L_.sync();
      }
      return ok;
    }
    for (uint64_t k = 0; ok && k < rounds; ++k) {
      const uint64_t base = k * d_.chunk_elems;
      const uint64_t n = d_.count - base < d_.chunk_elems ? d_.count - base : d_.chunk_elems;
      round_index_ = static_cast<uint32_t>(k);
      const uint32_t e = d_.round + static_cast<uint32_t>(k);
      for (uint32_t s = L_.block(); ok && s < d_.nslices; s += c_.nblocks) ok = run_slice(e, base, n, s, k + 1 == rounds);
    }
    end_call(L_, c_, /*fold_deltas=*/false);  // no FIFO counts move
    return ok;
  }

 private:
  struct Range {
    uint64_t lo, hi;  // elements
  };
  // Part i of m of [0, n), in whole 16-byte vectors where it can.
  ACCORD_HD Range split(uint64_t n, uint64_t m, uint64_t i) const {
    const uint64_t al = c_.elem_bytes >= 16 ? 1 : 16 / c_.elem_bytes;
    uint64_t per = (n + m - 1) / m;
    per = (per + al - 1) / al * al;
    const uint64_t lo = i * per < n ? i * per : n;
    return Range{lo, lo + per < n ? lo + per : n};
  }
  ACCORD_HD Range sub(Range part, uint32_t s) const {
    const Range r = split(part.hi - part.lo, d_.nslices, s);
    return Range{part.lo + r.lo, part.lo + r.hi};
  }
  // Note [Direct slices]: the elements of the call's full round (every round but a shorter
  // last one), from which every round of the call cuts its slices and parts: a slice is the
  // same elements of the halves in every round, clipped to the round's n.
  ACCORD_HD uint64_t span() const { return d_.count < d_.chunk_elems ? d_.count : d_.chunk_elems; }
  ACCORD_HD static Range clip(Range r, uint64_t n) { return Range{r.lo < n ? r.lo : n, r.hi < n ? r.hi : n}; }
  // Slice s of a round of n elements.
  ACCORD_HD Range slice(uint64_t n, uint32_t s) const { return clip(split(span(), d_.nslices, s), n); }
  // The elements of slice s that rank `owner` folds: all of the round (one-shot), or slice s of
  // part `owner` (two-shot).
  ACCORD_HD Range owned(uint64_t n, int32_t owner, uint32_t s) const {
    if (d_.proto == kProtoOneShot) return slice(n, s);
    return clip(sub(split(span(), static_cast<uint64_t>(c_.nranks), static_cast<uint64_t>(owner)), s), n);
  }
  ACCORD_HD uint8_t* half(int32_t rank, uint32_t h) const {
    return d_.scratch[rank] + d_.data_offset + h * d_.half_bytes;
  }
  // Two-shot: the second quarter of the round's half holds the folded parts.
  ACCORD_HD uint8_t* results(int32_t rank, uint32_t h) const { return half(rank, h) + d_.half_bytes / 2; }
  ACCORD_HD uint64_t* flag(int32_t at, uint32_t phase, uint32_t s, int32_t from) const {
    return reinterpret_cast<uint64_t*>(d_.scratch[at]) + (phase * kDirectMaxSlices + s) * c_.nranks + from;
  }
  // Note [Registered inputs]: rank `from`'s descriptor of slice s, round parity h, in rank
  // `at`'s scratch: {slot + 1 or 0, byte offset}.
  ACCORD_HD uint64_t* desc(int32_t at, uint32_t h, uint32_t s, int32_t from) const {
    return reinterpret_cast<uint64_t*>(d_.scratch[at]) + 2ull * kDirectMaxSlices * c_.nranks +
           ((h * kDirectMaxSlices + s) * c_.nranks + from) * 2;
  }
  // Whether this round's ranks tell each other where their inputs are (every spinning form;
  // the waiting protocol keeps the scratch).
  ACCORD_HD bool described() const { return d_.phase == 0 && d_.user != nullptr; }
  ACCORD_HD const uint8_t* in(uint64_t elem) const {
    return static_cast<const uint8_t*>(c_.input) + elem * c_.elem_bytes;
  }
  ACCORD_HD uint8_t* out(uint64_t elem) const { return static_cast<uint8_t*>(c_.output) + elem * c_.elem_bytes; }

  ACCORD_HD void copy(void* dst, const void* src, uint64_t elems) {
    if (elems == 0 || dst == src) return;
    MoveArgs m;
    m.dst0 = dst;
    m.a = src;
    m.count = elems * c_.elem_bytes;
    m.copy_bytes = true;
    L_.move(m);
  }
  // Phase A's copy of this rank's input into its scratch: scaled by the scalar for a
  // pre-multiplied sum (Note [Pre-multiplied sum], dev_call.hpp), which then folds as a sum.
  ACCORD_HD void copy_in(void* dst, const void* src, uint64_t elems) {
    if (c_.premul == 0) return copy(dst, src, elems);
    if (elems == 0) return;
    MoveArgs m;
    m.dst0 = dst;
    m.a = src;
    m.count = elems;
    m.scale = 1;
    m.scalar = scalar_;
    L_.move(m);
  }
  // dst = r_0 op r_1 op ... in rank order, where r_p is rank p's `h` half at element `at`.
  ACCORD_HD void fold(void* dst, uint32_t h, uint64_t at, uint64_t elems) {
    if (elems == 0) return;
    const uint64_t off = at * c_.elem_bytes;
    fold_sources(dst, elems, [&](int32_t p) -> const void* { return half(p, h) + off; });
  }
  // Note [Folding in one pass] (dev_call.hpp): dst = src(0) op src(1) op ... op src(nranks - 1),
  // in moves of up to 2 + kMoveMoreSources sources; a move after the first folds dst itself
  // first (its own elements, as the first move split them: the sync orders them).
  template <class Source>
  ACCORD_HD void fold_sources(void* dst, uint64_t elems, Source src) {
    MoveArgs m;
    m.dst0 = dst;
    m.count = elems;
    int32_t p = 0;
    while (p < c_.nranks) {
      if (p == 0) {
        m.a = src(0);
        p = 1;
      } else {
        L_.sync();  // a thread may read back what another wrote (alignment changes the split)
        m.a = dst;
      }
      m.b = src(p++);
      m.nmore = 0;
      while (p < c_.nranks && m.nmore < kMoveMoreSources) m.more[m.nmore++] = src(p++);
      m.divisor = p == c_.nranks ? c_.divisor : 0;
      L_.move(m);
    }
  }

  // Note [Registered inputs]: where rank p's input element `elem` (of the call) of round e's
  // slice s is, as its descriptor says: its registered buffer (or, Note [Inputs read where they
  // lie], its own pointer), or its scratch half h at element `at`. *user: not the scratch.
  ACCORD_HD const uint8_t* source(int32_t p, uint32_t h, uint32_t s, uint64_t elem, uint64_t at, bool* user) {
    const uint8_t* scratch = half(p, h) + at * c_.elem_bytes;
    if (p == c_.rank) {
      *user = d_.my_slot >= 0;
      return *user ? in(elem) : scratch;
    }
    const uint64_t slot = L_.share(L_.leader() ? L_.load64(desc(c_.rank, h, s, p)) : 0);
    const uint64_t offset = L_.share(L_.leader() ? L_.load64(desc(c_.rank, h, s, p) + 1) : 0);
    *user = slot != 0 && slot <= static_cast<uint64_t>(kDirectUserSlots) + 1;
    if (!*user) return scratch;
    const uint8_t* buffer = slot == kDirectPointerSlot + 1
                                ? nullptr
                                : d_.user[(slot - 1) * static_cast<uint64_t>(c_.nranks) + static_cast<uint64_t>(p)];
    return buffer + offset + elem * c_.elem_bytes;
  }
  // dst = the fold of every rank's input at call element `elem` (scratch: at `at` of half h)
  // from where each lies: the one fold of described sources (one instantiation: registers).
  ACCORD_HD void fold_described(void* dst, uint64_t elems, uint32_t h, uint32_t s, uint64_t elem, uint64_t at) {
    if (elems == 0) return;
    bool user = false;
    fold_sources(dst, elems, [&](int32_t p) -> const void* { return source(p, h, s, elem, at, &user); });
  }
  // Whether some rank's input of round e's slice s is read where it lies (its descriptor, read
  // after flag 0): then the call's last round ends with one more exchange.
  ACCORD_HD bool any_described(uint32_t h, uint32_t s) {
    uint64_t any = d_.my_slot >= 0 ? 1 : 0;
    if (L_.leader())
      for (int32_t p = 0; p < c_.nranks; ++p)
        if (p != c_.rank && L_.load64(desc(c_.rank, h, s, p)) != 0) any = 1;
    return L_.share(any) != 0;
  }

  // Once every thread of the block has written its part (the barrier), the leader tells every
  // peer (flag = round e; store64 fences first: one fence a peer, by one thread, after the
  // barrier, as NCCL's Simple protocol does), then waits for every peer's flag of round e in
  // this rank's scratch. False on a failure.
  ACCORD_HD bool exchange(uint32_t phase, uint32_t s, uint32_t e) {
    L_.sync();
    int32_t failed = 0;
    if (L_.leader()) {
      const uint64_t mine = (static_cast<uint64_t>(c_.tag) << 32) | e;
      if (phase == 0 && described())  // Note [Registered inputs]: before the flag
        for (int32_t p = 0; p < c_.nranks; ++p)
          if (p != c_.rank) {
            L_.store64(desc(p, e & 1u, s, c_.rank), static_cast<uint64_t>(d_.my_slot + 1));
            L_.store64(desc(p, e & 1u, s, c_.rank) + 1, d_.my_offset);
          }
      for (int32_t p = 0; p < c_.nranks; ++p)
        if (p != c_.rank) L_.store64(flag(p, phase, s, c_.rank), mine);
      for (int32_t p = 0; p < c_.nranks && failed == 0; ++p) {
        if (p == c_.rank) continue;
        const uint64_t* word = flag(c_.rank, phase, s, p);
        uint64_t seen = 0;
        Lanes& L = L_;
        if (!wait_until(L, c_.ctl, [&] {
              seen = L.load64(word);
              return static_cast<int32_t>(static_cast<uint32_t>(seen) - e) >= 0;
            }, p, round_index_)) {
          fail(kDevAborted, p, 0, 0);
          failed = 1;
        } else if (static_cast<uint32_t>(seen) == e && static_cast<uint32_t>(seen >> 32) != c_.tag) {
          fail(kDevBadTag, p, c_.tag, seen >> 32);
          failed = 1;
        }
      }
    }
    return L_.share(failed) == 0;
  }

  // Note [Staged protocol]: every peer's tag of round e (written by its stream before its
  // round word, which this rank's stream waited for) is this call's; block 0's leader checks.
  ACCORD_HD bool stage_tags_match(uint32_t e) {
    int32_t failed = 0;
    if (L_.leader()) {
      const uint32_t* tags = d_.stage_tags + (e & 1u) * kStagedTagStride;
      for (int32_t p = 0; p < c_.nranks && failed == 0; ++p) {
        if (p == c_.rank) continue;
        const uint32_t got = L_.load(tags + p);
        if (got != c_.tag) {
          fail(kDevBadTag, p, c_.tag, got);
          failed = 1;
        }
      }
    }
    return L_.share(failed) == 0;
  }

  // The kernels of a call in the waiting protocol, per round: phase 0, then the exchange of
  // flag 0, phase 1, and for a two-shot all-reduce the exchange of flag 1 and phase 2.
  ACCORD_HD uint32_t phases() const { return direct_phases(d_.coll, d_.proto); }

  // Phase `which` of slice s of round e (elements [base, base + n) of the call): the data
  // movement between two synchronizations, the same in both protocols (Note [Direct
  // protocol], Note [Direct collectives]; Note [Waiting protocol]).
  ACCORD_HD void phase(uint32_t which, uint32_t e, uint64_t base, uint64_t n, uint32_t s) {
    if (d_.coll != kCollAllReduce) return other_phase(which, e, base, n, s);
    const bool one_shot = d_.proto == kProtoOneShot;
    const uint32_t h_in = e & 1u;
    if (which == 0) {  // A: this rank's input of the slice into its scratch.
      if (one_shot) {
        if (described() && d_.my_slot >= 0) return;  // Note [Registered inputs]: the peers read it where it is
        const Range r = owned(n, 0, s);
        copy_in(half(c_.rank, h_in) + r.lo * c_.elem_bytes, in(base + r.lo), r.hi - r.lo);
        return;
      }
      if (described() && d_.my_slot >= 0) return;  // Note [Registered inputs]: each owner reads its part where it is
      for (int32_t k = 0; k < c_.nranks; ++k) {
        const Range r = owned(n, k, s);
        copy_in(half(c_.rank, h_in) + r.lo * c_.elem_bytes, in(base + r.lo), r.hi - r.lo);
      }
      return;
    }
    if (which == 1 && one_shot) {  // B: every rank's slice, folded into the output
      const Range r = owned(n, 0, s);
      fold(out(base + r.lo), h_in, r.lo, r.hi - r.lo);
      return;
    }
    if (which == 1) {  // B: this rank's part, folded into its results quarter, then stored into every peer's.
      const Range mine = owned(n, c_.rank, s);
      uint8_t* res = results(c_.rank, h_in) + mine.lo * c_.elem_bytes;
      if (described() && mine.hi > mine.lo) {  // Note [Registered inputs]: from where each rank's input is
        fold_described(res, mine.hi - mine.lo, h_in, s, base + mine.lo, mine.lo);
      } else {
        fold(res, h_in, mine.lo, mine.hi - mine.lo);
      }
      L_.sync();
      for (int32_t p = 0; p < c_.nranks; ++p)
        if (p != c_.rank) copy(results(p, h_in) + mine.lo * c_.elem_bytes, res, mine.hi - mine.lo);
      return;
    }
    // C: every part of the slice, from the results quarter into the output.
    for (int32_t k = 0; k < c_.nranks; ++k) {
      const Range r = owned(n, k, s);
      copy(out(base + r.lo), results(c_.rank, h_in) + r.lo * c_.elem_bytes, r.hi - r.lo);
    }
    L_.sync();
  }

  // The other collectives, one synchronization a round (Note [Direct collectives]): A is
  // phase 0, B phase 1.
  ACCORD_HD void other_phase(uint32_t which, uint32_t e, uint64_t base, uint64_t n, uint32_t s) {
    const uint32_t h = e & 1u;
    const uint64_t es = c_.elem_bytes;
    const Range r = slice(n, s);
    const uint64_t len = r.hi - r.lo;
    const uint64_t seg = span();  // a reduce-scatter round's segment k is at k * seg of the half
    const int32_t R = c_.nranks;
    if (which == 0) {
      if (described() && d_.my_slot >= 0) return;  // Note [Registered inputs]: the peers read it where it is
      switch (d_.coll) {  // A
        case kCollReduceScatter:  // every rank's segment of the round, segment k at k * seg
          for (int32_t k = 0; k < R; ++k)
            copy_in(half(c_.rank, h) + (static_cast<uint64_t>(k) * seg + r.lo) * es,
                    in(static_cast<uint64_t>(k) * d_.count + base + r.lo), len);
          break;
        case kCollBroadcast:
          if (c_.rank == d_.root) copy(half(c_.rank, h) + r.lo * es, in(base + r.lo), len);
          break;
        default:  // all-gather, reduce
          copy_in(half(c_.rank, h) + r.lo * es, in(base + r.lo), len);
      }
      return;
    }
    switch (d_.coll) {  // B
      case kCollReduceScatter:
        fold(out(base + r.lo), h, static_cast<uint64_t>(c_.rank) * seg + r.lo, len);
        break;
      case kCollAllGather:
        for (int32_t p = 0; p < R; ++p)
          copy(out(static_cast<uint64_t>(p) * d_.count + base + r.lo), half(p, h) + r.lo * es, len);
        break;
      case kCollBroadcast:
        copy(out(base + r.lo), half(d_.root, h) + r.lo * es, len);
        break;
      default:  // reduce
        if (c_.rank == d_.root) fold(out(base + r.lo), h, r.lo, len);
    }
  }

  // Note [Registered inputs]: B of a round of one synchronization (the one-shot all-reduce and
  // the other collectives), from where each rank's input is.
  ACCORD_HD void described_b(uint32_t h, uint64_t base, uint64_t n, uint32_t s) {
    const Range r = slice(n, s);
    const uint64_t len = r.hi - r.lo;
    if (len == 0) return;
    bool user = false;
    const uint64_t at = base + r.lo;
    switch (d_.coll) {
      case kCollReduceScatter: {  // this rank's segment of every rank's input
        const uint64_t k = static_cast<uint64_t>(c_.rank);
        fold_described(out(at), len, h, s, k * d_.count + at, k * span() + r.lo);
        return;
      }
      case kCollAllGather:
        for (int32_t p = 0; p < c_.nranks; ++p)
          copy(out(static_cast<uint64_t>(p) * d_.count + at), source(p, h, s, at, r.lo, &user), len);
        return;
      case kCollBroadcast:
        copy(out(at), source(d_.root, h, s, at, r.lo, &user), len);
        return;
      default:  // all-reduce (one-shot), reduce (its root)
        if (d_.coll == kCollAllReduce || c_.rank == d_.root)
          fold_described(out(at), len, h, s, at, r.lo);
    }
  }

  // The spinning protocol: every phase of the slice, the flags exchanged between them. `last`:
  // round e is the call's last.
  ACCORD_HD bool run_slice(uint32_t e, uint64_t base, uint64_t n, uint32_t s, bool last) {
    if (described() && phases() == 2) {  // Note [Registered inputs]: A, flag 0, B from the described sources
      phase(0, e, base, n, s);
      if (!exchange(0, s, e)) return false;
      const bool any = any_described(e & 1u, s);
      described_b(e & 1u, base, n, s);
      // Some rank's own buffer was read: at the call's end, every peer is done with it.
      return !any || !last || exchange(1, s, e);
    }
    const uint32_t np = phases();
    for (uint32_t p = 0; p < np; ++p) {
      if (p > 0 && !exchange(p - 1, s, e)) return false;
      phase(p, e, base, n, s);
    }
    return true;
  }

  // Leader only: the first failure of this call, at this round.
  ACCORD_HD void fail(int32_t code, int32_t peer, uint64_t want, uint64_t got) {
    record_failure(L_, c_, code, peer, static_cast<int64_t>(round_index_), want, got);
  }

  const DevCall& c_;
  const DevDirect& d_;
  Lanes& L_;
  uint32_t round_index_ = 0;
  uint64_t scalar_ = 0;  // Note [Pre-multiplied sum]: the scalar's bits
};

}  // namespace accord::dev
