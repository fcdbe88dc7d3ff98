// Every all-reduce candidate, and the tuner, timed side by side in one job.
//
// Note [Interleaved calibration]: with 4 ranks on 2 cores, how the scheduler places the
// processes is decided at launch and changes an algorithm's time by 2-3x from one launch to
// the next (bench/README.md), so candidates timed in separate launches cannot be compared
// within 10%. This program creates one communicator per candidate in the same job (ACCORD_ALGO
// and ACCORD_CHUNK_BYTES set at each init; the tuner's with neither, and ACCORD_TUNE_FILE if
// given) and times them in turn at each size, round after round through all sizes (the order
// rotated each round), so every candidate sees the same placement and load; the table has
// each candidate's median. bench/calibrate.sh runs it.
//
// Each sample is the mean of an out-of-place and an in-place time (half the calls each).
// Rounds used to alternate between the two; in place does not stream (Note [Streaming in
// place]) and runs faster at large sizes, so the median of 5 rounds (3 of one kind, 2 of the
// other) fell on the edge between two clusters, and with 4 ranks on 2 cores the same
// algorithm's medians on two communicators differed by 13% and 25% (4 MiB) in one run. With
// mixed samples, in three runs of the same 4 sizes x 8 communicators, one pair differed by 20%
// (64 KiB) and every other by at most 5.3%.
//
// Even so, one algorithm ran at two speeds on two communicators of the same job: with 2 ranks
// at 4-16 MiB, ring took 2.5 ms on one and 3.8 ms on another, several rounds running, in the
// calibration's long jobs; with 4 ranks at 16 KiB, rd 7.4-7.8 us on one and 10.5-10.8 on
// another (in three jobs). The 4-rank case was calibrate.sh running the ranks at real-time
// priority, which the kernel stops for 50 ms of every second once they keep the cores busy
// (Note [No real-time priority], calibrate.sh); the 2-rank one, seen under the same priority,
// was probably the same (not measured again). The machine's slow state (below) does it too.
// calibrate.sh still lists every candidate twice, and --out writes the slower of its two
// medians: a candidate that may be slow is not picked over one that is reliably as fast.
//
// Note [Machine state probe]: this VM has two states that last from seconds to minutes. In the
// slow one a cache line takes 4-5x as long to go from one core to the other and back (a
// two-thread ping-pong, bench/core_pingpong: 120-130 ns per round trip, then 520-590 ns), so
// every small and mid-size all-reduce slows down, unequally: with 4 ranks at 16 KiB, rd took
// 7.5 us in the fast state and 14.4 in the slow one, direct 9 and 22. A sample taken in the
// slow state is then not comparable with one taken in the fast state, and the median of a few
// rounds moves with how many of them the state spoiled. So before the first sample and after
// every sample, ranks 0 and 1 time 1000 8-byte all-reduces on a communicator of their own (the
// probe); a sample whose probe before or after it took more than twice the best probe so far
// is taken again once the probe is fast again (waiting up to --state-wait seconds, polling
// every 50 ms). The medians use only samples whose probes were within twice the job's best;
// the header says how many were retaken and how long the job waited. --state-wait 0 turns the
// probe off.
//
//   mpirun -np 4 build/bench/all_reduce_algos -b 8 -e 256M -f 4 --rounds 5 --out accord.tune
//
// Public API only. Under mpirun or any launcher accord_comm_init_from_env understands.
#include <accord/accord.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/sizes.hpp"

