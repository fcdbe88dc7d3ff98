// slot_copy: how fast one CPU passes messages to another through FIFO slots, by how the sender
// writes the slot (Note [Copies into a peer's slot], collectives/kernels/reduce_isa.cpp).
//
// Two threads, pinned to CPUs A and B, as a shared-memory FIFO's two ends: 8 slots, the
// sender copies each message from a 1 MiB source into the next free slot and publishes it,
// the receiver copies it out (Accord's vector loop, kernels::copy) into a 1 MiB destination
// and frees the slot. One sample moves --bytes through the FIFO once per way of writing the
// slot, in turn:
//   vector   kernels::copy, the vector loop of ordinary stores (ACCORD_SLOT_COPY=vector)
//   rep      kernels::copy_to_peer with `rep movsb` (the default)
//   rep/4K   the same, one `rep movsb` per 4 KiB piece of the message
//   nt       kernels::copy with non-temporal stores
// Before each sample a cache line's round trip between A and B is timed (as core_pingpong):
// on the project VM it tells the machine's two states apart (80-130 ns, or 400-560 ns when
// its vCPUs are far apart), and the summary gives medians per state. A sample whose round
// trip is over twice the fast state's counts as slow: twice --fast-ns, or twice the fastest
// of this run (so a run spent wholly in the slow state calls it fast; its round trip says so).
//
//   build/bench/slot_copy [--seconds 10] [--cpus 0,1] [--sizes 1K,4K,64K] [--bytes 4M]
//                         [--fast-ns NS] [--series]
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/pin.hpp"
#include "bench/sizes.hpp"
#include "collectives/kernels/reduce_kernels.hpp"

