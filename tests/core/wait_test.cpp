// The waiting policy (transport/wait.hpp, Note [Waiting]) on its own: when a waiter spins on
// past its short spin and when it sleeps (Note [Spin while CPUs are free]). The machine's load
// is faked (WaitPolicy::cpus_free), so what is checked does not depend on what runs beside.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "transport/wait.hpp"

namespace accord {
namespace {

struct Waited {
  bool slept = false;  // the waiter raised its sleeping flag at some point
  double ms = 0;       // how long the wait took
};

// One thread waits for a flag another thread sets (then wakes it as a transport does) after
// `delay_ms`, or, with `until_asleep`, once the waiter sleeps (at most 20 s: a waiter that
// never sleeps then shows as one that did not). Returns how the wait went.
Waited wait_for_flag(const WaitPolicy& policy, int delay_ms, bool until_asleep = false) {
  std::atomic<uint32_t> word{0}, sleeping{0};
  std::atomic<bool> set{false};
  Waited w;
  std::thread setter([&] {
    if (until_asleep) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (sleeping.load() == 0 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    }
    set.store(true, std::memory_order_release);
    word.fetch_add(1, std::memory_order_release);
    wake_if_sleeping(&word, &sleeping);
  });
  auto ready = [&] {
    // The sleeping path raises the flag, then checks ready() once more before the futex.
    if (sleeping.load(std::memory_order_relaxed) != 0) w.slept = true;
    return set.load(std::memory_order_acquire);
  };
  WaitContext ctx;
  ctx.deadline = Deadline::after_ms(60000);
  ctx.self_rank = 0;
  ctx.peer_rank = 1;
  ctx.operation = "test";
  const auto start = std::chrono::steady_clock::now();
  Status s = wait_for(ready, &word, &sleeping, policy, ctx, "the flag");
  w.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  setter.join();
  EXPECT_TRUE(s.ok()) << s.message();
  return w;
}

std::atomic<int> g_load_checks{0};
bool free_cpus() {
  g_load_checks.fetch_add(1);
  return true;
}
bool no_free_cpus() {
  g_load_checks.fetch_add(1);
  return false;
}

TEST(Wait, SpinsOnPastTheShortSpinWhileEveryTaskHasACpu) {
  WaitPolicy p;
  p.spin_ns = 1000000;           // 1 ms
  p.idle_spin_ns = 60000000000;  // longer than the test could take
  p.cpus_free = free_cpus;
  g_load_checks = 0;
  const Waited w = wait_for_flag(p, 30);
  EXPECT_FALSE(w.slept) << "the waiter slept although no task waited for a CPU";
  // The load is looked at past the short spin, then every 100 us at most (none if the flag
  // came within the short spin: a waiter kept from running that long).
  EXPECT_LE(g_load_checks.load(), static_cast<int>(w.ms * 10) + 2);
}

TEST(Wait, SleepsAfterTheShortSpinWhenATaskWaitsForACpu) {
  WaitPolicy p;
  p.spin_ns = 1000000;
  p.idle_spin_ns = 60000000000;
  p.cpus_free = no_free_cpus;
  g_load_checks = 0;
  const Waited w = wait_for_flag(p, 0, true);
  EXPECT_TRUE(w.slept) << "the waiter spun on although the machine had no free CPU";
  EXPECT_EQ(g_load_checks.load(), 1);
}

TEST(Wait, SleepsAtTheIdleSpinLimitEvenWithFreeCpus) {
  WaitPolicy p;
  p.spin_ns = 0;
  p.idle_spin_ns = 2000000;  // 2 ms
  p.cpus_free = free_cpus;
  const Waited w = wait_for_flag(p, 0, true);
  EXPECT_TRUE(w.slept);
  EXPECT_LT(w.ms, 15000) << "the waiter spun on past its 2 ms";
}

TEST(Wait, WithoutALoadCheckTheShortSpinIsAll) {
  WaitPolicy p;  // as ACCORD_SPIN_US=N gives: no spinning on
  p.spin_ns = 1000000;
  p.idle_spin_ns = 60000000000;
  p.cpus_free = nullptr;
  EXPECT_TRUE(wait_for_flag(p, 0, true).slept);
}

TEST(Wait, PolicyFromTheSettingAndOversubscription) {
  const WaitPolicy dflt = make_wait_policy(-1, false);
  EXPECT_EQ(dflt.spin_ns, 200000);
  EXPECT_EQ(dflt.idle_spin_ns, 10000000);
  EXPECT_EQ(dflt.cpus_free, &room_to_spin);
  EXPECT_EQ(dflt.yields, 0);
  const WaitPolicy over = make_wait_policy(-1, true);
  EXPECT_EQ(over.spin_ns, 0);
  EXPECT_EQ(over.idle_spin_ns, 0);  // another rank needs this core: never spin on
  EXPECT_EQ(over.yields, 32);
  EXPECT_EQ(over.long_yield_ns, 500000);  // Note [Yields that hand the CPU away]
  EXPECT_EQ(make_wait_policy(-1, true, 2000).long_yield_ns, 2000000);  // ACCORD_LONG_YIELD_US
  EXPECT_EQ(make_wait_policy(-1, true, 0).long_yield_ns, 0);           // the gate never closes
  EXPECT_EQ(over.closed_spin_ns, kClosedSpinNs);  // Note [A short spin behind a closed gate]
  EXPECT_EQ(make_wait_policy(-1, true, 0).closed_spin_ns, 0);  // no gate: no spin behind it
  EXPECT_EQ(dflt.closed_spin_ns, 0);
  // Note [Moving off a CPU a yield found taken]: oversubscribed ranks with a gate, unless
  // ACCORD_CPU_MOVE=0.
  EXPECT_EQ(over.move_off_cpu, &move_off_this_cpu);
  EXPECT_EQ(over.move_off_yield_ns, 2000000);
  EXPECT_EQ(dflt.move_off_cpu, nullptr);
  EXPECT_EQ(make_wait_policy(-1, true, 0).move_off_cpu, nullptr);
  EXPECT_EQ(make_wait_policy(-1, true, 500, false).move_off_cpu, nullptr);
  const WaitPolicy fixed = make_wait_policy(500, false);  // ACCORD_SPIN_US=500: exactly that
  EXPECT_EQ(fixed.spin_ns, 500000);
  EXPECT_EQ(fixed.idle_spin_ns, 0);
}

// Note [Yields that hand the CPU away]. A fake yield that takes 2 ms stands for one that
// handed the core to a busy task until the next tick; the gate is this thread's, reset first.
std::atomic<int> g_yields{0};
void long_yield() {
  g_yields.fetch_add(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
}
void quick_yield() { g_yields.fetch_add(1); }
// Note [Moving off a CPU a yield found taken]: counted, not done (these threads stay put).
std::atomic<int> g_moves{0};
int fake_move() {
  g_moves.fetch_add(1);
  return 1;
}

WaitPolicy yielding_policy(void (*yield)()) {
  WaitPolicy p = make_wait_policy(-1, true);  // oversubscribed: no spin, 32 yields
  p.yield = yield;
  p.move_off_cpu = fake_move;
  p.move_off_yield_ns = 1000000;  // the 2 ms yields below move, however the machine rounds them
  return p;
}

TEST(Wait, TwoLongYieldsCloseTheGateAndTheWaiterSleeps) {
  yield_gate() = YieldGate{};
  g_yields = 0;
  g_moves = 0;
  const WaitPolicy p = yielding_policy(long_yield);
  Waited w = wait_for_flag(p, 0, true);
  EXPECT_TRUE(w.slept);
  // The first long yield is alone, the second comes right after it.
  EXPECT_EQ(g_yields.load(), 2) << "the waiter went on yielding after two yields of 2 ms";
  EXPECT_EQ(yield_gate().closings, 1);
  // Each long yield moved the thread off its CPU, the lone one too.
  EXPECT_EQ(g_moves.load(), 2);
  EXPECT_EQ(yield_gate().moves, 2);
  EXPECT_GT(yield_gate().closed_until_ns, 0);
  // While the gate is closed (10 ms, far longer than this takes unless the machine stalls
  // the test), the next wait sleeps without a yield. A try in which the wait ended after the
  // gate opened proves nothing (the wait may have yielded rightly): the gate is closed again
  // and the wait tried again; kTries tries with none that counts is a failure.
  constexpr int kTries = 20;
  bool counted = false;
  for (int tries = 0; !counted && tries < kTries; ++tries) {
    if (tries > 0) {  // close the gate again as above
      yield_gate() = YieldGate{};
      wait_for_flag(p, 0, true);
    }
    const int yields_before = g_yields.load();
    const int64_t closed_until = yield_gate().closed_until_ns;
    w = wait_for_flag(p, 0, true);
    EXPECT_TRUE(w.slept);
    if (now_ns() < closed_until) {
      counted = true;
      EXPECT_EQ(g_yields.load(), yields_before) << "a wait yielded through a closed gate";
    } else {
      std::printf("# try %d of %d: the wait outlasted the closed gate (a stalled machine): again\n", tries + 1,
                  kTries);
    }
  }
  EXPECT_TRUE(counted) << "all " << kTries
                       << " waits behind the closed gate outlasted it (10 ms): the machine stalled every "
                          "time, so nothing showed that a closed gate stops the yields";
}

// The first yield takes 1.2 s, the others none: a moment of another task, not a busy one.
// (Long here means over 1 s, which a yield that does nothing does not reach even on a loaded
// machine; at 500 us a preempted one could.)
std::atomic<bool> g_first_long{true};
void first_yield_long() {
  g_yields.fetch_add(1);
  if (g_first_long.exchange(false)) std::this_thread::sleep_for(std::chrono::milliseconds(1200));
}

TEST(Wait, ALoneLongYieldLeavesTheGateOpen) {
  yield_gate() = YieldGate{};
  g_yields = 0;
  g_first_long = true;
  g_moves = 0;
  WaitPolicy p = yielding_policy(first_yield_long);
  p.long_yield_ns = 1000000000;
  const Waited w = wait_for_flag(p, 0, true);
  EXPECT_TRUE(w.slept);
  EXPECT_EQ(g_yields.load(), 32) << "one long yield stopped the waiter's yields";
  EXPECT_EQ(yield_gate().closings, 0);
  EXPECT_EQ(g_moves.load(), 1) << "the long yield did not move the thread off its CPU";
}

TEST(Wait, QuickYieldsLeaveTheGateOpen) {
  yield_gate() = YieldGate{};
  g_yields = 0;
  g_moves = 0;
  WaitPolicy p = yielding_policy(quick_yield);
  p.long_yield_ns = 60000000000;  // nothing counts as long, however loaded the machine is
  const Waited w = wait_for_flag(p, 0, true);
  EXPECT_TRUE(w.slept);
  EXPECT_EQ(g_yields.load(), 32);
  EXPECT_EQ(yield_gate().closings, 0);
  EXPECT_EQ(g_moves.load(), 0) << "a quick yield moved the thread";
}

int move_refused() {
  g_moves.fetch_add(1);
  return -1;
}

TEST(Wait, ALongYieldShorterThanTheMoveThresholdDoesNotMove) {
  // Long enough to count for the gate, not to move: 2 ms against a minute.
  yield_gate() = YieldGate{};
  g_moves = 0;
  WaitPolicy p = yielding_policy(long_yield);
  p.move_off_yield_ns = 60000000000;
  auto never = [] { return false; };
  EXPECT_FALSE(yield_while(never, p));
  EXPECT_EQ(yield_gate().closings, 1);
  EXPECT_EQ(g_moves.load(), 0);
}

TEST(Wait, AMoveTheKernelRefusedIsNotCountedAndTheGateStillCloses) {
  yield_gate() = YieldGate{};
  g_moves = 0;
  WaitPolicy p = yielding_policy(long_yield);
  p.move_off_cpu = move_refused;
  auto never = [] { return false; };
  EXPECT_FALSE(yield_while(never, p));
  EXPECT_EQ(g_moves.load(), 2);
  EXPECT_EQ(yield_gate().moves, 0);
  EXPECT_EQ(yield_gate().closings, 1);
}

// The real move, on this machine's CPUs. In a thread of its own, whose mask the test sets.
cpu_set_t this_thread_mask() {
  cpu_set_t m;
  CPU_ZERO(&m);
  EXPECT_EQ(sched_getaffinity(0, sizeof m, &m), 0);
  return m;
}

TEST(Wait, MovingOffACpuMovesTheThreadAndKeepsItsMask) {
  const cpu_set_t mask = this_thread_mask();
  if (CPU_COUNT(&mask) < 2) GTEST_SKIP() << "this process may run on one CPU only";
  std::thread([&mask] {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &mask)) continue;
      const int moved_to = move_off_cpu(cpu);
      EXPECT_GE(moved_to, 0) << "off CPU " << cpu;
      EXPECT_NE(moved_to, cpu);
      EXPECT_TRUE(moved_to >= 0 && CPU_ISSET(moved_to, &mask)) << "moved to CPU " << moved_to;
      cpu_set_t after = this_thread_mask();
      EXPECT_TRUE(CPU_EQUAL(&after, &mask)) << "the mask changed moving off CPU " << cpu;
    }
    // The CPU it runs on: somewhere else right after.
    EXPECT_GE(move_off_this_cpu(), 0);
  }).join();
}