namespace {

constexpr size_t kDefaultChunk = 256 << 10;

struct Candidate {
  std::string name;   // "ring", "ring/64K", "tuner"
  std::string algo;   // ACCORD_ALGO; empty: the tuner
  size_t chunk = 0;   // ACCORD_CHUNK_BYTES; 0: the default
  accord_comm_t comm = nullptr;
};

struct Options {
  size_t min_bytes = 8, max_bytes = 256 << 20;
  double factor = 4;
  std::vector<size_t> sizes;  // --sizes: these instead of -b/-e/-f
  int rounds = 5;
  bool check = true;
  std::string candidates = "ring,ring/64K,tree,tree/64K,direct,rd";
  bool tuner = true;
  std::string tune_file;  // for the tuner's communicator
  std::string out;        // tune file to write (rank 0)
  bool samples = false;   // --samples: every round's sample too, in round order
  double state_wait = 120;  // --state-wait: seconds to wait for the fast state; 0: no probe
};

void usage() {
  std::fprintf(
      stderr,
      "usage: all_reduce_algos [-b MIN] [-e MAX] [-f FACTOR | --sizes 8,16,64K,...]\n"
      "       [--rounds R] [-c 0|1]\n"
      "       [--candidates ring,ring/64K,tree,tree/64K,direct,rd] [--no-tuner]\n"
      "       [--tune-file FILE] [--out FILE] [--samples] [--state-wait SECONDS]\n"
      "Times each candidate (ALGO or ALGO/CHUNK) and the tuner in one job, interleaved;\n"
      "prints median us per size, float32 sum; --out writes the candidates' medians as a\n"
      "tune file (ACCORD_TUNE_FILE); --samples prints every sample. Samples taken while\n"
      "the machine is in a slow state (8-byte probe between ranks 0 and 1 over twice its\n"
      "best) are taken again, waiting up to --state-wait seconds (default 120; 0: no probe).\n"
      "Run under mpirun or with RANK/WORLD_SIZE/MASTER_*.\n");
}

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&](const char** v) {
      if (i + 1 >= argc) return false;
      *v = argv[++i];
      return true;
    };
    const char* v = nullptr;
    if (a == "-b" && next(&v)) {
      if (!accord::bench::parse_size(v, &o->min_bytes)) return false;
    } else if (a == "-e" && next(&v)) {
      if (!accord::bench::parse_size(v, &o->max_bytes)) return false;
    } else if (a == "-f" && next(&v)) {
      o->factor = std::atof(v);
      if (o->factor <= 1) return false;
    } else if (a == "--sizes" && next(&v)) {
      std::string list = v;
      for (size_t start = 0; start < list.size();) {
        size_t comma = list.find(',', start);
        if (comma == std::string::npos) comma = list.size();
        size_t b = 0;
        if (!accord::bench::parse_size(list.substr(start, comma - start).c_str(), &b) || b < 4) return false;
        o->sizes.push_back(b);
        start = comma + 1;
      }
    } else if (a == "--rounds" && next(&v)) {
      o->rounds = std::atoi(v);
      if (o->rounds < 1) return false;
    } else if (a == "-c" && next(&v)) {
      o->check = std::atoi(v) != 0;
    } else if (a == "--candidates" && next(&v)) {
      o->candidates = v;
    } else if (a == "--no-tuner") {
      o->tuner = false;
    } else if (a == "--tune-file" && next(&v)) {
      o->tune_file = v;
    } else if (a == "--out" && next(&v)) {
      o->out = v;
    } else if (a == "--samples") {
      o->samples = true;
    } else if (a == "--state-wait" && next(&v)) {
      o->state_wait = std::atof(v);
      if (!(o->state_wait >= 0)) return false;
    } else {
      return false;
    }
  }
  if (o->sizes.empty())
    for (size_t b = o->min_bytes; b >= 4 && b <= o->max_bytes;
         b = std::max(b + 4, static_cast<size_t>(static_cast<double>(b) * o->factor)))
      o->sizes.push_back(b);
  return !o->sizes.empty();
}

bool parse_candidates(const std::string& list, std::vector<Candidate>* out) {
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string item = list.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) continue;
    Candidate c;
    c.name = item;
    const size_t slash = item.find('/');
    c.algo = item.substr(0, slash);
    if (slash != std::string::npos && !accord::bench::parse_size(item.c_str() + slash + 1, &c.chunk)) return false;
    out->push_back(c);
  }
  return !out->empty();
}

// Sets (or, with an empty value, unsets) an environment variable for one communicator's init.
void set_env(const char* name, const std::string& value) {
  if (value.empty()) unsetenv(name);
  else setenv(name, value.c_str(), 1);
}

struct Job {
  accord_comm_t world = nullptr;  // first communicator: the launcher's; ids and timings travel on it
  int rank = 0, n = 1;

