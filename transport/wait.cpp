// Futex calls and the checks made between sleeps (see wait.hpp, Note [Waiting]).
#include "transport/wait.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace accord {

int job_cpus(const std::vector<std::string>& masks) {
  std::vector<uint64_t> all;
  for (const std::string& m : masks) {
    size_t word = 0;
    for (const char* p = m.c_str(); *p != '\0'; ++word) {
      char* end = nullptr;
      const uint64_t bits = std::strtoull(p, &end, 16);
      if (end == p) break;
      if (all.size() <= word) all.resize(word + 1, 0);
      all[word] |= bits;
      p = *end == ',' ? end + 1 : end;
    }
  }
  int n = 0;
  for (uint64_t w : all) n += __builtin_popcountll(w);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (n == 0) n = online > 0 ? static_cast<int>(online) : 1;
  return n;
}

std::string cpu_mask() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return "";
  std::string out;
  for (int base = 0; base < CPU_SETSIZE; base += 64) {
    uint64_t w = 0;
    for (int b = 0; b < 64; ++b)
      if (CPU_ISSET(base + b, &set)) w |= uint64_t{1} << b;
    char buf[24];
    std::snprintf(buf, sizeof buf, "%s%llx", base == 0 ? "" : ",", static_cast<unsigned long long>(w));
    out += buf;
  }
  // Drop the empty high words.
  while (out.size() > 2 && out.compare(out.size() - 2, 2, ",0") == 0) out.resize(out.size() - 2);
  return out;
}

WaitPolicy make_wait_policy(int64_t spin_us_setting, bool oversubscribed, int64_t long_yield_us, bool cpu_move) {
  WaitPolicy p;
  p.long_yield_ns = long_yield_us > 0 ? long_yield_us * 1000 : 0;
  p.closed_spin_ns = oversubscribed && p.long_yield_ns > 0 ? kClosedSpinNs : 0;
  p.move_off_cpu = oversubscribed && p.long_yield_ns > 0 && cpu_move ? move_off_this_cpu : nullptr;
  if (spin_us_setting >= 0) {
    p.spin_ns = spin_us_setting * 1000;
    p.yields = oversubscribed ? 32 : 0;
  } else if (oversubscribed) {
    // Another rank needs this core to make the progress we are waiting for: hand the core
    // over at once, and keep handing it over for a while (32 yields) before sleeping. On the
    // 2-core VM, 4 ranks, 8 B: spinning 2 us first ran at 0.5-0.9x Open MPI's speed, yielding
    // at once at 1.1-1.4x; 4 yields before the futex lost again (0.9x), 8-128 were alike
    // (bench/NOTES-2026-11.md, "4 ranks on 2 cores").
    p.spin_ns = 0;
    p.yields = 32;
  } else {
    // Note [Spin while CPUs are free]. 200 us, then up to 10 ms while at most one task of the
    // machine waits for a CPU.
    p.spin_ns = 200000;
    p.idle_spin_ns = 10000000;
    p.cpus_free = room_to_spin;
    p.yields = 0;
  }
  return p;
}

// Note [Spin while CPUs are free]
// A rank whose local ranks each had a core spun 200 us and then slept on a futex. On the
// project VM (Firecracker, kernel command line nested_pvm=1) that let single runs collapse
// between 256 KiB and 4 MiB while the host was noisy: 256 KiB took 0.4-0.6 ms instead of
// 0.05, about one futex sleep per call, while Open MPI, which never sleeps, took 0.1-0.2. In
// 12 such interleaved runs the ranks lost to Open MPI at 15 of 36 sizes with the 200 us spin
// and at 5 with a 100 ms one (bench/NOTES-2026-11.md, "Spinning while CPUs are free"). Spinning on
// is free when every runnable task has a CPU, and costly when one does not: the spinner holds
// a core until the scheduler's tick (4 ms here) while a test running beside it, or the
// trainer's compute threads, wait for it. So past the first 200 us a waiter spins on only
// while /proc/loadavg's runnable count (which includes itself) is at most the number of CPUs
// online (plus one, below), looking every 100 us, and sleeps at 10 ms in any case: a peer that
// far behind is computing, not passing data. The count is the whole machine's: on a big machine busy with
// other work the waiter sleeps as before, and a job confined to a few CPUs of an idle big
// machine may spin on while another job waits for those CPUs, for 10 ms at most per wait.
//
// One task more than the CPUs is allowed (kSpinBesideTasks). Beside one busy process on 2
// cores (3 runnable with both ranks waiting), sleeping after 200 us left Accord at 1.01-1.13x
// Open MPI at 1 MiB, and lost single runs (0.81x), where spinning 10 ms gave 1.42-1.50x; with
// this rule ten busy runs gave 1.11-1.55x at 1 MiB and lost at no size (bench/NOTES-2026-11.md,
// "Spinning beside one task"; Open MPI never sleeps). Why sleeping costs that much there was
// not measured. Two or more extra tasks (tests beside one another, a compile, a trainer's
// compute threads next to 2 ranks) still make the waiter sleep.
long loadavg_runnable(const char* text) {
  const char* p = text;
  for (int field = 0; field < 3; ++field) {
    p = std::strchr(p, ' ');
    if (p == nullptr) return -1;
    ++p;
  }
  char* end = nullptr;
  const long n = std::strtol(p, &end, 10);
  return end != p && *end == '/' ? n : -1;
}