namespace {

using accord::kernels::SlotCopy;

constexpr int kSlots = 8;
constexpr size_t kRing = size_t{1} << 20;  // source and destination: 1 MiB, reused

struct alignas(64) Flag {
  std::atomic<uint64_t> value{0};
};

enum Method { kVector, kRep, kRep4K, kNt, kMethods };
const char* const kMethodNames[kMethods] = {"vector", "rep", "rep/4K", "nt"};

void usage() {
  std::fprintf(stderr,
               "usage: slot_copy [--seconds S] [--cpus A,B] [--sizes LIST] [--bytes N] [--fast-ns NS]\n"
               "                 [--series]\n"
               "Messages from CPU A to CPU B through 8 FIFO slots, the sender writing each slot as\n"
               "vector (ordinary stores), rep (rep movsb), rep/4K (rep movsb per 4 KiB) or nt\n"
               "(non-temporal stores); GB/s per message size (LIST, default 1K,4K,64K), each sample\n"
               "moving N bytes (default 4M) once per way, for S seconds (default 10), with a\n"
               "cache-line round trip before each sample to tell the machine's states apart: slow\n"
               "when over twice NS (default: the fastest round trip of the run). --series prints\n"
               "every sample.\n");
}

// Both threads' view of one transfer. The sender owns `sent` and the slots it fills; the
// receiver owns `freed`.
struct Fifo {
  uint8_t* slots = nullptr;
  size_t stride = 0;
  Flag sent, freed;
  Flag ping, pong;   // the round-trip probe
  Flag go, done;     // one command at a time, numbered; `probe` says which kind
  bool probe = false;
  size_t message = 0;
  size_t messages = 0;
  std::atomic<bool> stop{false};
};

void write_slot(Method m, uint8_t* slot, const uint8_t* src, size_t bytes) {
  switch (m) {
    case kVector:
      accord::kernels::copy(slot, src, bytes, false);
      break;
    case kRep:
      accord::kernels::copy_to_peer(slot, src, bytes);
      break;
    case kRep4K:
      for (size_t off = 0; off < bytes; off += 4096)
        accord::kernels::copy_to_peer(slot + off, src + off, std::min<size_t>(4096, bytes - off));
      break;
    default:
      accord::kernels::copy(slot, src, bytes, true);
      break;
  }
}

// The receiver: answers the probe or drains `messages` messages, as each command says.
void receiver(Fifo* f, uint8_t* dst, std::atomic<int>* state, int cpu) {
  *state = accord::bench::pin_to_cpu(cpu) ? 1 : -1;
  uint64_t commands = 0;
  while (!f->stop.load(std::memory_order_relaxed)) {
    const uint64_t g = f->go.value.load(std::memory_order_acquire);
    if (g == commands) continue;
    commands = g;
    if (f->probe) {
      for (uint64_t last = 0; last != ~uint64_t{0};) {
        const uint64_t v = f->ping.value.load(std::memory_order_acquire);
        if (v != last) {
          last = v;
          f->pong.value.store(v, std::memory_order_release);
        }
      }
    } else {
      const uint64_t base = f->freed.value.load(std::memory_order_relaxed);
      for (uint64_t k = 0; k < f->messages; ++k) {
        while (f->sent.value.load(std::memory_order_acquire) < base + k + 1) {
        }
        const uint8_t* slot = f->slots + ((base + k) % kSlots) * f->stride;
        accord::kernels::copy(dst + (k * f->message) % kRing, slot, f->message, false);
        f->freed.value.store(base + k + 1, std::memory_order_release);
      }
    }
    f->done.value.store(g, std::memory_order_release);
  }
}

std::string size_label(size_t b) {
  char buf[32];
  if (b >= (1 << 20) && b % (1 << 20) == 0) std::snprintf(buf, sizeof buf, "%zuM", b >> 20);
  else if (b >= 1024 && b % 1024 == 0) std::snprintf(buf, sizeof buf, "%zuK", b >> 10);
  else std::snprintf(buf, sizeof buf, "%zu", b);
  return buf;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  int cpu_a = 0, cpu_b = 1;
  std::vector<size_t> sizes = {1024, 4096, 65536};
  size_t bytes = size_t{4} << 20;
  bool series = false;
  double fast_ns = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--seconds" && has_value) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--cpus" && has_value) {
      if (std::sscanf(argv[++i], "%d,%d", &cpu_a, &cpu_b) != 2) cpu_a = -1;
    } else if (a == "--sizes" && has_value) {
      sizes.clear();
      std::string list = argv[++i];
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        size_t v = 0;
        if (!accord::bench::parse_size(list.substr(at, comma - at).c_str(), &v) || v == 0 || v > (64 << 20)) {
          std::fprintf(stderr, "slot_copy: --sizes: '%s' is not a size from 1 byte to 64M\n",
                       list.substr(at, comma - at).c_str());
          return 2;
        }
        sizes.push_back(v);
        at = comma + 1;
      }
    } else if (a == "--bytes" && has_value) {
      if (!accord::bench::parse_size(argv[++i], &bytes)) bytes = 0;
    } else if (a == "--fast-ns" && has_value) {
      fast_ns = std::atof(argv[++i]);
      if (!(fast_ns > 0)) {
        std::fprintf(stderr, "slot_copy: --fast-ns: '%s' is not a positive number of ns\n", argv[i]);
        return 2;
      }
    } else if (a == "--series") {
      series = true;
    } else {
      usage();
      return 2;
    }
  }
  if (!(seconds > 0) || bytes == 0 || cpu_a < 0 || cpu_b < 0 || cpu_a == cpu_b || cpu_a >= CPU_SETSIZE ||
      cpu_b >= CPU_SETSIZE) {
    usage();
    return 2;
  }
  if (!accord::bench::pin_to_cpu(cpu_a)) {
    std::fprintf(stderr, "slot_copy: cannot run on CPU %d (not online, or outside this process's CPU set)\n",
                 cpu_a);
    return 2;
  }
  const size_t largest = *std::max_element(sizes.begin(), sizes.end());
  Fifo f;
  f.stride = (largest + 4096 + 4095) & ~size_t{4095};
  std::vector<std::unique_ptr<uint8_t, decltype(&std::free)>> buffers;  // freed on every return
  auto page_aligned = [&](size_t n) {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, n) != 0) {
      std::fprintf(stderr, "slot_copy: cannot allocate %zu bytes\n", n);
      std::exit(2);
    }
    std::memset(p, 1, n);
    buffers.emplace_back(static_cast<uint8_t*>(p), &std::free);
    return static_cast<uint8_t*>(p);
  };
  f.slots = page_aligned(kSlots * f.stride);
  uint8_t* src = page_aligned(kRing);
  uint8_t* dst = page_aligned(kRing);
  // As core_pingpong: no timing before the receiver runs on B.
  std::atomic<int> state{0};
  std::thread rx(receiver, &f, dst, &state, cpu_b);
  while (state.load() == 0) std::this_thread::yield();
  if (state.load() != 1) {
    f.stop = true;
    rx.join();
    std::fprintf(stderr, "slot_copy: cannot run on CPU %d (not online, or outside this process's CPU set)\n",
                 cpu_b);
    return 2;
  }
  const SlotCopy mode_before = accord::kernels::slot_copy_mode();
  accord::kernels::set_slot_copy_mode(SlotCopy::kRepMovsb);  // for rep and rep/4K, whatever ACCORD_SLOT_COPY says
  using Clock = std::chrono::steady_clock;
  uint64_t command = 0;
  auto order = [&](uint64_t c) {
    f.go.value.store(c, std::memory_order_release);
  };
  auto wait_done = [&](uint64_t c) {
    while (f.done.value.load(std::memory_order_acquire) != c) {
    }
  };
  struct Sample {
    double probe_ns;
    std::vector<double> gbps;  // [size][method]
  };
  std::vector<Sample> samples;
  const auto start = Clock::now();
  uint64_t k = 0;
  while (std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    Sample s;
    f.ping.value.store(0, std::memory_order_relaxed);  // not the last probe's end mark
    f.probe = true;
    order(++command);
    constexpr int kTrips = 20000;
    const auto p0 = Clock::now();
    for (int i = 0; i < kTrips; ++i) {
      f.ping.value.store(++k, std::memory_order_release);
      while (f.pong.value.load(std::memory_order_acquire) != k) {
      }
    }
    s.probe_ns = std::chrono::duration<double, std::nano>(Clock::now() - p0).count() / kTrips;
    f.ping.value.store(~uint64_t{0}, std::memory_order_release);
    wait_done(command);
    for (const size_t m : sizes) {
      for (int method = 0; method < kMethods; ++method) {
        f.message = m;
        f.messages = std::max<size_t>(1, bytes / m);
        const uint64_t base = f.sent.value.load(std::memory_order_relaxed);
        f.probe = false;
        const auto t0 = Clock::now();
        order(++command);
        for (uint64_t j = 0; j < f.messages; ++j) {
          while (base + j - f.freed.value.load(std::memory_order_acquire) >= kSlots) {
          }
          write_slot(static_cast<Method>(method), f.slots + ((base + j) % kSlots) * f.stride,
                     src + (j * m) % kRing, m);
          f.sent.value.store(base + j + 1, std::memory_order_release);
        }
        wait_done(command);
        const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
        s.gbps.push_back(static_cast<double>(f.messages * m) / secs / 1e9);
      }
    }
    if (series) {
      std::printf("%.3f probe %.0f ns", std::chrono::duration<double>(Clock::now() - start).count(), s.probe_ns);
      for (size_t i = 0; i < sizes.size(); ++i)
        for (int method = 0; method < kMethods; ++method)
          std::printf(" %zu:%s %.1f", sizes[i], kMethodNames[method], s.gbps[i * kMethods + method]);
      std::printf("\n");
      std::fflush(stdout);
    }
    samples.push_back(std::move(s));
  }
  f.stop = true;
  rx.join();
  accord::kernels::set_slot_copy_mode(mode_before);
  double fastest = samples.front().probe_ns;
  for (const Sample& s : samples) fastest = std::min(fastest, s.probe_ns);
  std::printf("# CPUs %d to %d, 8 slots, %zu bytes a sample per way, %zu samples in %g s; fastest round trip %.0f ns\n",
              cpu_a, cpu_b, bytes, samples.size(), seconds, fastest);
  const double reference = fast_ns > 0 ? fast_ns : fastest;
  // Per state: its samples, their median round trip, then each size and way's median GB/s.
  struct State {
    std::vector<double> trips;
    std::vector<std::vector<double>> gbps = {};
  } states[2];
  for (State& st : states) st.gbps.resize(sizes.size() * kMethods);
  for (const Sample& s : samples) {
    State& st = states[s.probe_ns > 2 * reference ? 1 : 0];
    st.trips.push_back(s.probe_ns);
    for (size_t i = 0; i < s.gbps.size(); ++i) st.gbps[i].push_back(s.gbps[i]);
  }
  std::printf("# fast state (round trip at most 2 x %.0f ns, %s): %zu samples, median round trip %.0f ns\n",
              reference, fast_ns > 0 ? "--fast-ns" : "the fastest", states[0].trips.size(), median(states[0].trips));
  std::printf("# slow state (round trip over 2 x %.0f ns): %zu samples, median round trip %.0f ns\n", reference,
              states[1].trips.size(), median(states[1].trips));
  std::printf("# GB/s, median of the state's samples ('-': no sample in that state)\n");
  std::printf("# %8s %8s %8s %8s\n", "message", "sender", "fast", "slow");
  for (size_t i = 0; i < sizes.size(); ++i) {
    for (int method = 0; method < kMethods; ++method) {
      std::printf("  %8s %8s", size_label(sizes[i]).c_str(), kMethodNames[method]);
      for (const State& st : states) {
        if (st.trips.empty()) std::printf(" %8s", "-");
        else std::printf(" %8.1f", median(st.gbps[i * kMethods + method]));
      }
      std::printf("\n");
    }
  }
  return 0;
}
