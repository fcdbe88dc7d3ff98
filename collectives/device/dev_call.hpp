// Note [One protocol, two executors]: a collective on device buffers is one kernel on the
// caller's stream (NCCL's shape). The kernel runs this rank's schedule (schedule.hpp) step by
// step, moving data through FIFOs in device-visible memory and waiting on flags it polls
// itself; no host thread takes part. This header is that kernel's whole protocol: the plain
// structs a launch carries (DevLaunch), and run_call(), written once for the host compiler and
// nvcc. On a GPU, dev_kernel.cu runs run_call with a block of threads (CudaLanes); the
// simulated runtime runs the very same run_call on the stream's host thread (HostLanes in
// dev_host.cpp). The lanes supply only what differs: how a flag is loaded and stored, how the
// threads of a block agree, and the element loops.
//
// FIFO (one per directed pair of ranks, DevFifo): nslots slots of slot_bytes in the receiver's
// memory (its GPU memory for p2p / ipc pairs, its shared-memory segment, pinned and mapped, for
// host-staged pairs), with the flags beside them, in the layout of the host FIFO (fifo.hpp:
// FifoCtrl's head word, then 64-byte SlotHeaders whose first words are seq, size, tag):
//  - message m uses slot m % nslots; the sender waits until head + nslots > m, writes the
//    payload, fences, writes size and tag, then seq = m + 1;
//  - the receiver waits until the slot's seq == m + 1, uses the payload, then stores head = m + 1;
//  - each end keeps its own count (messages sent / received) in its own device memory
//    (DevFifo::count), so consecutive kernels go on where the last one stopped.
// Kernels of one communicator run one after another (the communicator orders them, Note
// [Kernel order] in engine.cpp), so each count has one writer at a time.
//
// Note [Blocks]: a large call runs as DevCall::nblocks blocks (one is the default for small
// ones; engine.cpp chooses). Every block runs every step and moves its own slice of each
// step's bytes (16-byte multiples, in order of block index); every block waits on the same
// flags. A message is whole when every block has written its slice, so the last block to do
// so (an arrival counter per slot, DevFifo::arrive, in this rank's GPU memory, which that
// block sets back to zero) writes the slot's header; likewise the last block done reading a
// message stores the FIFO's head, after the head of the message before it (a block may finish
// message m+1 before another finishes m; head must only grow). A slot's counter is used again
// only for the message nslots later, which cannot be sent before the head passed this one.
// Scratch (kReduceAll's running result) is not sliced by the step's bytes like the buffers:
// block b keeps its slice at b * DevCall::scratch_stride whatever the step's size, since a
// block that is ahead, on a step of another size, would otherwise write where a block behind
// still reduces (seen: wrong sums of a direct all-reduce of 2 chunks on 4 simulated GPUs).
// With several blocks each keeps its counts as the count at the kernel's start (DevFifo::count,
// unchanged while the kernel runs) plus what it has sent or received since (Lanes::deltas);
// the last block to finish the kernel (DevCall::grid[0]) adds them to the counts and writes
// DevCtl::done. One block (nblocks 1) is the protocol above, unchanged: counts written at once,
// no counters.
//
// Errors: every wait polls DevCtl::abort, which the communicator's watchdog sets (timeout, a
// dead peer, abort); the kernel then records where it was in DevCtl and returns, so the
// caller's stream goes on. A message of the wrong size or call signature is recorded the same
// way. The kernel writes DevCtl::done = its seq last, in every case.
//
// Note [Pre-multiplied sum]: NCCL's ncclRedOpCreatePreMulSum (and accord_red_op_create_
// pre_mul_sum): the sum over ranks of scalar_r * x_r. A sum whose DevCall::premul is set
// multiplies every element this rank contributes by its scalar where it reads it (a step
// whose src is the input: a send of its own data, a reduction with it, a copy of it), in the
// dtype's arithmetic (halves in float32, integers wrapping), then goes on as a sum; the
// scalar is read once when the kernel starts. No buffer of scaled data exists, so reduce and
// reduce-scatter need none either. The direct protocol (direct_call.hpp) scales where its
// phase A copies the input into the scratch, the only place it reads the input of a reduction.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/kernels/element_ops.hpp"  // ACCORD_HD