TEST(Wait, AThreadBoundToOneCpuDoesNotMove) {
  const cpu_set_t mask = this_thread_mask();
  int first = 0, outside = -1;
  while (first < CPU_SETSIZE && !CPU_ISSET(first, &mask)) ++first;
  ASSERT_LT(first, CPU_SETSIZE);
  for (int cpu = 0; cpu < CPU_SETSIZE && outside < 0; ++cpu)
    if (!CPU_ISSET(cpu, &mask)) outside = cpu;
  std::thread([first, outside] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    EXPECT_EQ(move_off_cpu(first), -1);
    EXPECT_EQ(move_off_this_cpu(), -1);
    if (outside >= 0) {
      EXPECT_EQ(move_off_cpu(outside), -1);  // not a CPU of its mask
    }
    EXPECT_EQ(move_off_cpu(-1), -1);
    EXPECT_EQ(move_off_cpu(CPU_SETSIZE), -1);
    cpu_set_t after = this_thread_mask();
    EXPECT_TRUE(CPU_EQUAL(&after, &one));
  }).join();
}

TEST(Wait, TheGateStaysClosedLongerWithEachLongYieldAndRecovers) {
  yield_gate() = YieldGate{};
  const WaitPolicy slow = yielding_policy(long_yield);
  auto never = [] { return false; };
  int64_t expect = kYieldGateMinNs;
  for (int i = 0; i < 10; ++i) {
    yield_gate().closed_until_ns = 0;  // as if the gate's time had passed
    const int64_t before = now_ns();
    EXPECT_FALSE(yield_while(never, slow));
    EXPECT_EQ(yield_gate().backoff_ns, expect) << "closing " << i + 1;
    EXPECT_GE(yield_gate().closed_until_ns, before + expect);
    expect = std::min(2 * expect, kYieldGateMaxNs);
  }
  EXPECT_EQ(yield_gate().backoff_ns, kYieldGateMaxNs);
  // Waits whose yields were all short bring it back to the shortest time.
  WaitPolicy quick = yielding_policy(quick_yield);
  quick.long_yield_ns = 60000000000;
  yield_gate().closed_until_ns = 0;
  int n = 0;
  auto after_two = [&n] { return ++n % 3 == 0; };  // ready after two yields
  for (int i = 0; i < kYieldGateShortWaits - 1; ++i) EXPECT_TRUE(yield_while(after_two, quick));
  EXPECT_EQ(yield_gate().backoff_ns, kYieldGateMaxNs);
  EXPECT_TRUE(yield_while(after_two, quick));
  EXPECT_EQ(yield_gate().backoff_ns, 0);
  EXPECT_EQ(yield_gate().closings, 10);
}

