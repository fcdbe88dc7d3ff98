// Waiting for a flag in shared memory without burning the machine and without hanging.
//
// Policy (Note [Waiting]): spin with a pause instruction for spin_ns (none when oversubscribed),
// then on while at most one runnable task of the machine lacks a CPU, up to idle_spin_ns in
// all (Note [Spin while CPUs are free]), then yield the CPU a few times (when oversubscribed,
// and only while yields come back quickly: Note [Yields that hand the CPU away]; a thread
// whose yield came back late moves off that CPU: Note [Moving off a CPU a yield found
// taken]), then sleep
// on a futex in slices of at most 20 ms. Between slices the waiter checks its deadline, the
// communicator's abort flag and whether the peer process is still alive (a pidfd becomes
// readable when the process dies), so a dead peer is noticed within one slice and a stopped
// one turns into ACCORD_ERR_TIMEOUT at the deadline.
//
// The sleeping side sets `sleeping` before its final check and the waking side reads it after
// publishing, each with a full fence in between, so a wake is never lost and the fast path
// (peer awake) costs the waker one fence, one cached load and no system call.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/clock.hpp"
#include "core/status.hpp"

namespace accord {

void yield_cpu();  // sched_yield(), for WaitPolicy::yield
// Note [Yields that hand the CPU away]: ACCORD_LONG_YIELD_US's default (core/settings.hpp
// holds the same number: core cannot see transport).
constexpr int64_t kLongYieldUs = 500;
// Note [Moving off a CPU a yield found taken]: a yield at least this long moves the thread.
constexpr int64_t kMoveOffYieldNs = 2000000;  // 2 ms

struct WaitPolicy {
  int64_t spin_ns = 100000;  // before yielding
  // Then on, up to this long from the start of the wait, while cpus_free() (0: no).
  int64_t idle_spin_ns = 0;
  int yields = 0;            // sched_yield() calls before sleeping
  bool (*cpus_free)() = nullptr;  // room_to_spin; tests give their own
  // Note [Yields that hand the CPU away]: two yields longer than this close together close
  // this thread's yield gate (0: never; ACCORD_LONG_YIELD_US).
  int64_t long_yield_ns = kLongYieldUs * 1000;
  // While the gate is closed, spin this long before sleeping (0: sleep at once), as long as
  // such spins are found ready (Note [A short spin behind a closed gate]).
  int64_t closed_spin_ns = 0;
  void (*yield)() = yield_cpu;  // tests give their own
  // Called after each long yield (over long_yield_ns) that took move_off_yield_ns or more
  // (nullptr: none): move_off_this_cpu (Note [Moving off a CPU a yield found taken]); tests
  // give their own.
  int (*move_off_cpu)() = nullptr;
  int64_t move_off_yield_ns = kMoveOffYieldNs;
};

// Note [Yields that hand the CPU away]: per thread (a rank's, or one of the ranks as threads).
// While closed, waits skip their yields and sleep at once. A long yield that comes within
// kYieldGateWindow yields of the one before closes it for `backoff_ns`, which doubles with
// each closing (up to kYieldGateMaxNs) and falls back to kYieldGateMinNs after
// kYieldGateShortWaits waits whose yields were all short.
constexpr int64_t kYieldGateMinNs = 10000000;    // 10 ms
constexpr int64_t kYieldGateMaxNs = 1000000000;  // 1 s
constexpr int kYieldGateShortWaits = 256;
constexpr int kYieldGateWindow = 64;
// Note [A short spin behind a closed gate]: the spin oversubscribed ranks make while their
// gate is closed, as long as such spins find data at least 4 times in 5: a spin that finds
// data adds 1 to the thread's credit (up to kClosedSpinCreditMax), one that ends unready
// takes kClosedSpinMissCost (down to 0). With no credit left, only every kClosedSpinProbe-th
// closed wait spins.
constexpr int64_t kClosedSpinNs = 10000;  // 10 us
constexpr int kClosedSpinMissCost = 4;
constexpr int kClosedSpinCreditMax = 16;
constexpr int kClosedSpinProbe = 64;
struct YieldGate {
  int64_t closed_until_ns = 0;
  int64_t backoff_ns = 0;  // 0: kYieldGateMinNs
  int short_waits = 0;
  int yields_since_long = kYieldGateWindow;  // counts up to kYieldGateWindow
  int spin_credit = kClosedSpinMissCost;  // a new thread spins until it misses
  int spins_skipped = 0;                  // closed waits since the last spin, without credit
  long closings = 0;  // for tests
  long moves = 0;     // policy.move_off_cpu calls that moved the thread, for tests
};
YieldGate& yield_gate();
// Yields up to policy.yields times while !ready(), through this thread's gate (while it is
// closed: spins up to policy.closed_spin_ns instead). True if ready() said so; false after the
// last yield, a long one, or the spin: the caller looks again before it sleeps.
template <typename Ready>
bool yield_while(Ready& ready, const WaitPolicy& policy);

// Note [Moving off a CPU a yield found taken]: moves the calling thread off `cpu` to another
// CPU of its affinity mask, at once, by taking `cpu` out of the mask and putting the mask back
// right after. Returns the CPU the thread ran on meanwhile (never `cpu`), or -1 if it did not
// move: `cpu` is not in the mask, the mask has no other CPU, or the kernel refused (a cpuset
// without the others). The mask is the same afterwards, unless a cpuset changed in the moment
// between and the kernel refused the old mask back (the thread then keeps the narrower one).
int move_off_cpu(int cpu);
// move_off_cpu(the CPU this thread runs on): WaitPolicy::move_off_cpu for oversubscribed ranks.
int move_off_this_cpu();

// Note [Spin while CPUs are free]: whether the machine runs at most one task more than it
// has CPUs online (the runnable count of /proc/loadavg, which counts this spinning thread),
// so that spinning on takes little from anybody. About 1.3 us per call on the project VM.
// False when /proc cannot be read.
constexpr long kSpinBesideTasks = 1;
bool room_to_spin();
// The runnable count of a /proc/loadavg line ("0.99 1.61 2.21 2/80 22733": 2), -1 if none.
long loadavg_runnable(const char* text);

// Picks the policy from ACCORD_SPIN_US, whether the local ranks outnumber the CPUs they may
// run on (job_cpus), ACCORD_LONG_YIELD_US (0: the yield gate never closes, and no thread moves
// off a CPU) and ACCORD_CPU_MOVE (false: no thread moves off a CPU).
WaitPolicy make_wait_policy(int64_t spin_us_setting, bool oversubscribed, int64_t long_yield_us = kLongYieldUs,
                            bool cpu_move = true);

// Note [Oversubscribed]: this thread's CPU affinity as comma-separated 64-bit hex words, CPU
// 0 first. Ranks exchange it at init; the CPUs of a host's ranks are the union of their masks.
// One rank's own mask says nothing: mpirun -np 2 binds each rank to one core (mask of 1 CPU)
// on 2 cores, which is not oversubscribed, while 4 ranks bound 2 to a core are.
std::string cpu_mask();
// The number of CPUs in the union of `masks` (all CPUs online if none could be read).
int job_cpus(const std::vector<std::string>& masks);

// Note [Departures]
// A rank that exits is seen at once on its pidfd, and a pidfd cannot tell a rank killed in
// the middle of a collective from one that finished its last call, destroyed its
// communicator and returned from main. Peers still in that last call (a slower rank's kernel
// or host loop, or a watchdog that checks every rank's pidfd, not only the peer it waits
// for) then took a clean exit for a death and failed a call whose data had all arrived:
// "peer rank 4 died during barrier" at the end of a job, once in four runs of
// gpu_procs_dgx1_identity.
// So a rank that destroys its communicator cleanly (no error kept, its device kernels done)
// publishes, before it closes anything, the last host and device call it completed, in its
// shared-memory header page where its local peers read it (a Departure; `left` stored last,
// with release; read first, with acquire). A rank that completed call S has delivered all it
// owed in S (data goes into the receiver's memory, which outlives the sender), so a waiter
// in call seq <= S does not count that rank's exit as a death, and waits on for the ranks it
// still needs. A rank that left before the waiter's call (S < seq) will never take part:
// that is reported at once, as "left the communicator", not as a death. Point-to-point
// calls are numbered per rank, not in step (WaitContext::seq_clock kNone): there, a departed
// rank is an error only when it is the peer awaited. A published departure counts even while
// the rank still lives: its destroy may wait for this rank to let go of its GPU memory (Note
// [Freeing memory peers map], collectives/device/engine.cpp) and publishes first, so that a peer
// stuck in a call it never makes fails at once. A rank killed, or exiting with an
// error, publishes nothing and is reported dead as before. wait_for looks at the data once
// more before it returns such an error: data posted just before an exit counts.
// Without shared memory (ACCORD_SHM_DISABLE) there is no record, and an exit reads as a death.
struct Departure {
  std::atomic<uint32_t> left{0};       // 1 once the record below is complete
  std::atomic<uint64_t> host_seq{0};   // Communicator::seq_ at departure
  std::atomic<uint64_t> device_seq{0};  // device calls completed (DevCtl::done) at departure
};

// Which numbering WaitContext::seq follows, to compare it with a Departure.
enum class SeqClock : uint8_t { kHost, kDevice, kNone };

// What a wait needs to fail well.
struct WaitContext {
  Deadline deadline;
  const std::atomic<bool>* abort_flag = nullptr;
  int self_rank = -1;
  int peer_rank = -1;
  int peer_pidfd = -1;          // -1: no liveness check
  const int* pidfds = nullptr;  // liveness of every rank (-1 entries skipped), to notice any
  int nranks = 0;               // local death while waiting on someone else
  // Note [Death notes]: per rank, the rank it blamed when it gave up (-1: none), read when
  // that rank is found dead, so survivors name the first death and not a survivor that
  // exited after seeing it. nullptr entries: no note.
  const std::atomic<int32_t>* const* death_notes = nullptr;
  // Note [Departures]: per rank, its departure record (nullptr entries: none).
  const Departure* const* departures = nullptr;
  const char* operation = "";   // "all_reduce", for messages
  uint64_t seq = 0;             // collective sequence number, for messages
  SeqClock seq_clock = SeqClock::kHost;
};

// A full (StoreLoad) fence. Note [Fence without mfence]: on x86, a locked read-modify-write of
// the stack orders like mfence (both drain the store buffer before later loads) but costs
// 2.3 ns where mfence costs 19.7 ns on the AMD EPYC VM (the Linux kernel's smp_mb() does the
// same). Every post and release of a message fences once, so this is a tenth of an 8-byte
// all-reduce. ThreadSanitizer builds keep the C++ fence it knows.
inline void full_fence() {
#if (defined(__x86_64__) || defined(__i386__)) && !defined(__SANITIZE_THREAD__)
  asm volatile("lock; orl $0, (%%rsp)" ::: "memory", "cc");
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms);
void futex_wake_all(std::atomic<uint32_t>* word);

// Checks abort, peer death and the deadline. Returns success if the wait may go on.
Status check_wait(const WaitContext& ctx, const char* waiting_for);

// check_wait, but a peer found gone while the data has come after all is no failure: it
// posted and then exited (Note [Departures]).
template <typename Ready>
Status check_wait_or_ready(Ready& ready, const WaitContext& ctx, const char* waiting_for) {
  Status s = check_wait(ctx, waiting_for);
  if (s.code() == ACCORD_ERR_REMOTE && ready()) return Status::success();
  return s;
}

// Waits until word != value_when_not_ready, i.e. until the peer changes it.
// `sleeping` is the flag the peer reads after it changes `word`.
template <typename Ready>
Status wait_for(Ready ready, std::atomic<uint32_t>* word, std::atomic<uint32_t>* sleeping,
                const WaitPolicy& policy, const WaitContext& ctx, const char* waiting_for) {
  if (ready()) return Status::success();
  // The clock every 16 pauses (a pause takes 25-140 ns, by CPU): a short spin budget, as when
  // oversubscribed (2 us), must not become 256 pauses (6-36 us) of a core another rank needs.
  // The spin starts counting at the first reading, 16 pauses in: a reading costs 27 ns on the
  // AMD EPYC VM, and most small-message waits end before it.
  int64_t start = -1, next_load_check = 0;
  for (uint32_t i = 1;; ++i) {
    if (ready()) return Status::success();
    cpu_relax();
    if ((i & 15) == 0) {
      int64_t t = now_ns();
      if (start < 0) start = t;
      if (t - start >= policy.spin_ns) {
        // Note [Spin while CPUs are free]: past the short spin, go on only while nobody waits
        // for a CPU, looking again every 100 us.
        if (t - start >= policy.idle_spin_ns) break;
        if (t >= next_load_check) {
          if (policy.cpus_free == nullptr || !policy.cpus_free()) break;
          next_load_check = t + 100000;
        }
      }
      if (ctx.deadline.expired_at(t) || (ctx.abort_flag && ctx.abort_flag->load(std::memory_order_relaxed)))
        ACCORD_TRY(check_wait_or_ready(ready, ctx, waiting_for));
    }
  }
  if (yield_while(ready, policy)) return Status::success();
  for (;;) {
    uint32_t v = word->load(std::memory_order_acquire);
    sleeping->store(1, std::memory_order_relaxed);
    full_fence();
    if (ready()) {
      sleeping->store(0, std::memory_order_relaxed);
      return Status::success();
    }
    futex_wait(word, v, 20);
    sleeping->store(0, std::memory_order_relaxed);
    if (ready()) return Status::success();
    ACCORD_TRY(check_wait_or_ready(ready, ctx, waiting_for));
  }
}

// Note [A short spin behind a closed gate]: what a wait does instead of yielding while the
// gate is closed. True if ready() said so within the spin.
template <typename Ready>
bool spin_behind_closed_gate(Ready& ready, const WaitPolicy& policy, YieldGate& gate, int64_t now) {
  if (policy.closed_spin_ns <= 0) return false;
  if (gate.spin_credit <= 0 && ++gate.spins_skipped < kClosedSpinProbe) return false;
  gate.spins_skipped = 0;
  const int64_t end = now + policy.closed_spin_ns;
  for (uint32_t i = 1;; ++i) {
    if (ready()) {
      gate.spin_credit = std::min(gate.spin_credit + 1, kClosedSpinCreditMax);
      return true;
    }
    cpu_relax();
    if ((i & 15) == 0 && now_ns() >= end) break;
  }
  gate.spin_credit = std::max(gate.spin_credit - kClosedSpinMissCost, 0);
  return false;
}

template <typename Ready>
bool yield_while(Ready& ready, const WaitPolicy& policy) {
  if (policy.yields <= 0) return false;
  YieldGate& gate = yield_gate();
  int64_t t = now_ns();
  if (t < gate.closed_until_ns) return spin_behind_closed_gate(ready, policy, gate, t);
  bool done = false;
  for (int y = 0; y < policy.yields && !(done = ready()); ++y) {
    policy.yield();
    int64_t after = now_ns();
    if (policy.long_yield_ns > 0 && after - t > policy.long_yield_ns) {
      // Note [Moving off a CPU a yield found taken]
      if (policy.move_off_cpu != nullptr && after - t >= policy.move_off_yield_ns && policy.move_off_cpu() >= 0) {
        ++gate.moves;
        after = now_ns();
      }
      const bool again = gate.yields_since_long < kYieldGateWindow;
      gate.yields_since_long = 0;
      if (!again) {  // a lone one (an interrupt, a moment of another task): yield on
        t = after;
        continue;
      }
      gate.backoff_ns = gate.backoff_ns == 0 ? kYieldGateMinNs : std::min(2 * gate.backoff_ns, kYieldGateMaxNs);
      gate.closed_until_ns = after + gate.backoff_ns;
      gate.short_waits = 0;
      ++gate.closings;
      return false;
    }
    if (gate.yields_since_long < kYieldGateWindow) ++gate.yields_since_long;
    t = after;
  }
  if (gate.backoff_ns != 0 && ++gate.short_waits >= kYieldGateShortWaits) {
    gate.backoff_ns = 0;
    gate.short_waits = 0;
  }
  return done;
}

// Called by the side that changed `word`. `sleeping` may be a table of `nflags` flags, one per
// waiter (the board's readers): one fence, then loads of cached lines while nobody sleeps.
inline void wake_if_sleeping(std::atomic<uint32_t>* word, std::atomic<uint32_t>* sleeping, int nflags = 1) {
  full_fence();
  for (int i = 0; i < nflags; ++i)
    if (sleeping[i].load(std::memory_order_relaxed) != 0) {
      futex_wake_all(word);
      return;
    }
}

}  // namespace accord