namespace accord::dev {

// Step kinds and buffers: the values of StepKind and Buf (schedule.hpp; dev_host.cpp checks).
enum : uint8_t {
  kStepSend = 0,
  kStepRecv,
  kStepRecvReduce,
  kStepRecvReduceSend,
  kStepRecvReduceCopySend,
  kStepRecvCopySend,
  kStepCopy,
  kStepReduceAll,
};
// kBufAddress: the step's offset is the buffer's device address (a point-to-point batch, whose
// calls each have buffers of their own: Note [Point-to-point schedules], point_to_point.cpp).
enum : uint8_t { kBufInput = 0, kBufOutput = 1, kBufAddress = 2 };

struct DevStep {
  uint8_t kind;
  uint8_t src;
  uint8_t dst;
  uint8_t postop;
  uint8_t message_right;
  uint8_t copied;  // Step::copied: kSend / kRecv hand the slot off, the payload moved by a copy
  uint8_t pad[2];
  int32_t send_peer;
  int32_t recv_peer;
  uint64_t src_off;
  uint64_t dst_off;
  uint64_t bytes;
  uint32_t tag;  // its messages' tag; 0: the call's (DevCall::tag)
  uint32_t pad2;
};
static_assert(sizeof(DevStep) == 48, "DevStep is copied as plain bytes");

// Byte offsets of the flags inside the host FIFO layout (fifo.hpp; checked in dev_host.cpp).
constexpr size_t kHeadOffset = 0;      // FifoCtrl::head
constexpr size_t kReverseHeadOffset = 68;  // FifoCtrl::reverse_head (Note [Waiting FIFOs])
constexpr size_t kSlotHeaderBytes = 64;  // SlotHeader: seq +0, size +4, tag +8

struct DevFifo {
  uint32_t* head = nullptr;      // messages released by the receiver
  uint8_t* headers = nullptr;    // nslots SlotHeaders
  uint8_t* data = nullptr;       // slot i at data + i * slot_stride
  uint32_t* count = nullptr;     // this end's own count, in this rank's device memory
  uint32_t* arrive = nullptr;    // nslots block arrival counters of this end (Note [Blocks])
  uint64_t slot_stride = 0;
  uint32_t nslots = 0;
  uint32_t slot_bytes = 0;
};

struct DevPeer {
  DevFifo send;  // to the peer
  DevFifo recv;  // from the peer
};

// Error codes a kernel records (DevCtl::err_code).
enum : int32_t { kDevOk = 0, kDevAborted = 1, kDevBadTag = 2, kDevBadSize = 3, kDevNoChannel = 4 };

// One per GPU communicator, in pinned host memory mapped into the GPU: the host reads it without
// any CUDA call (the watchdog), the kernel writes it.
struct DevCtl {
  uint32_t abort;  // non-zero: every kernel of this communicator gives up at its next wait
  uint32_t pad0[15];
  uint64_t started;  // seq of the last call whose kernel began
  uint64_t done;     // seq of the last call whose kernel ended
  int32_t waiting_peer;  // the rank a kernel has waited on for a while (for the watchdog's message)
  int32_t waiting_step;
  uint32_t pad1[10];
  // The first failure a kernel met (err_seq 0: none).
  uint64_t err_seq;
  int32_t err_code;
  int32_t err_peer;
  int64_t err_step;
  uint64_t err_want;
  uint64_t err_got;
};

struct DevCall {
  const DevStep* steps = nullptr;  // null: DevLaunch::steps (short schedules travel inline)
  uint32_t nsteps = 0;
  int32_t nranks = 1;
  int32_t rank = 0;
  int32_t dtype = 0;
  int32_t op = 0;
  int32_t divisor = 0;  // > 1: avg's divide on the last reduction of each element
  uint32_t elem_bytes = 1;
  uint32_t tag = 0;     // the call signature (Note [Call signature])
  const void* input = nullptr;
  void* output = nullptr;
  void* scratch = nullptr;  // kReduceAll with 3+ ranks: one step's bytes
  const DevPeer* peers = nullptr;  // [nranks], device memory
  DevCtl* ctl = nullptr;           // device address of the communicator's DevCtl
  uint64_t seq = 0;
  uint32_t nblocks = 1;            // Note [Blocks]
  // Note [Pre-multiplied sum]: 1: every element this rank contributes (read from the input)
  // is first multiplied by `scalar` (its bits, in the dtype); 2: by the dtype's value at
  // scalar_ptr (device memory, read when the kernel starts, NCCL's ncclScalarDevice); 0: no.
  uint32_t premul = 0;
  uint32_t* grid = nullptr;        // [0] blocks done with the kernel, [1] failure claimed; GPU memory
  uint64_t scalar = 0;
  const void* scalar_ptr = nullptr;
  uint64_t scratch_stride = 0;  // nblocks > 1: each block's own part of scratch (Note [Blocks])
};

constexpr uint32_t kInlineSteps = 16;
constexpr unsigned kCollectiveThreads = 512;  // one block of the CUDA kernel

// The direct protocol's part of a launch (direct_call.hpp, Note [Direct protocol]); proto
// kProtoFifo: the FIFO schedule of DevLaunch::steps instead.
enum : uint32_t { kProtoFifo = 0, kProtoOneShot = 1, kProtoTwoShot = 2 };
// The collectives, as schedule.hpp's Collective numbers them (dev_host.cpp checks).
enum : uint32_t { kCollAllReduce = 0, kCollReduceScatter = 1, kCollAllGather = 2, kCollBroadcast = 3, kCollReduce = 4 };
struct DevDirect {
  uint8_t* const* scratch = nullptr;  // [nranks] every rank's scratch as this GPU addresses it
  uint64_t count = 0;                 // elements of the call
  uint64_t chunk_elems = 0;           // elements per round (the last one may have fewer)
  uint64_t half_bytes = 0;            // bytes of each of a scratch's two data halves
  uint64_t data_offset = 0;           // where the halves start in a scratch (after the flags)
  uint32_t round = 0;                 // this call's first round (Note [Direct rounds])
  uint32_t proto = kProtoFifo;
  uint32_t nslices = 1;               // slices of every round (Note [Direct slices])
  uint32_t coll = kCollAllReduce;
  int32_t root = 0;                   // broadcast, reduce
  // Note [Waiting protocol] (direct_call.hpp): 0: the whole call, waiting on the peers' flags
  // inside (spinning); p > 0: phase p - 1 of round `phase_round` (0-based in the call) only,
  // the waits being stream memory operations between kernels; `last` is the call's last
  // kernel (the one that writes DevCtl::done); `then_next`: after the round's last phase, the
  // kernel runs phase 0 of the next round too (one kernel fewer a round).
  uint32_t phase = 0;
  uint32_t phase_round = 0;
  uint32_t last = 1;
  uint32_t then_next = 0;
  // Note [Registered inputs] (direct_call.hpp): this rank's input lies in its registered
  // buffer of slot my_slot (-1: it does not, or the call keeps the scratch), at byte my_offset
  // of it; `user`: [kDirectUserSlots * nranks] every rank's registered buffer of each slot as
  // this GPU addresses it.
  const uint8_t* const* user = nullptr;
  int32_t my_slot = -1;
  uint64_t my_offset = 0;
  // Note [Staged protocol] (direct_staged.cpp): the peers' call tags of each half in this
  // rank's staging area, as the GPU addresses it ([h * kStagedTagStride + from]); null
  // otherwise. Phase B checks them (kDevBadTag).
  const uint32_t* stage_tags = nullptr;
};

// What one launch carries, by value (a kernel parameter, under CUDA's 4 KiB).
struct DevLaunch {
  DevCall call;
  DevStep steps[kInlineSteps];
  DevDirect direct;
};
static_assert(sizeof(DevLaunch) <= 4096, "a kernel parameter");

// ---- the protocol ----

// Lanes (dev_kernel.cu: CudaLanes; dev_host.cpp: HostLanes) provide:
//   bool leader();                        the one thread that waits on and writes flags
//   void sync();                          every thread of the block reaches this point
//   template <class T> T share(T v);      the leader's v, to every thread (a sync included)
//   uint32_t load(const uint32_t*);       a flag, read with acquire semantics
//   void store(uint32_t*, uint32_t);      a flag, written with release semantics
//   void store64(uint64_t*, uint64_t);    the same for DevCtl's counters and the direct flags
//   uint64_t load64(const uint64_t*);     a direct flag or DevCtl::err_seq, read with acquire semantics
//   void publish();                       every thread's writes visible to the peers (before
//                                         the leader's store of a flag)
//   void pause(uint32_t spins);           between two polls of a flag
//   void move(const MoveArgs&);           dst0 (, dst1) = a op b, or a; then / divisor; every
//                                         source of an element is read before dst0's element
//                                         is written (dst0 may be a source, element for element)
//   DevStep step(const DevStep*);         a step, read once and shared
//   uint32_t block();                     this block's index (Note [Blocks])
//   uint32_t fetch_add(uint32_t*, uint32_t);  atomic add on this GPU's memory, the old value
//   uint32_t* deltas();                   2 * nranks counts of this block, zero at the start
//                                         (only read when nblocks > 1)
// Note [Folding in one pass]: a fold of k sources (the direct protocol's, Note [Direct
// protocol]) is one move: b, then more[0..nmore), each folded in order into a kept in
// registers, the result stored once: dst = ((a op b) op more[0]) op ... In rank order as
// before, and bit for bit what k - 1 passes through dst gave (each step rounds to the dtype
// either way), but it reads each source once and writes dst once: k + 1 bytes of memory traffic
// a byte instead of 3 (k - 1), 5 against 9 for 4 ranks. At most kMoveMoreSources more sources
// a move; a fold of more ranks folds the rest into dst in further moves.
constexpr uint32_t kMoveMoreSources = 6;
struct MoveArgs {
  void* dst0 = nullptr;
  void* dst1 = nullptr;
  const void* a = nullptr;
  const void* b = nullptr;  // null: copy
  uint64_t count = 0;       // elements (bytes for a plain copy: elem_bytes 1)
  int32_t divisor = 0;      // applied by the last operation (b's, or more[nmore - 1]'s)
  bool copy_bytes = false;  // a dtype-free byte copy
  uint32_t scale = 0;       // Note [Pre-multiplied sum]: bit 0: a * scalar, bit 1: b * scalar
  uint64_t scalar = 0;      // its bits, in the dtype
  uint32_t nmore = 0;       // Note [Folding in one pass]: sources after b (b non-null, scale 0)
  const void* more[kMoveMoreSources] = {};
};

// Leader only: polls until ready() (which loads what it waits on) says yes; false when
// DevCtl::abort is set. After a long wait it tells the watchdog on whom (peer) and where (step).
template <class Lanes, class Ready>
ACCORD_HD bool wait_until(Lanes& L, DevCtl* ctl, Ready ready, int32_t peer, uint32_t step) {
  for (uint32_t spins = 0;; ++spins) {
    if (ready()) return true;
    if (spins == 1024) {  // a long wait: say on whom, for the watchdog's message
      L.store(reinterpret_cast<uint32_t*>(&ctl->waiting_step), step);
      L.store(reinterpret_cast<uint32_t*>(&ctl->waiting_peer), static_cast<uint32_t>(peer));
    }
    if ((spins & 63) == 63 && L.load(&ctl->abort) != 0) return false;
    L.pause(spins);
  }
}

// Leader only: records the first failure of call `c` in its DevCtl (with several blocks, the
// first block to fail claims it through DevCall::grid[1]).
template <class Lanes>
ACCORD_HD void record_failure(Lanes& L, const DevCall& c, int32_t code, int32_t peer, int64_t step, uint64_t want,
                              uint64_t got) {
  if (!L.leader()) return;
  DevCtl* ctl = c.ctl;
  if (L.load64(&ctl->err_seq) != 0) return;  // an earlier call's failure (another thread's store)
  if (c.nblocks > 1 && L.fetch_add(&c.grid[1], 1) != 0) return;  // another block's failure
  ctl->err_code = code;
  ctl->err_peer = peer;
  ctl->err_step = step;
  ctl->err_want = want;
  ctl->err_got = got;
  L.store64(&ctl->err_seq, c.seq);
}

// The start of every kernel: block 0 says it began (DevCtl::started); false when the
// communicator is aborted already (every thread gets the answer).
template <class Lanes>
ACCORD_HD bool begin_call(Lanes& L, const DevCall& c) {
  uint32_t aborted = 0;
  if (L.leader()) {
    if (L.block() == 0) L.store64(&c.ctl->started, c.seq);
    aborted = L.load(&c.ctl->abort);
  }
  return L.share(aborted) == 0;
}

// The end of every kernel: every block publishes its writes, and the last block to end writes
// DevCtl::done (with one block, that block). With fold_deltas, the last block first adds every
// block's FIFO counts (Lanes::deltas, Note [Blocks]) to the counts.
template <class Lanes>
ACCORD_HD void end_call(Lanes& L, const DevCall& c, bool fold_deltas) {
  L.publish();
  L.sync();
  if (!L.leader()) return;
  if (c.nblocks == 1) {
    L.store64(&c.ctl->done, c.seq);
  } else if (L.fetch_add(&c.grid[0], 1) == c.nblocks - 1) {
    c.grid[0] = 0;  // the last block: every other one has ended
    if (fold_deltas) {
      const uint32_t* d = L.deltas();
      for (int32_t p = 0; p < c.nranks; ++p) {
        if (d[2 * p] != 0) *c.peers[p].send.count += d[2 * p];
        if (d[2 * p + 1] != 0) *c.peers[p].recv.count += d[2 * p + 1];
      }
    }
    L.store64(&c.ctl->done, c.seq);  // (a full fence first)
  }
}

// Note [Pre-multiplied sum]: the scalar's bits, read when a kernel starts (every thread reads
// it: written before the kernel, never during); 0 when the call is no pre-multiplied sum.
ACCORD_HD inline uint64_t premul_scalar(const DevCall& c) {
  if (c.premul != 2) return c.scalar;
  const auto* p = static_cast<const uint8_t*>(c.scalar_ptr);
  uint64_t v = 0;
  for (uint32_t i = 0; i < c.elem_bytes && i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

template <class Lanes>
class CallRunner {
 public:
  ACCORD_HD CallRunner(const DevCall& c, const DevStep* steps, Lanes& lanes)
      : c_(c), steps_(steps), L_(lanes) {}

  // Runs every step; returns false after recording a failure in DevCtl.
  ACCORD_HD bool run() {
    bool ok = begin_call(L_, c_);
    if (!ok) fail_leader(kDevAborted, -1, 0, 0);
    scalar_ = premul_scalar(c_);
    for (uint32_t i = 0; ok && i < c_.nsteps; ++i) {
      index_ = i;
      const DevStep s = L_.step(steps_ + i);
      tag_ = s.tag != 0 ? s.tag : c_.tag;
      ok = run_step(s);
    }
    end_call(L_, c_, /*fold_deltas=*/true);
    return ok;
  }

 private:
  ACCORD_HD const uint8_t* src(const DevStep& s) const {
    if (s.src == kBufAddress) return reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(s.src_off));
    return static_cast<const uint8_t*>(s.src == kBufInput ? c_.input : c_.output) + s.src_off;
  }
  ACCORD_HD uint8_t* dst(const DevStep& s) const {
    if (s.dst == kBufAddress) return reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(s.dst_off));
    return static_cast<uint8_t*>(s.dst == kBufOutput ? c_.output : const_cast<void*>(c_.input)) +
           s.dst_off;
  }
  ACCORD_HD int32_t divisor(const DevStep& s) const { return s.postop ? c_.divisor : 0; }
  // Note [Pre-multiplied sum]: whether the step's src is this rank's own contribution, which a
  // pre-multiplied sum scales wherever it is read (every schedule reads each input element
  // as this rank's contribution and never writes the input: in place, what it reads of the
  // buffer as input it has not yet written as output).
  ACCORD_HD bool own(const DevStep& s) const { return c_.premul != 0 && s.src == kBufInput; }

  // Leader only: records the first failure of this call.
  ACCORD_HD void fail_leader(int32_t code, int32_t peer, uint64_t want, uint64_t got) {
    record_failure(L_, c_, code, peer, static_cast<int64_t>(index_), want, got);
  }

  // Leader only: waits until `*word` satisfies ready(); false when aborted.
  template <class Ready>
  ACCORD_HD bool wait(const uint32_t* word, Ready ready, int32_t peer) {
    Lanes& L = L_;
    return wait_until(L, c_.ctl, [&] { return ready(L.load(word)); }, peer, index_);
  }

  // Leader: the number of messages this block has sent to (dir 0) or received from (dir 1)
  // `peer`, and one more (Note [Blocks]).
  ACCORD_HD uint32_t count_of(const DevFifo& f, int32_t peer, int dir) {
    uint32_t m = *f.count;
    if (c_.nblocks > 1) m += L_.deltas()[2 * peer + dir];
    return m;
  }
  ACCORD_HD void count_one(const DevFifo& f, int32_t peer, int dir, uint32_t m) {
    if (c_.nblocks > 1)
      L_.deltas()[2 * peer + dir] += 1;
    else
      *f.count = m + 1;
  }

  // Leader: the next message from `peer`, checked against what the schedule expects. Every
  // thread gets the payload's address, or null after a failure.
  ACCORD_HD const uint8_t* receive(int32_t peer, uint64_t want) {
    const uint8_t* msg = nullptr;
    if (L_.leader()) msg = leader_receive(peer, want);
    return L_.share(msg);
  }
  ACCORD_HD const uint8_t* leader_receive(int32_t peer, uint64_t want) {
    if (peer < 0 || peer >= c_.nranks || c_.peers[peer].recv.data == nullptr) {
      fail_leader(kDevNoChannel, peer, 0, 0);
      return nullptr;
    }
    const DevFifo& f = c_.peers[peer].recv;
    const uint32_t m = count_of(f, peer, 1);
    const uint32_t* hdr = reinterpret_cast<const uint32_t*>(f.headers + (m % f.nslots) * kSlotHeaderBytes);
    if (!wait(hdr, [m](uint32_t seq) { return seq == m + 1; }, peer)) {
      fail_leader(kDevAborted, peer, 0, 0);
      return nullptr;
    }
    const uint32_t size = L_.load(hdr + 1);
    const uint32_t tag = L_.load(hdr + 2);
    if (tag != tag_) {
      fail_leader(kDevBadTag, peer, tag_, tag);
      return nullptr;
    }
    if (size != want) {
      fail_leader(kDevBadSize, peer, want, size);
      return nullptr;
    }
    return f.data + (m % f.nslots) * f.slot_stride;
  }
  // After every thread is done with the message (the caller syncs first).
  ACCORD_HD void release(int32_t peer) {
    if (!L_.leader()) return;
    const DevFifo& f = c_.peers[peer].recv;
    const uint32_t m = count_of(f, peer, 1);
    count_one(f, peer, 1, m);
    if (c_.nblocks > 1) {
      L_.publish();  // this block's reads are done before the others learn it
      uint32_t* arrive = f.arrive + m % f.nslots;
      if (L_.fetch_add(arrive, 1) != c_.nblocks - 1) return;
      *arrive = 0;
      // Head grows one message at a time: the last reader of m - 1 may not have stored it yet.
      if (!wait(f.head, [m](uint32_t head) { return head == m; }, peer)) return;
    }
    L_.store(f.head, m + 1);
  }

  // A free slot toward `peer`, to every thread; null after a failure.
  ACCORD_HD uint8_t* acquire(int32_t peer, uint64_t bytes) {
    uint8_t* slot = nullptr;
    if (L_.leader()) slot = leader_acquire(peer, bytes);
    return L_.share(slot);
  }
  ACCORD_HD uint8_t* leader_acquire(int32_t peer, uint64_t bytes) {
    if (peer < 0 || peer >= c_.nranks || c_.peers[peer].send.data == nullptr) {
      fail_leader(kDevNoChannel, peer, 0, 0);
      return nullptr;
    }
    const DevFifo& f = c_.peers[peer].send;
    if (bytes > f.slot_bytes) {
      fail_leader(kDevBadSize, peer, f.slot_bytes, bytes);
      return nullptr;
    }
    const uint32_t m = count_of(f, peer, 0);
    const uint32_t n = f.nslots;
    if (!wait(f.head, [m, n](uint32_t head) { return m - head < n; }, peer)) {
      fail_leader(kDevAborted, peer, 0, 0);
      return nullptr;
    }
    return f.data + (m % n) * f.slot_stride;
  }
  // After every thread wrote the payload and published it (the caller does both).
  ACCORD_HD void post(int32_t peer, uint64_t bytes) {
    if (!L_.leader()) return;
    const DevFifo& f = c_.peers[peer].send;
    const uint32_t m = count_of(f, peer, 0);
    count_one(f, peer, 0, m);
    if (c_.nblocks > 1) {
      uint32_t* arrive = f.arrive + m % f.nslots;
      if (L_.fetch_add(arrive, 1) != c_.nblocks - 1) return;  // (the caller published first)
      *arrive = 0;
      L_.publish();  // every block's slice before the header
    }
    uint32_t* hdr = reinterpret_cast<uint32_t*>(f.headers + (m % f.nslots) * kSlotHeaderBytes);
    hdr[1] = static_cast<uint32_t>(bytes);
    hdr[2] = tag_;
    L_.store(hdr, m + 1);
  }

  ACCORD_HD void move(void* d0, void* d1, const void* a, const void* b, uint64_t bytes, int32_t div,
                     uint32_t scale = 0) {
    if (c_.nblocks > 1) {  // this block's slice (Note [Blocks])
      uint64_t per = (bytes + c_.nblocks - 1) / c_.nblocks;
      per = (per + 15) & ~uint64_t{15};
      uint64_t lo = per * L_.block();
      if (lo >= bytes) return;
      const uint64_t hi = lo + per < bytes ? lo + per : bytes;
      uint8_t* own_scratch = static_cast<uint8_t*>(c_.scratch) + L_.block() * c_.scratch_stride;
      d0 = d0 == c_.scratch ? own_scratch : static_cast<uint8_t*>(d0) + lo;
      if (d1 != nullptr) d1 = static_cast<uint8_t*>(d1) + lo;
      a = a == c_.scratch ? own_scratch : static_cast<const uint8_t*>(a) + lo;
      if (b != nullptr) b = static_cast<const uint8_t*>(b) + lo;
      bytes = hi - lo;
    }
    MoveArgs k;
    k.dst0 = d0;
    k.dst1 = d1;
    k.a = a;
    k.b = b;
    k.divisor = div;
    k.scale = scale;
    k.scalar = scalar_;
    if (b == nullptr && div <= 1 && scale == 0) {
      k.copy_bytes = true;
      k.count = bytes;
    } else {
      k.count = bytes / c_.elem_bytes;
    }
    L_.move(k);
  }
  // Every thread's part of the data is written: let the peers see it.
  ACCORD_HD void finish_writes() {
    L_.publish();
    L_.sync();
  }

  ACCORD_HD bool run_step(const DevStep& s) {
    switch (s.kind) {
      case kStepSend: {
        uint8_t* slot = acquire(s.send_peer, s.bytes);
        if (slot == nullptr) return false;
        if (!s.copied) move(slot, nullptr, src(s), nullptr, s.bytes, 0, own(s) ? 1 : 0);
        finish_writes();
        post(s.send_peer, s.bytes);
        return true;
      }
      case kStepRecv: {
        const uint8_t* msg = receive(s.recv_peer, s.bytes);
        if (msg == nullptr) return false;
        if (!s.copied) move(dst(s), nullptr, msg, nullptr, s.bytes, 0);
        finish_writes();
        release(s.recv_peer);
        return true;
      }
      case kStepCopy:
        if (dst(s) != src(s) || own(s)) {
          move(dst(s), nullptr, src(s), nullptr, s.bytes, 0, own(s) ? 1 : 0);
          finish_writes();
        }
        return true;
      case kStepRecvReduce: {
        const uint8_t* msg = receive(s.recv_peer, s.bytes);
        if (msg == nullptr) return false;
        const void* a = s.message_right ? static_cast<const void*>(src(s)) : msg;
        const void* b = s.message_right ? static_cast<const void*>(msg) : src(s);
        move(dst(s), nullptr, a, b, s.bytes, divisor(s), own(s) ? (s.message_right ? 1 : 2) : 0);
        finish_writes();
        release(s.recv_peer);
        return true;
      }
      case kStepRecvReduceSend:
      case kStepRecvReduceCopySend:
      case kStepRecvCopySend: {
        const uint8_t* msg = receive(s.recv_peer, s.bytes);
        if (msg == nullptr) return false;
        uint8_t* slot = acquire(s.send_peer, s.bytes);
        if (slot == nullptr) return false;
        const void* b = s.kind == kStepRecvCopySend ? nullptr : static_cast<const void*>(src(s));
        const uint32_t scale = b != nullptr && own(s) ? 2 : 0;
        if (s.kind == kStepRecvReduceSend) {
          move(slot, nullptr, msg, b, s.bytes, divisor(s), scale);
        } else {
          move(dst(s), slot, msg, b, s.bytes, divisor(s), scale);
        }
        finish_writes();
        post(s.send_peer, s.bytes);
        release(s.recv_peer);
        return true;
      }
      case kStepReduceAll:
        return reduce_all(s);
      default:
        fail_leader(kDevNoChannel, -1, s.kind, 0);
        return false;
    }
  }

  // dst = in_0 op in_1 op ... op in_{n-1}, in rank order (the host executor's fold, so the
  // same bits on every rank and on both paths).
  ACCORD_HD bool reduce_all(const DevStep& s) {
    const int32_t n = c_.nranks;
    const int32_t me = c_.rank;
    auto operand = [&](int32_t r) -> const uint8_t* { return r == me ? src(s) : receive(r, s.bytes); };
    auto done_with = [&](int32_t r) {
      if (r != me) release(r);
    };
    // Which operands are this rank's own (Note [Pre-multiplied sum]).
    const uint32_t mine = own(s) ? 1 : 0;
    const uint8_t* x = operand(0);
    if (x == nullptr) return false;
    if (n == 1) {
      if (dst(s) != x || mine) {
        move(dst(s), nullptr, x, nullptr, s.bytes, 0, mine);
        finish_writes();
      }
      return true;
    }
    const uint8_t* y = operand(1);
    if (y == nullptr) return false;
    move(n == 2 ? static_cast<void*>(dst(s)) : c_.scratch, nullptr, x, y, s.bytes,
         n == 2 ? divisor(s) : 0, me == 0 ? mine : me == 1 ? mine << 1 : 0);
    finish_writes();
    done_with(0);
    done_with(1);
    for (int32_t r = 2; r < n; ++r) {
      y = operand(r);
      if (y == nullptr) return false;
      const bool last = r == n - 1;
      move(last ? static_cast<void*>(dst(s)) : c_.scratch, nullptr, c_.scratch, y, s.bytes,
           last ? divisor(s) : 0, r == me ? mine << 1 : 0);
      finish_writes();
      done_with(r);
    }
    return true;
  }

  const DevCall& c_;
  const DevStep* steps_;
  Lanes& L_;
  uint32_t index_ = 0;
  uint32_t tag_ = 0;  // the current step's (DevStep::tag)
  uint64_t scalar_ = 0;  // Note [Pre-multiplied sum]: the scalar's bits
};

}  // namespace accord::dev