bool room_to_spin() {
  static const int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  static const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (fd < 0 || cpus < 1) return false;
  char buf[128];
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return false;
  buf[n] = '\0';
  const long runnable = loadavg_runnable(buf);
  return runnable >= 1 && runnable <= cpus + kSpinBesideTasks;
}

// Note [Yields that hand the CPU away]
// Oversubscribed ranks (more local ranks than CPUs) yield while they wait, so that the rank
// they wait for gets the core (make_wait_policy). That is right while the other tasks on the
// core are ranks: each runs a few microseconds and waits or yields in turn. Beside a task that
// never waits (busy processes beside 4 ranks on the 2-core VM), a yield can hand the core to
// that task, and Linux's scheduler (EEVDF, kernel 6.18 here) lets it run until the next tick:
// 3.9 ms per such yield at HZ=250. Beside two busy processes, with two ranks on each CPU, a
// third of all yields were that long and a 64 B all-reduce took 1.0-1.2 ms instead of 6 us in
// each of 8 runs of 5000 calls (each rank's yields counted by length); beside one, single runs
// took 250-500 us a call at some sizes. A waiter that sleeps on its futex instead is woken by
// the rank that posts, and the wake preempts the busy task.
// So a yield longer than long_yield_ns (500 us) that comes within kYieldGateWindow (64) yields
// of the last one closes the thread's yield gate: its waits skip their yields and sleep at
// once for 10 ms; each closing doubles that (up to 1 s), and 256 waits whose yields were all
// short bring it back to 10 ms. A lone long yield (an interrupt, a moment of another task)
// does not close it. Where yielding works (every rank on one CPU, the busy process on the
// other: 6 us per call), a rank saw 1-10 yields over 500 us in about 30000, 67-99 % under 10 us
// and nearly all the others under 100 us; pairs of long yields there still closed a rank's
// gate 0-6 times in a run of 20000 calls. The thresholds were chosen from those counts, not
// swept. bench/NOTES-2026-11.md, "4 ranks beside a busy process", has the measurements.
//
// Note [A short spin behind a closed gate]
// A rank whose gate has closed sleeps at once, and each sleep costs a futex wake: 10-25 us an
// 8 B all-reduce, where Open MPI's ranks, when every one of them sits on the CPU without the
// busy process, took 7-14 us (they yield and never sleep). Data often comes from a rank on the
// other CPU a few microseconds later. So behind a closed gate a wait first spins 10 us
// (kClosedSpinNs), while such spins find data at least 4 times in 5: a spin that ends
// unready took 10 us from a rank that may share the core. Each thread keeps a credit: +1 for
// a spin that found data (up to 16), -4 for one that did not (down to 0); without credit, only
// every 64th closed wait spins (a probe). Counted with a probe every 16th: beside one busy
// process, 96-99 % of spins found data at 8 B-4 KiB and 2 % at 256 KiB (which then sleeps at
// once, as before); beside two (every CPU has a busy process, ranks get a third of one),
// 57-70 % and 19 %.
// Measured on the 2-core VM, 4 ranks, 16 jobs of each, 8 B-256 KiB, Accord alone, against the
// same build without the spin. Beside one busy process, the 90th percentile of the jobs went
// from 15.1 to 10.7 us at 8 B, 23.3 to 9.5 at 64 B, 37.2 to 24.5 at 32 KiB and 136 to 124 at
// 256 KiB. Beside two, in two batches, 8 B went from 58 and 57 us to 54 and 48 in median and
// 256 KiB from 223 and 239 to 242 and 244 (a cost of 2-8 % left in). Quiet, no size moved
// beyond the noise. Two rules tried first cost more beside two busy processes: stopping
// after two misses in a row with a probe every 16th wait (256 KiB 269-277 us against 246-248),
// and this credit with a probe every 16th (512 B 56 against 40, 4 KiB 63 against 43).
// bench/NOTES-2026-11.md, "A short spin behind a closed gate".
void yield_cpu() { sched_yield(); }