TEST(Wait, EachThreadHasItsOwnGate) {
  // Ranks as threads of one process: one rank's long yield says nothing about another's core.
  yield_gate() = YieldGate{};
  std::thread([] {
    auto never = [] { return false; };
    yield_while(never, yielding_policy(long_yield));
    EXPECT_EQ(yield_gate().closings, 1);  // after two long yields
  }).join();
  EXPECT_EQ(yield_gate().closings, 0);
  EXPECT_EQ(yield_gate().closed_until_ns, 0);
}

// Note [A short spin behind a closed gate]. The gate is closed by hand for far longer than
// the test takes; ready() counts its calls.
void close_gate_for_a_minute() {
  yield_gate() = YieldGate{};
  yield_gate().closed_until_ns = now_ns() + 60000000000;
}

TEST(Wait, BehindAClosedGateTheWaiterSpinsBeforeItSleeps) {
  close_gate_for_a_minute();
  g_yields = 0;
  WaitPolicy p = yielding_policy(quick_yield);
  p.closed_spin_ns = 60000000000;  // nothing ends it but ready()
  int calls = 0;
  auto fifth = [&calls] { return ++calls == 5; };
  EXPECT_TRUE(yield_while(fifth, p));
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(g_yields.load(), 0) << "a wait yielded through a closed gate";
  EXPECT_EQ(yield_gate().spin_credit, kClosedSpinMissCost + 1);
  // The whole wait: a flag set 1 ms later than the wait starts is found by the spin, and the
  // waiter never sleeps (with closed_spin_ns 0 it would sleep at once, as in
  // TwoLongYieldsCloseTheGateAndTheWaiterSleeps).
  EXPECT_FALSE(wait_for_flag(p, 1).slept);
}

