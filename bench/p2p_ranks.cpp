// p2p_bandwidth, rank pairs on host memory (see p2p_bandwidth.hpp).
//
// Every rank walks the ordered pairs (s -> d) in the same order; s and d time the pair through
// the communicator's host channels (Communicator::links(): acquire/post on the sender,
// wait/release on the receiver; a message larger than a slot is cut into slots), the others go
// straight to the all-reduce that closes the pair, which also carries the results to rank 0.
// Bandwidth: s copies `size` bytes from its buffer into the slots, d copies them out into its
// own buffer (as a collective's copy would) and answers with -l bytes once all arrived; size /
// median time from s's first slot to the answer. Latency: median round trip of -l bytes / 2.
// No topology predicts host pairs, so the prediction is "-" and they are never flagged.
#include <accord/accord.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "accord_config.h"
#include "api/handles.hpp"
#include "bench/p2p_bandwidth.hpp"
#include "bench/rank_threads.hpp"
#include "collectives/executor.hpp"
#include "core/settings.hpp"
#include "core/status.hpp"
#include "transport/channel.hpp"
#include "transport/wait.hpp"
#if ACCORD_HAVE_MPI
#include <accord/accord_mpi.h>
#include <mpi.h>
#endif

namespace accord::bench::p2p {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kTag = 0x50325042;  // "P2PB": every p2p_bandwidth message
// Transports a channel may name; a pair's route travels to rank 0 as its index + 1.
const char* const kTransports[] = {"shm", "tcp", "p2p", "ipc", "host-staged"};
constexpr int kNumTransports = 5;

uint8_t pattern(int rank, size_t i) { return static_cast<uint8_t>((i * 31 + static_cast<size_t>(rank) * 17 + 1) >> 2); }

class RankBench {
 public:
  RankBench(const Options& o, accord_comm_t comm, int rank, int n, int64_t timeout_ms)
      : o_(o), comm_(comm), rank_(rank), n_(n), timeout_ms_(timeout_ms), links_(comm->impl->links()) {}

  int run();

 private:
  WaitContext ctx(int peer) const {
    WaitContext c;
    c.deadline = Deadline::after_ms(timeout_ms_);
    c.self_rank = rank_;
    c.peer_rank = peer;
    c.peer_pidfd = links_.pidfd[static_cast<size_t>(peer)];
    c.pidfds = links_.pidfd.data();
    c.nranks = static_cast<int>(links_.pidfd.size());
    c.death_notes = links_.death_notes;
    c.operation = "p2p_bandwidth";
    return c;
  }

  // `bytes` to peer, in as many slots as it takes.
  Status send(int peer, const uint8_t* data, size_t bytes) {
    SendChannel* ch = links_.send[static_cast<size_t>(peer)];
    const size_t slot_max = ch->max_bytes();
    size_t off = 0;
    do {
      const size_t len = std::min(slot_max, bytes - off);
      void* slot = nullptr;
      ACCORD_TRY(ch->acquire(len, &slot, ctx(peer)));
      std::memcpy(slot, data + off, len);
      ch->post(len, kTag);
      off += len;
    } while (off < bytes);
    return Status();
  }

  Status recv(int peer, uint8_t* out, size_t bytes) {
    RecvChannel* ch = links_.recv[static_cast<size_t>(peer)];
    const size_t slot_max = links_.send[static_cast<size_t>(peer)]->max_bytes();
    size_t off = 0;
    do {
      const size_t want = std::min(slot_max, bytes - off);
      const void* data = nullptr;
      size_t got = 0;
      uint32_t tag = 0;
      ACCORD_TRY(ch->wait(&data, &got, &tag, ctx(peer)));
      if (tag != kTag || got != want) {
        ch->release();
        return error(ACCORD_ERR_MISMATCH,
                     "rank %d: p2p_bandwidth expected %zu bytes (tag 0x%x) from rank %d but got %zu (tag 0x%x); every "
                     "rank must run the same p2p_bandwidth command (same -b/-e/-f/-i/-l/-n/-w) and peers must use "
                     "equal slot sizes (ACCORD_SHM_SLOT_BYTES)",
                     rank_, want, kTag, peer, got, tag);
      }
      std::memcpy(out + off, data, got);
      ch->release();
      off += got;
    } while (off < bytes);
    return Status();
  }