  bool fail(const char* what, accord_comm_t comm) {
    std::fprintf(stderr, "rank %d: %s failed: %s\n", rank, what, accord_last_error(comm));
    return false;
  }

  // A communicator over the same ranks, with `c`'s settings at init.
  // A new communicator's unique id, made by rank 0 and sent to every rank over `world`.
  bool new_id(accord_unique_id_t* id) {
    if (rank == 0 && accord_get_unique_id(id) != ACCORD_SUCCESS)
      return fail("accord_get_unique_id", nullptr);
    if (accord_broadcast(id, id, sizeof *id, ACCORD_UINT8, 0, world, nullptr) != ACCORD_SUCCESS)
      return fail("broadcast of a unique id", world);
    return true;
  }

  bool make(Candidate* c, const std::string& tune_file) {
    accord_unique_id_t id;
    if (!new_id(&id)) return false;
    set_env("ACCORD_ALGO", c->algo);
    // A candidate without a chunk runs with the slot's (what the tune file records for it),
    // not the 64 KiB that host calls get by default (Note [Host chunk], communicator.cpp).
    set_env("ACCORD_CHUNK_BYTES", c->algo.empty() ? "" : std::to_string(c->chunk ? c->chunk : kDefaultChunk));
    set_env("ACCORD_TUNE_FILE", c->algo.empty() ? tune_file : "");
    accord_status_t s = accord_comm_init_rank(&c->comm, n, id, rank);
    unsetenv("ACCORD_ALGO");
    unsetenv("ACCORD_CHUNK_BYTES");
    unsetenv("ACCORD_TUNE_FILE");
    return s == ACCORD_SUCCESS || fail(("init of the " + c->name + " communicator").c_str(), nullptr);
  }

