// core_pingpong: how long a cache line takes to go from one CPU to another and back, over time.
//
// Two threads, pinned to CPUs A and B, pass a counter back and forth through two cache lines;
// every interval of --trips round trips is one sample. The summary gives the fastest, median
// and slowest sample and how many were over twice the fastest. On the project's VM the round
// trip takes 120-130 ns most of the time and 520-590 ns for stretches of seconds to minutes
// (why cannot be seen from inside the VM; Note [Machine state probe] in all_reduce_algos.cpp):
// every all-reduce smaller than a few MiB is slower then. Run it before a benchmark whose
// results look bimodal, or with --series to see when the state changes. It keeps both CPUs
// busy, so not during one.
//
//   build/bench/core_pingpong [--seconds 5] [--cpus 0,1] [--trips 20000] [--series] [--exchange]
//
// --exchange times the other pattern instead: both CPUs write their own line and wait for the
// other's, as ranks do in a 2-rank all-reduce on the board (Note [Board]). Each waits for one
// transfer, and the two transfers overlap, so an exchange takes about half a round trip
// (Intel Xeon VM, 2026-11-28: 150 ns against 250-350): that, not the round trip, is the floor
// of an 8-byte all-reduce between two processes.
//
// Nothing of Accord: plain threads, so that it measures the machine and not the library.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bench/pin.hpp"

namespace {

struct alignas(64) Line {
  std::atomic<uint64_t> value{0};
};

Line ping, pong;

inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
std::atomic<bool> stop{false};

void usage() {
  std::fprintf(
      stderr,
      "usage: core_pingpong [--seconds S] [--cpus A,B] [--trips N] [--series] [--exchange]\n"
      "Round trip of a cache line between CPUs A and B (default 0,1): one sample per N\n"
      "round trips (default 20000) for S seconds (default 5); --series prints each sample\n"
      "(seconds since start, ns per round trip). --exchange: both CPUs write their own line\n"
      "and wait for the other's, and a sample is ns per exchange.\n");
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 5;
  int cpu_a = 0, cpu_b = 1;
  long trips = 20000;
  bool series = false;
  bool exchange = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--seconds" && has_value) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--cpus" && has_value) {
      if (std::sscanf(argv[++i], "%d,%d", &cpu_a, &cpu_b) != 2) cpu_a = -1;
    } else if (a == "--trips" && has_value) {
      trips = std::atol(argv[++i]);
    } else if (a == "--series") {
      series = true;
    } else if (a == "--exchange") {
      exchange = true;
    } else {
      usage();
      return 2;
    }
  }
  if (!(seconds > 0) || trips < 1 || cpu_a < 0 || cpu_b < 0 || cpu_a == cpu_b ||
      cpu_a >= CPU_SETSIZE || cpu_b >= CPU_SETSIZE) {
    usage();
    return 2;
  }
  if (!accord::bench::pin_to_cpu(cpu_a)) {
    std::fprintf(
        stderr,
        "core_pingpong: cannot run on CPU %d (not online, or outside this process's CPU set)\n",
        cpu_a);
    return 2;
  }
  // The echo thread inherits this thread's CPU set ({A}): until it has moved to B, the two
  // would share A and every round trip would wait for a time slice. So no timing before then.
  std::atomic<int> echo_state{0};  // 0: starting, 1: on B, -1: cannot run on B
  std::thread echo([&] {
    echo_state = accord::bench::pin_to_cpu(cpu_b) ? 1 : -1;
    uint64_t last = 0;
    if (exchange) {
      // B's side of each exchange: its own line first, then A's (counters only grow, so a
      // side that is one exchange ahead is seen as done with this one).
      while (!stop.load(std::memory_order_relaxed)) {
        pong.value.store(++last, std::memory_order_release);
        while (ping.value.load(std::memory_order_acquire) < last && !stop.load(std::memory_order_relaxed))
          cpu_pause();
      }
      return;
    }
    while (!stop.load(std::memory_order_relaxed)) {
      const uint64_t v = ping.value.load(std::memory_order_acquire);
      if (v != last) {
        last = v;
        pong.value.store(v, std::memory_order_release);
      }
    }
  });
  while (echo_state.load() == 0) std::this_thread::yield();
  using Clock = std::chrono::steady_clock;
  std::vector<double> samples;
  const auto start = Clock::now();
  uint64_t k = 0;
  while (echo_state.load() == 1 &&
         std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    const auto t0 = Clock::now();
    if (exchange) {
      for (long i = 0; i < trips; ++i) {
        ping.value.store(++k, std::memory_order_release);
        while (pong.value.load(std::memory_order_acquire) < k) cpu_pause();
      }
    } else {
      for (long i = 0; i < trips; ++i) {
        ping.value.store(++k, std::memory_order_release);
        while (pong.value.load(std::memory_order_acquire) != k) {
        }
      }
    }
    const auto t1 = Clock::now();
    samples.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() /
                      static_cast<double>(trips));
    if (series)
      std::printf("%.3f %.1f\n", std::chrono::duration<double>(t1 - start).count(), samples.back());
  }
  stop = true;
  echo.join();
  if (echo_state.load() != 1) {
    std::fprintf(
        stderr,
        "core_pingpong: cannot run on CPU %d (not online, or outside this process's CPU set)\n",
        cpu_b);
    return 2;
  }
  if (samples.empty()) {
    std::fprintf(stderr, "core_pingpong: no sample in %g s; give more --seconds\n", seconds);
    return 2;
  }
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  const double fastest = sorted.front();
  const long slow =
      std::count_if(samples.begin(), samples.end(), [&](double s) { return s > 2 * fastest; });
  const char* what = exchange ? "exchange of two cache lines (each CPU writes its own and waits for the other's)"
                              : "round trip of a cache line";
  std::printf("# CPUs %d and %d: %s, ns: fastest %.1f, median %.1f, slowest %.1f; %ld of %zu samples (%ld %s each) "
              "over twice the fastest\n",
              cpu_a, cpu_b, what, fastest, sorted[sorted.size() / 2], sorted.back(), slow, samples.size(), trips,
              exchange ? "exchanges" : "round trips");
  return 0;
}