// Note [Moving off a CPU a yield found taken]
// A yield that comes back after 2 ms or more (kMoveOffYieldNs) handed the CPU to a task that
// does not wait (Note [Yields that hand the CPU away]). On the 2-core VM, 4 ranks beside one
// busy process, the kernel now and then puts the busy process beside one or two ranks while
// the others have the other CPU to themselves (bench/cpu_trace.py samples, bench/NOTES-2026-11.md,
// "Moving off a CPU a yield found taken"). Such a rank's yields give the busy task the rest of
// its slice, up to the next tick (2-8 ms there), its gate closes and its waits sleep; a sleep
// costs a futex wake, and each wake lets the kernel place the rank again. Open MPI's ranks
// never sleep, and whenever all four sat on the other CPU they ran an 8 B all-reduce in
// 7.2 us, which is how Open MPI won single rounds at small sizes. So after a yield of 2 ms or
// more the thread moves itself off the CPU it is on, at once: it takes that CPU out of its own
// affinity mask, which makes the kernel migrate it before the call returns, and puts the mask
// back in the next call, which moves nothing. Its mask is the same afterwards; only where it
// runs changed, as the load balancer itself might have done. The gate works as before: beside
// two busy processes (one on each CPU) moving does not help, long yields go on and it closes.
// 2 ms and not the gate's 500 us: without a busy process a rank still sees a few yields over
// 500 us a run (2-6 in a 1.5 s job, all but one under 2 ms: the other rank on its CPU in a long
// step, or a daemon, not traced), and moving on each of those made 4 quiet ranks 10-33 %
// slower in median at 64 B-256 KiB (20 jobs each; that a move leaves 3 ranks on one CPU and 1
// on the other is a guess); beside the busy process most long yields are 2-8 ms. Moving only
// when the gate closes gained nothing beside the busy process.
// Per thread: ranks as threads move one by one, and other threads of the process keep their
// masks (a thread inherits its creator's). A mask of one CPU (a rank bound to a core) never
// moves. ACCORD_CPU_MOVE=0 (or ACCORD_LONG_YIELD_US=0) turns it off.
// Measured on the 2-core VM, 4 ranks, Accord alone, against ACCORD_CPU_MOVE=0 in the same
// build, alternating: beside one busy process the 90th percentile of 32 times went from 9.2 to
// 7.1 us at 8 B, 14.8 to 9.6 at 4 KiB and 174 to 99 at 256 KiB; quiet and beside two busy
// processes, no size moved beyond the noise (bench/NOTES-2026-11.md, "Moving off a CPU a yield found
// taken").
int move_off_cpu(int cpu) {
  cpu_set_t mask;
  if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof mask, &mask) != 0) return -1;
  if (!CPU_ISSET(cpu, &mask) || CPU_COUNT(&mask) < 2) return -1;
  cpu_set_t narrow = mask;
  CPU_CLR(cpu, &narrow);
  if (sched_setaffinity(0, sizeof narrow, &narrow) != 0) return -1;
  const int moved_to = sched_getcpu();
  // Putting back a mask the kernel held a moment ago; should a cpuset change in between refuse
  // it, the thread keeps the narrower mask, which is still inside its own.
  sched_setaffinity(0, sizeof mask, &mask);
  return moved_to;
}

int move_off_this_cpu() { return move_off_cpu(sched_getcpu()); }