TEST(Wait, SpinsThatFindNothingStopUntilAProbeFindsData) {
  close_gate_for_a_minute();  // a new gate: credit for one miss
  WaitPolicy p = yielding_policy(quick_yield);
  p.closed_spin_ns = 200000;  // 200 us
  int calls = 0;
  auto never = [&calls] {
    ++calls;
    return false;
  };
  // A spin that ends unready, after the whole spin...
  const int64_t before = now_ns();
  EXPECT_FALSE(yield_while(never, p));
  EXPECT_GE(now_ns() - before, p.closed_spin_ns) << "the spin ended early";
  EXPECT_GT(calls, 1);
  EXPECT_EQ(yield_gate().spin_credit, 0);
  // ...then the closed waits sleep at once, all but every kClosedSpinProbe-th.
  for (int i = 1; i < kClosedSpinProbe; ++i) {
    calls = 0;
    EXPECT_FALSE(yield_while(never, p));
    ASSERT_EQ(calls, 0) << "closed wait " << i << " without credit spun";
  }
  int n = 0;
  auto third = [&n] { return ++n == 3; };
  EXPECT_TRUE(yield_while(third, p)) << "the probe did not spin";
  EXPECT_EQ(yield_gate().spin_credit, 1);
  // Found ready: the next closed wait spins again, and its miss takes the credit away.
  calls = 0;
  EXPECT_FALSE(yield_while(never, p));
  EXPECT_GT(calls, 1);
  EXPECT_EQ(yield_gate().spin_credit, 0);
}