  // Mean seconds per call on this rank, after `warmup` calls and a barrier; negative on error.
  // Only `comm`'s ranks call it.
  double local_time(accord_comm_t comm, const float* send, float* recv, size_t count, int warmup,
                    int iters) {
    for (int i = 0; i < warmup; ++i)
      if (accord_all_reduce(send, recv, count, ACCORD_FLOAT32, ACCORD_SUM, comm, nullptr) != ACCORD_SUCCESS)
        return fail("all_reduce", comm), -1;
    if (accord_barrier(comm, nullptr) != ACCORD_SUCCESS) return fail("barrier", comm), -1;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i)
      if (accord_all_reduce(send, recv, count, ACCORD_FLOAT32, ACCORD_SUM, comm, nullptr) != ACCORD_SUCCESS)
        return fail("all_reduce", comm), -1;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  }

  // Mean seconds per call on the slowest rank; negative on error.
  double time(accord_comm_t comm, const float* send, float* recv, size_t count, int warmup, int iters) {
    double secs = local_time(comm, send, recv, count, warmup, iters);
    if (secs < 0) return -1;
    double slowest = secs;
    if (accord_all_reduce(&secs, &slowest, 1, ACCORD_FLOAT64, ACCORD_MAX, world, nullptr) != ACCORD_SUCCESS)
      return fail("all_reduce of the timings", world), -1;
    return slowest;
  }

  // Note [Machine state probe]. The probe's communicator: world ranks 0 and 1, direct.
  accord_comm_t pair = nullptr;
  double best_probe = 0;  // fastest probe so far, us; 0: none yet
  int probes_done = 0;

  bool make_pair() {
    accord_unique_id_t id;
    if (!new_id(&id)) return false;
    if (rank > 1) return true;
    setenv("ACCORD_ALGO", "direct", 1);
    const accord_status_t s = accord_comm_init_rank(&pair, 2, id, rank);
    unsetenv("ACCORD_ALGO");
    return s == ACCORD_SUCCESS || fail("init of the probe's communicator (ranks 0 and 1)", nullptr);
  }

  // Mean us of an 8-byte all-reduce between ranks 0 and 1, the same on every rank; negative on
  // error. Ranks 2 and up wait in the all-reduce that shares the result, which also makes
  // *shared (if given) the largest of every rank's value, so decisions made on it agree.
  double probe(double* shared = nullptr) {
    // For tests: ALL_REDUCE_ALGOS_SLOW_PROBES (below) replaces the time, so a few calls do.
    const char* fake = std::getenv("ALL_REDUCE_ALGOS_SLOW_PROBES");
    double us = 0;
    if (pair != nullptr) {
      float v[2] = {1, 1}, r[2];
      const double secs =
          fake != nullptr ? local_time(pair, v, r, 2, 2, 10) : local_time(pair, v, r, 2, 100, 1000);
      if (secs < 0) return -1;
      us = secs * 1e6;
    }
    double mine[2] = {us, shared != nullptr ? *shared : 0}, all[2] = {0, 0};
    if (accord_all_reduce(mine, all, 2, ACCORD_FLOAT64, ACCORD_MAX, world, nullptr) !=
        ACCORD_SUCCESS)
      return fail("all_reduce of the probe's time", world), -1;
    if (shared != nullptr) *shared = all[1];
    // For tests: ALL_REDUCE_ALGOS_SLOW_PROBES=I,J,... reports probes I, J, ... (0: the first) as
    // 10 us and every other probe as 1 us, a slow state on demand (tests/bench/algos_probe.sh).
    // The measured time is dropped: scaling it instead (10x) left the outcome to the machine,
    // since a real probe can itself be 5x the best one (the first probe, cold, under ASan), and
    // then the faked slow probes were within twice the best and nothing was retaken.
    if (fake != nullptr) {
      const std::string list = std::string(",") + fake + ",";
      all[0] = list.find("," + std::to_string(probes_done) + ",") != std::string::npos ? 10 : 1;
    }
    ++probes_done;
    if (best_probe == 0 || all[0] < best_probe) best_probe = all[0];
    return all[0];
  }

  bool slow(double probe_us) const { return probe_us > 2 * best_probe; }

  // Probes every 50 ms until the probe is fast or `seconds` have passed; the last probe, or
  // negative on error. Every rank sees the same probes and the same time spent (the longest),
  // so all leave the loop together.
  double wait_for_fast_state(double seconds, double* waited) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double p = probe(&spent);  // spent: the longest of any rank's
      if (p < 0 || !slow(p) || spent >= seconds) {
        *waited += spent;
        return p;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  // One call with small integers (exact in any order); the number of wrong elements, all ranks.
  long validate(accord_comm_t comm, size_t count) {
    std::vector<float> in(count), out(count + 1, -1.0f);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((static_cast<size_t>(rank) + i) % 7);
    if (accord_all_reduce(in.data(), out.data(), count, ACCORD_FLOAT32, ACCORD_SUM, comm, nullptr) != ACCORD_SUCCESS)
      return fail("all_reduce", comm), -1;
    uint64_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += static_cast<float>((static_cast<size_t>(r) + i) % 7);
      wrong += out[i] != want;
    }
    wrong += out[count] != -1.0f;
    uint64_t total = 0;
    if (accord_all_reduce(&wrong, &total, 1, ACCORD_UINT64, ACCORD_SUM, world, nullptr) != ACCORD_SUCCESS)
      return fail("all_reduce of the check", world), -1;
    return static_cast<long>(total);
  }
};