YieldGate& yield_gate() {
  static thread_local YieldGate gate;
  return gate;
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms) {
  timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

Status check_wait(const WaitContext& ctx, const char* waiting_for) {
  if (ctx.abort_flag != nullptr && ctx.abort_flag->load(std::memory_order_acquire))
    return error(ACCORD_ERR_ABORTED, "rank %d: %s (seq %llu) was aborted while waiting for %s of rank %d",
                 ctx.self_rank, ctx.operation, static_cast<unsigned long long>(ctx.seq), waiting_for,
                 ctx.peer_rank);
  // The peer we wait for first, then every other rank we can watch: a death anywhere stops
  // the collective, and naming the peer we wait for is the most useful when several died.
  // Note [Departures]: a rank that exited after destroying its communicator cleanly is dead
  // only if it left before this call (or is the point-to-point peer awaited).
  auto exited = [](int fd) {
    if (fd < 0) return false;
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
  };
  int dead_rank = -1, left_rank = -1;
  uint64_t left_after = 0;
  // A rank that has published its departure has left even while it still lives: its destroy
  // may wait for this very rank to let go of its GPU memory (Note [Freeing memory peers map],
  // collectives/device/engine.cpp).
  auto look = [&](int r, int fd) {
    const Departure* d = ctx.departures != nullptr ? ctx.departures[r] : nullptr;
    if (d == nullptr || d->left.load(std::memory_order_acquire) == 0) {
      if (exited(fd)) dead_rank = r;
      return;
    }
    const uint64_t after = ctx.seq_clock == SeqClock::kDevice ? d->device_seq.load(std::memory_order_relaxed)
                                                                : d->host_seq.load(std::memory_order_relaxed);
    const bool excused = ctx.seq_clock == SeqClock::kNone ? r != ctx.peer_rank : after >= ctx.seq;
    if (!excused && left_rank < 0) left_rank = r, left_after = after;
  };
  if (ctx.peer_rank >= 0) look(ctx.peer_rank, ctx.peer_pidfd);
  for (int r = 0; dead_rank < 0 && ctx.pidfds != nullptr && r < ctx.nranks; ++r) look(r, ctx.pidfds[r]);
  if (dead_rank >= 0) {
    const std::atomic<int32_t>* note = ctx.death_notes ? ctx.death_notes[dead_rank] : nullptr;
    const int first = note != nullptr ? note->load(std::memory_order_acquire) : -1;
    if (first >= 0 && first != dead_rank && first != ctx.self_rank)
      return error(ACCORD_ERR_REMOTE, "rank %d: peer rank %d died during %s (seq %llu); rank %d saw it first and "
                   "exited; look at rank %d's output for why it exited",
                   ctx.self_rank, first, ctx.operation, static_cast<unsigned long long>(ctx.seq), dead_rank, first);
    return error(ACCORD_ERR_REMOTE, "rank %d: peer rank %d died during %s (seq %llu) while this rank waited for %s "
                 "of rank %d; look at rank %d's output for why it exited",
                 ctx.self_rank, dead_rank, ctx.operation, static_cast<unsigned long long>(ctx.seq), waiting_for,
                 ctx.peer_rank, dead_rank);
  }
  if (left_rank >= 0) {
    if (ctx.seq_clock == SeqClock::kNone)
      return error(ACCORD_ERR_REMOTE, "rank %d: peer rank %d left the communicator (destroyed it) while this rank "
                   "waited for %s in %s (seq %llu); every rank must make the same calls before destroying it",
                   ctx.self_rank, left_rank, waiting_for, ctx.operation, static_cast<unsigned long long>(ctx.seq));
    return error(ACCORD_ERR_REMOTE, "rank %d: peer rank %d left the communicator (destroyed it after %s seq %llu) "
                 "while this rank waited in %s seq %llu; every rank must make the same calls before destroying it",
                 ctx.self_rank, left_rank, ctx.seq_clock == SeqClock::kDevice ? "device" : "host",
                 static_cast<unsigned long long>(left_after), ctx.operation,
                 static_cast<unsigned long long>(ctx.seq));
  }
  if (ctx.deadline.expired())
    return error(ACCORD_ERR_TIMEOUT, "rank %d: %s (seq %llu) timed out after %lld ms waiting for %s of rank %d; "
                 "is rank %d stopped, stuck, or calling a different collective? (ACCORD_TIMEOUT_MS)",
                 ctx.self_rank, ctx.operation, static_cast<unsigned long long>(ctx.seq),
                 static_cast<long long>(ctx.deadline.budget_ms()), waiting_for, ctx.peer_rank, ctx.peer_rank);
  return Status::success();
}

}  // namespace accord