TEST(Wait, SpinsThatFoundDataOftenOutlastAFewMisses) {
  close_gate_for_a_minute();
  WaitPolicy p = yielding_policy(quick_yield);
  p.closed_spin_ns = 200000;
  for (int i = 0; i < 2 * kClosedSpinCreditMax; ++i) {
    int n = 0;
    auto second = [&n] { return ++n == 2; };
    EXPECT_TRUE(yield_while(second, p));
  }
  EXPECT_EQ(yield_gate().spin_credit, kClosedSpinCreditMax);
  // A miss costs kClosedSpinMissCost: 4 misses of 16 credits; spins found ready 4 times in 5
  // keep spinning.
  int calls = 0;
  auto never = [&calls] {
    ++calls;
    return false;
  };
  for (int miss = 1; miss <= kClosedSpinCreditMax / kClosedSpinMissCost; ++miss) {
    calls = 0;
    EXPECT_FALSE(yield_while(never, p));
    EXPECT_GT(calls, 1) << "miss " << miss << " did not spin";
  }
  EXPECT_EQ(yield_gate().spin_credit, 0);
  calls = 0;
  EXPECT_FALSE(yield_while(never, p));
  EXPECT_EQ(calls, 0) << "a closed wait without credit spun";
}

TEST(Wait, AnOpenGateDoesNotSpin) {
  yield_gate() = YieldGate{};
  g_yields = 0;
  WaitPolicy p = yielding_policy(quick_yield);
  p.long_yield_ns = 60000000000;
  p.closed_spin_ns = 60000000000;  // would hang the test if an open gate spun
  auto never = [] { return false; };
  EXPECT_FALSE(yield_while(never, p));
  EXPECT_EQ(g_yields.load(), 32);
}

TEST(Wait, LoadavgRunnableCount) {
  EXPECT_EQ(loadavg_runnable("0.99 1.61 2.21 2/80 22733\n"), 2);
  EXPECT_EQ(loadavg_runnable("12.00 11.50 10.25 17/1203 9"), 17);
  EXPECT_EQ(loadavg_runnable(""), -1);
  EXPECT_EQ(loadavg_runnable("0.99 1.61 2.21"), -1);
  EXPECT_EQ(loadavg_runnable("0.99 1.61 2.21 x/80 1"), -1);
  EXPECT_EQ(loadavg_runnable("0.99 1.61 2.21 3 1"), -1);
}

// Spinning threads two more than the check allows beside the CPUs: it must say no.
TEST(Wait, NoRoomToSpinWithMoreSpinnersThanCpus) {
  const unsigned cpus = std::thread::hardware_concurrency();
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  const unsigned n = cpus + static_cast<unsigned>(kSpinBesideTasks) + 2;
  for (unsigned i = 0; i < n; ++i)
    spinners.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) cpu_relax();
    });
  bool seen_busy = false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!seen_busy && std::chrono::steady_clock::now() < until) {
    seen_busy = !room_to_spin();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stop = true;
  for (auto& t : spinners) t.join();
  EXPECT_TRUE(seen_busy) << n << " spinning threads on " << cpus << " CPUs, and /proc/loadavg never said so";
}

}  // namespace
}  // namespace accord