  // s's side of pair (rank_ -> peer): vals = [_, latency_us, route, time_us per size].
  Status sender(int peer, std::vector<double>* vals) {
    std::vector<uint8_t> small(o_.lat_bytes);
    for (size_t si = 0; si < o_.sizes.size(); ++si) {
      const size_t size = o_.sizes[si];
      std::vector<double> t;
      for (int i = 0; i < o_.warmup + o_.iters; ++i) {
        const auto t0 = Clock::now();
        ACCORD_TRY(send(peer, src_.data(), size));
        ACCORD_TRY(recv(peer, small.data(), small.size()));
        if (i >= o_.warmup) t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      (*vals)[3 + si] = median(std::move(t)) * 1e6;
    }
    std::vector<double> rt;
    for (int i = 0; i < 5 + o_.lat_iters; ++i) {
      const auto t0 = Clock::now();
      ACCORD_TRY(send(peer, src_.data(), o_.lat_bytes));
      ACCORD_TRY(recv(peer, small.data(), small.size()));
      if (i >= 5) rt.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    (*vals)[1] = median(std::move(rt)) / 2 * 1e6;
    const char* name = links_.send[static_cast<size_t>(peer)]->name();
    for (int k = 0; k < kNumTransports; ++k)
      if (std::strcmp(name, kTransports[k]) == 0) (*vals)[2] = k + 1;
    return Status();
  }

  // d's side: vals[0] = wrong bytes after the largest size.
  Status receiver(int peer, std::vector<double>* vals) {
    std::vector<uint8_t> small(o_.lat_bytes);
    for (size_t size : o_.sizes)
      for (int i = 0; i < o_.warmup + o_.iters; ++i) {
        ACCORD_TRY(recv(peer, dst_.data(), size));
        ACCORD_TRY(send(peer, small.data(), small.size()));
      }
    if (o_.check) {
      size_t wrong = 0;
      for (size_t i = 0; i < o_.sizes.back(); ++i) wrong += dst_[i] != pattern(peer, i);
      (*vals)[0] = static_cast<double>(wrong);
      if (wrong)
        std::fprintf(stderr, "p2p_bandwidth: rank %d: %zu of %zu bytes from rank %d arrived wrong\n", rank_, wrong,
                     o_.sizes.back(), peer);
    }
    for (int i = 0; i < 5 + o_.lat_iters; ++i) {
      ACCORD_TRY(recv(peer, small.data(), small.size()));
      ACCORD_TRY(send(peer, small.data(), small.size()));
    }
    std::fill(dst_.begin(), dst_.end(), 0);
    return Status();
  }

  bool barrier() {
    if (accord_barrier(comm_, nullptr) == ACCORD_SUCCESS) return true;
    std::fprintf(stderr, "p2p_bandwidth: rank %d: barrier: %s\n", rank_, accord_last_error(comm_));
    return false;
  }

  const Options& o_;
  accord_comm_t comm_;
  int rank_, n_;
  int64_t timeout_ms_;
  const PeerLinks& links_;
  std::vector<uint8_t> src_, dst_;
};

int RankBench::run() {
  const size_t big = std::max(o_.sizes.back(), o_.lat_bytes);
  src_.resize(big);
  dst_.assign(big, 0);
  for (size_t i = 0; i < big; ++i) src_[i] = pattern(rank_, i);

  // Route names of every pair from the plan (the same text on every rank).
  size_t len = 0;
  accord_comm_plan(comm_, nullptr, &len);
  std::string plan(len, '\0');
  accord_comm_plan(comm_, plan.data(), &len);
  plan.resize(std::strlen(plan.c_str()));
  auto plan_line = [&](int a, int b) {
    const std::string key = format("pair %d-%d: ", std::min(a, b), std::max(a, b));
    const size_t at = plan.find(key);
    if (at == std::string::npos) return std::string();
    return plan.substr(at + key.size(), plan.find('\n', at) - at - key.size());
  };

  Context ctx;
  ctx.mode = "ranks";
  const bool print = rank_ == 0;
  if (print) {
    const SendChannel* ch = links_.send[1];
    ctx.notes.push_back(format("host memory, through the communicator's channels; a message larger than a slot (%s: "
                               "%zu bytes, ACCORD_SHM_SLOT_BYTES) is cut into slots",
                               ch->name(), ch->max_bytes()));
    ctx.notes.push_back(format("bandwidth: size / median time (%d timed after %d warm-ups) from the sender's first "
                               "slot to the receiver's %zu B answer; latency: median round trip of %zu B / 2 (%d "
                               "timed)",
                               o_.iters, o_.warmup, o_.lat_bytes, o_.lat_bytes, o_.lat_iters));
    ctx.notes.push_back("prediction: none for host pairs (printed '-', never flagged)");
    std::printf("# Accord benchmark: p2p_bandwidth, %d ranks, %d ordered pairs on host memory\n", n_, n_ * (n_ - 1));
    for (const std::string& line : ctx.notes) std::printf("# %s\n", line.c_str());
  }
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  for (int r = 0; r < n_; ++r) {
    if (r == rank_) std::printf("#  Rank %2d Pid %6d on %s\n", rank_, static_cast<int>(getpid()), host);
    std::fflush(stdout);
    if (!barrier()) return 2;
  }

  std::vector<PairResult> rows;
  long wrong_total = 0;
  const size_t nvals = 3 + o_.sizes.size();
  for (int s = 0; s < n_; ++s)
    for (int d = 0; d < n_; ++d) {
      if (s == d) continue;
      std::vector<double> vals(nvals, 0.0), sum(nvals, 0.0);
      Status st;
      if (rank_ == s) st = sender(d, &vals);
      if (rank_ == d) st = receiver(s, &vals);
      if (!st.ok()) {
        // The pair's channels are out of step now: stop, and let the others see this rank go.
        std::fprintf(stderr, "p2p_bandwidth: pair %d -> %d: %s\n", s, d, st.message().c_str());
        accord_comm_abort(comm_);
        return 2;
      }
      if (accord_all_reduce(vals.data(), sum.data(), nvals, ACCORD_FLOAT64, ACCORD_SUM, comm_, nullptr) !=
          ACCORD_SUCCESS) {
        std::fprintf(stderr, "p2p_bandwidth: rank %d: collecting the results of pair %d -> %d: %s\n", rank_, s, d,
                     accord_last_error(comm_));
        return 2;
      }
      wrong_total += static_cast<long>(sum[0]);
      if (!print) continue;
      PairResult r;
      r.src = s;
      r.dst = d;
      r.path = "-";
      const int k = static_cast<int>(sum[2]) - 1;
      r.route = k >= 0 && k < kNumTransports ? kTransports[k] : "?";
      const std::string line = plan_line(s, d);
      r.why = line.compare(0, r.route.size(), r.route) == 0
                  ? line
                  : format("host buffers use %s; the plan's line is for device buffers: %s", r.route.c_str(),
                           line.c_str());
      r.latency_us = sum[1];
      for (size_t si = 0; si < o_.sizes.size(); ++si) {
        r.time_us.push_back(sum[3 + si]);
        r.gbs.push_back(static_cast<double>(o_.sizes[si]) / (sum[3 + si] * 1e-6) / 1e9);
      }
      rows.push_back(std::move(r));
    }
  if (print) {
    if (o_.show_plan) {
      std::printf("#\n# Plan:\n");
      size_t start = 0;
      while (start < plan.size()) {
        const size_t nl = std::min(plan.find('\n', start), plan.size());
        std::printf("#   %s\n", plan.substr(start, nl - start).c_str());
        start = nl + 1;
      }
    }
    if (print_results(o_, ctx, rows) < 0) return 2;
  }
  return wrong_total ? 1 : 0;
}

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

}  // namespace

int run_ranks(const Options& o, int argc, char** argv) {
  Settings s;
  Status st = load_settings(&s);
  if (!st.ok()) {
    std::fprintf(stderr, "p2p_bandwidth: %s\n", st.message().c_str());
    return 2;
  }
  if (o.threads > 1)
    return run_rank_threads(o.threads, "p2p_bandwidth: ", [&](accord_comm_t comm, int r) {
      return RankBench(o, comm, r, o.threads, s.timeout_ms).run();
    });
  bool use_mpi = false;
  accord_comm_t comm = nullptr;
  accord_status_t init;
#if ACCORD_HAVE_MPI
  // Under mpirun, MPI carries the unique id, so ranks on several hosts find each other.
  use_mpi = launched_by_mpi();
  if (use_mpi) MPI_Init(&argc, &argv);
  init = use_mpi ? accord_comm_init_mpi(&comm, MPI_COMM_WORLD) : accord_comm_init_from_env(&comm);
#else
  (void)argc;
  (void)argv;
  init = accord_comm_init_from_env(&comm);
#endif
  int code = 2;
  if (init != ACCORD_SUCCESS) {
    std::fprintf(stderr, "p2p_bandwidth: init failed: %s\n", accord_last_error(nullptr));
  } else {
    int rank = 0, n = 1;
    accord_comm_rank(comm, &rank);
    accord_comm_count(comm, &n);
    code = RankBench(o, comm, rank, n, s.timeout_ms).run();
    accord_comm_destroy(comm);
  }
#if ACCORD_HAVE_MPI
  if (use_mpi) MPI_Finalize();
#endif
  return code;
}

}  // namespace accord::bench::p2p