int run(const Options& o) {
  Job job;
  // The job's own calls (ids, timings, checks) are tiny: direct, forced, so that with
  // ACCORD_LOG=tune:info only the tuner's communicator logs choices that are not forced.
  setenv("ACCORD_ALGO", "direct", 1);
  const accord_status_t init = accord_comm_init_from_env(&job.world);
  unsetenv("ACCORD_ALGO");
  if (init != ACCORD_SUCCESS) {
    std::fprintf(stderr, "init failed: %s\n", accord_last_error(nullptr));
    return 2;
  }
  accord_comm_rank(job.world, &job.rank);
  accord_comm_count(job.world, &job.n);
  std::vector<Candidate> cands;
  if (!parse_candidates(o.candidates, &cands)) {
    std::fprintf(stderr, "--candidates '%s': expected ALGO or ALGO/CHUNK, comma-separated\n", o.candidates.c_str());
    return 2;
  }
  if (o.tuner) cands.push_back(Candidate{"tuner", "", 0, nullptr});
  for (Candidate& c : cands)
    if (!job.make(&c, o.tune_file)) return 2;
  const bool print = job.rank == 0;
  if (print) {
    std::printf("# all_reduce_algos: %d ranks, float32 sum, median us of %d interleaved rounds (in and out of place)\n",
                job.n, o.rounds);
    std::printf("# %10s", "bytes");
    for (const Candidate& c : cands) std::printf(" %12s", c.name.c_str());
    std::printf("\n");
  }
  std::FILE* out = nullptr;
  if (print && !o.out.empty()) {
    out = std::fopen(o.out.c_str(), "w");
    if (out == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", o.out.c_str());
      return 2;
    }
    std::fprintf(out, "accord-tune 1\n# written by bench/all_reduce_algos: median of %d interleaved rounds\n"
                 "# all_reduce NRANKS ALGO CHUNK_BYTES BYTES TIME_US\n", o.rounds);
  }
  long wrong_total = 0;
  const size_t max_count = *std::max_element(o.sizes.begin(), o.sizes.end()) / 4;
  std::vector<float> in(max_count + 16, 1.0f), outbuf(max_count + 16);
  for (const size_t bytes : o.sizes)
    for (size_t k = 0; o.check && k < cands.size(); ++k) {
      long w = job.validate(cands[k].comm, bytes / 4);
      if (w < 0) return 2;
      if (w > 0 && print) std::printf("# %s: %ld wrong values at %zu bytes\n", cands[k].name.c_str(), w, bytes);
      wrong_total += w;
    }
  // samples[size][candidate]. Every round goes through every size, so a slow spell of the
  // machine spoils one round of a few sizes (dropped by the median), not every round of them.
  // probes[size][candidate]: the slower of the probes before and after each sample.
  std::vector<std::vector<std::vector<double>>> samples(o.sizes.size(), std::vector<std::vector<double>>(cands.size()));
  auto probes = samples;
  const bool probing = o.state_wait > 0 && job.n > 1;
  if (probing && !job.make_pair()) return 2;
  double last_probe = probing ? job.probe() : 0, waited = 0;
  int retaken = 0, gave_ups = 0;
  bool gave_up = false;  // waited --state-wait seconds in vain; no waiting until a fast probe
  if (last_probe < 0) return 2;
  for (int r = 0; r < o.rounds; ++r) {
    if (print) std::fprintf(stderr, "# round %d of %d\n", r + 1, o.rounds);
    for (size_t z = 0; z < o.sizes.size(); ++z) {
      const size_t count = o.sizes[z] / 4;
      // Milliseconds of calls per measurement even for the smallest sizes (20000 calls of 8 B
      // take 3 ms on 2 ranks), so that a burst of other work is a small part of one.
      const int iters = static_cast<int>(
          std::clamp<size_t>((128 << 20) / std::max<size_t>(o.sizes[z], 1), 3, 10000));
      const int warmup = std::max(2, iters / 10);
      for (size_t j = 0; j < cands.size(); ++j) {
        const size_t k = (j + static_cast<size_t>(r)) % cands.size();
        for (int attempt = 0;; ++attempt) {
          const double before = last_probe;
          // Out of place and in place, half the calls each: one sample is their mean, so every
          // sample mixes the two alike (in place does not stream and is faster at large sizes;
          // alternate rounds of one and the other made the median an edge between two clusters).
          double t = 0;
          for (const bool in_place : {r % 2 == 1, r % 2 == 0}) {
            const double one = job.time(cands[k].comm, in.data(),
                                        in_place ? in.data() : outbuf.data(), count, warmup, iters);
            if (one < 0) return 2;
            t += one / 2;
          }
          if (probing && (last_probe = job.probe()) < 0) return 2;
          const double state = std::max(before, last_probe);
          // A sample in the slow state is taken again when the fast one is back (Note
          // [Machine state probe]). If it does not come back in time, the sample stays, and
          // the job goes on without waiting until a probe is fast again.
          if (probing && job.slow(state) && attempt < 3 && !gave_up) {
            // Said once: a wait of up to --state-wait seconds with nothing printed looks hung.
            if (print && retaken == 0)
              std::fprintf(stderr,
                           "# probe %.3f us, over twice the best (%.3f): waiting up to %.0f s for "
                           "the fast state (--state-wait; later waits are not announced)\n",
                           state, job.best_probe, o.state_wait);
            ++retaken;
            if ((last_probe = job.wait_for_fast_state(o.state_wait, &waited)) < 0) return 2;
            if (!job.slow(last_probe)) continue;
            gave_up = true;
            if (print && gave_ups++ == 0)
              std::fprintf(stderr,
                           "# the machine stayed in a slow state for %.1f s (probe %.3f us, "
                           "best %.3f): going on without waiting until it is fast again; samples "
                           "taken meanwhile are left out of the medians where others are fast\n",
                           o.state_wait, last_probe, job.best_probe);
          }
          if (gave_up && !job.slow(last_probe)) gave_up = false;
          samples[z][k].push_back(t * 1e6);
          probes[z][k].push_back(state);
          break;
        }
      }
    }
  }
  const auto in_order = samples;  // for --samples, before the medians sort and filter them
  // The medians keep the samples whose probes were within twice the job's best probe, or all
  // of them if none was.
  int slow_kept = 0;
  for (size_t z = 0; probing && z < o.sizes.size(); ++z)
    for (size_t k = 0; k < cands.size(); ++k) {
      std::vector<double> fast;
      for (size_t i = 0; i < samples[z][k].size(); ++i)
        if (!job.slow(probes[z][k][i])) fast.push_back(samples[z][k][i]);
      if (fast.empty()) continue;
      slow_kept += static_cast<int>(samples[z][k].size() - fast.size());
      samples[z][k] = fast;
    }
  if (print && probing)
    std::printf(
        "# probe (8-byte all-reduce, ranks 0 and 1): best %.3f us; %d samples retaken in a slow "
        "state (probe over %.3f us), %.1f s waited for the fast state (gave up %d times), %d slow "
        "samples left out of medians\n",
        job.best_probe, retaken, 2 * job.best_probe, waited, gave_ups, slow_kept);
  for (size_t z = 0; print && z < o.sizes.size(); ++z) {
    std::printf("  %10zu", o.sizes[z]);
    std::vector<double> med(cands.size());
    for (size_t k = 0; k < cands.size(); ++k) {
      std::vector<double>& v = samples[z][k];
      std::sort(v.begin(), v.end());
      med[k] = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
      std::printf(" %12.2f", med[k]);
    }
    std::printf("\n");
    for (size_t k = 0; o.samples && k < cands.size(); ++k) {
      std::printf("# %10zu %12s:", o.sizes[z], cands[k].name.c_str());
      for (size_t i = 0; i < in_order[z][k].size(); ++i)
        std::printf(probing ? " %.2f@%.3f" : " %.2f", in_order[z][k][i], probes[z][k][i]);
      std::printf("\n");
    }
    // A candidate listed twice ran on two communicators: the tune file gets the slower median
    // (Note [Interleaved calibration]). No chunk given: the default, the 256 KiB slot.
    for (size_t k = 0; out != nullptr && k < cands.size(); ++k) {
      const Candidate& c = cands[k];
      auto same = [&c](const Candidate& other) { return other.name == c.name; };
      if (c.algo.empty() || std::any_of(cands.begin(), cands.begin() + static_cast<long>(k), same)) continue;
      double worst = med[k];
      for (size_t j = k + 1; j < cands.size(); ++j)
        if (same(cands[j])) worst = std::max(worst, med[j]);
      std::fprintf(out, "all_reduce %d %s %zu %zu %.3f\n", job.n, c.algo.c_str(), c.chunk ? c.chunk : kDefaultChunk,
                   o.sizes[z], worst);
    }
  }
  if (out != nullptr) std::fclose(out);
  if (print) std::printf("# wrong values: %ld %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
  for (Candidate& c : cands) accord_comm_destroy(c.comm);
  if (job.pair != nullptr) accord_comm_destroy(job.pair);
  accord_comm_destroy(job.world);
  return wrong_total == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    usage();
    return 2;
  }
  return run(o);
}
