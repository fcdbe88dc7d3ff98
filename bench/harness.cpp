// The benchmark harness (see harness.hpp and bench/README.md).
//
// For each size: warm up, time `iters` calls between barriers, take the slowest rank's mean
// (what the job waits for), then validate one more call against values that are exact in
// any reduction order. busbw follows nccl-tests: algbw * 2(n-1)/n for all-reduce, (n-1)/n
// for reduce-scatter and all-gather, 1 for broadcast and reduce.
#include "harness.hpp"
#include "rank_threads.hpp"
#include "sizes.hpp"

#include <accord/accord.h>
#include <accord/accord_device.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "accord_config.h"
#if ACCORD_HAVE_MPI
#include <accord/accord_mpi.h>
#include <mpi.h>
#endif

namespace accord::bench {
namespace {

struct Options {
  size_t min_bytes = 32 << 20, max_bytes = 32 << 20, step_bytes = 1 << 20;
  double factor = 0;
  int iters = 20, warmup = 5, check = 1, root = 0, threads = 1, gpus = 1;
  double min_ms = 0;  // --min-ms: time at least this long per size (more calls than -n if needed)
  std::vector<accord_datatype_t> dtypes = {ACCORD_FLOAT32};
  std::vector<accord_red_op_t> ops = {ACCORD_SUM};
  bool compare_mpi = false, backend_mpi = false, show_plan = false;
  bool device = false;  // -g given: device buffers (accord_device.h), one stream per rank
  bool share_gpus = false;  // --share-gpus: -g N's ranks take GPUs r % (the GPUs there are)
};

const char* kCollNames[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"};
const char* kDtypeNames[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16"};
const char* kOpNames[] = {"sum", "prod", "max", "min", "avg"};

bool reduces(Coll c) { return c == Coll::kAllReduce || c == Coll::kReduceScatter || c == Coll::kReduce; }
bool rooted(Coll c) { return c == Coll::kBroadcast || c == Coll::kReduce; }
bool is_float(accord_datatype_t d) {
  return d == ACCORD_FLOAT16 || d == ACCORD_FLOAT32 || d == ACCORD_FLOAT64 || d == ACCORD_BFLOAT16;
}
bool is_signed(accord_datatype_t d) { return d != ACCORD_UINT8 && d != ACCORD_UINT32 && d != ACCORD_UINT64; }

double bus_factor(Coll c, int n) {
  switch (c) {
    case Coll::kAllReduce: return 2.0 * (n - 1) / n;
    case Coll::kReduceScatter:
    case Coll::kAllGather: return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

void usage(const char* prog) {
  std::printf(
      "usage: %s [options]   (flags as nccl-tests)\n"
      "  -b SIZE   smallest message in bytes (K/M/G suffixes; default 32M)\n"
      "  -e SIZE   largest message (default 32M)\n"
      "  -f F      multiply the size by F each step     -i SIZE  add SIZE each step (default 1M)\n"
      "  -n N      timed iterations per size (20)        -w N     warm-up iterations (5)\n"
      "  -c 0|1    check results (1)                     -r R     root for broadcast/reduce (0)\n"
      "  -d TYPE   int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double, or all\n"
      "  -o OP     sum prod max min avg, or all          -t N     N ranks as threads of this process\n"
      "  -g N      device buffers: N ranks of this process on GPUs 0..N-1 (1: one GPU a process)\n"
      "  --share-gpus        -g N with more ranks than GPUs: rank r on GPU r %% (GPUs there are)\n"
      "  -z        accepted, ignored\n"
      "  -M, --compare-mpi   also time MPI's collective on the same buffers (under mpirun)\n"
      "  --backend mpi       time MPI's collective instead of Accord's\n"
      "  --show-plan         print how every pair of ranks is connected\n"
      "  --min-ms MS         time each size for at least MS ms: more calls than -n where\n"
      "                      the warm-up shows they are short (every rank makes as many)\n"
      "Launch: under mpirun; or one process per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT;\n"
      "or alone (1 rank, or -t N).\n",
      prog);
}

bool parse_args(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&](const char** v) {
      if (i + 1 >= argc) return false;
      *v = argv[++i];
      return true;
    };
    const char* v = nullptr;
    if (a == "-h" || a == "--help") return usage(argv[0]), std::exit(0), true;
    if (a == "-M" || a == "--compare-mpi") { o->compare_mpi = true; continue; }
    if (a == "--show-plan") { o->show_plan = true; continue; }
    if (a == "--share-gpus") { o->share_gpus = true; continue; }
    if (a == "--min-ms") {
      if (!next(&v) || (o->min_ms = std::atof(v)) <= 0) return false;
      continue;
    }
    if (a == "--backend") {
      if (!next(&v) || (std::strcmp(v, "mpi") && std::strcmp(v, "accord"))) return false;
      o->backend_mpi = !std::strcmp(v, "mpi");
      continue;
    }
    if (a.size() != 2 || a[0] != '-' || !next(&v)) {
      std::fprintf(stderr, "unknown or incomplete option '%s'\n", a.c_str());
      return false;
    }
    bool ok = true;
    switch (a[1]) {
      case 'b': ok = parse_size(v, &o->min_bytes); break;
      case 'e': ok = parse_size(v, &o->max_bytes); break;
      case 'i': ok = parse_size(v, &o->step_bytes); break;
      case 'f': o->factor = std::atof(v), ok = o->factor > 1 || o->factor == 0; break;
      case 'n': o->iters = std::atoi(v), ok = o->iters > 0; break;
      case 'w': o->warmup = std::atoi(v), ok = o->warmup >= 0; break;
      case 'c': o->check = std::atoi(v); break;
      case 'r': o->root = std::atoi(v); break;
      case 't': o->threads = std::atoi(v), ok = o->threads > 0; break;
      case 'g': o->gpus = std::atoi(v), ok = o->gpus > 0, o->device = true; break;
      case 'z': case 'a': case 'm': case 'G': break;  // nccl-tests options with no meaning here
      case 'd': {
        o->dtypes.clear();
        for (int d = 0; d < ACCORD_NUM_DTYPES; ++d)
          if (!std::strcmp(v, "all") || !std::strcmp(v, kDtypeNames[d]) ||
              (!std::strcmp(v, "float16") && d == ACCORD_FLOAT16) || (!std::strcmp(v, "float32") && d == ACCORD_FLOAT32) ||
              (!std::strcmp(v, "float64") && d == ACCORD_FLOAT64))
            o->dtypes.push_back(static_cast<accord_datatype_t>(d));
        ok = !o->dtypes.empty();
        break;
      }
      case 'o': {
        o->ops.clear();
        for (int p = 0; p < ACCORD_NUM_OPS; ++p)
          if (!std::strcmp(v, "all") || !std::strcmp(v, kOpNames[p])) o->ops.push_back(static_cast<accord_red_op_t>(p));
        ok = !o->ops.empty();
        break;
      }
      default: ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "bad value '%s' for %s (see --help)\n", v, a.c_str());
      return false;
    }
  }
  if (o->min_bytes > o->max_bytes) {
    std::fprintf(stderr, "-b %zu is larger than -e %zu\n", o->min_bytes, o->max_bytes);
    return false;
  }
  return true;
}

// ---- exact data -----------------------------------------------------------------------------

template <typename T>
void put(void* buf, size_t i, T v) { std::memcpy(static_cast<char*>(buf) + i * sizeof(T), &v, sizeof(T)); }

void store(void* buf, size_t i, accord_datatype_t d, double v) {
  switch (d) {
    case ACCORD_INT8: put(buf, i, static_cast<int8_t>(v)); break;
    case ACCORD_UINT8: put(buf, i, static_cast<uint8_t>(v)); break;
    case ACCORD_INT32: put(buf, i, static_cast<int32_t>(v)); break;
    case ACCORD_UINT32: put(buf, i, static_cast<uint32_t>(v)); break;
    case ACCORD_INT64: put(buf, i, static_cast<int64_t>(v)); break;
    case ACCORD_UINT64: put(buf, i, static_cast<uint64_t>(v)); break;
    case ACCORD_FLOAT16: put(buf, i, static_cast<_Float16>(static_cast<float>(v))); break;
    case ACCORD_FLOAT32: put(buf, i, static_cast<float>(v)); break;
    case ACCORD_FLOAT64: put(buf, i, v); break;
    case ACCORD_BFLOAT16: {
      float f = static_cast<float>(v);  // round to nearest even, as the library does (avg results)
      uint32_t u;
      std::memcpy(&u, &f, 4);
      u += 0x7fff + ((u >> 16) & 1);
      put(buf, i, static_cast<uint16_t>(u >> 16));
      break;
    }
    default: break;
  }
}

// Small integers whose sums over up to 64 ranks stay exact in every type (bf16: 8 bits).
double value(accord_datatype_t d, accord_red_op_t op, int rank, int n, size_t i) {
  if (op == ACCORD_PROD) return i % static_cast<size_t>(n) == static_cast<size_t>(rank) ? 2 : 1;
  const bool narrow = d == ACCORD_INT8 || d == ACCORD_UINT8 || d == ACCORD_BFLOAT16;
  const int span = narrow ? 5 : 11;
  const int v = static_cast<int>((i * 7 + static_cast<size_t>(rank) * 3) % static_cast<size_t>(span));
  return is_signed(d) ? v - span / 2 : v;
}

double expected(accord_datatype_t d, accord_red_op_t op, int n, size_t i) {
  double acc = value(d, op, 0, n, i);
  for (int r = 1; r < n; ++r) {
    double v = value(d, op, r, n, i);
    if (op == ACCORD_SUM || op == ACCORD_AVG) acc += v;
    else if (op == ACCORD_PROD) acc *= v;
    else if (op == ACCORD_MAX) acc = std::max(acc, v);
    else acc = std::min(acc, v);
  }
  if (op == ACCORD_AVG) {
    if (d == ACCORD_FLOAT64) acc /= n;
    else if (is_float(d)) acc = static_cast<float>(acc) / static_cast<float>(n);
    else acc = std::trunc(acc / n);
  }
  return acc;
}

// ---- MPI ------------------------------------------------------------------------------------
#if ACCORD_HAVE_MPI
MPI_Datatype mpi_type(accord_datatype_t d) {
  switch (d) {
    case ACCORD_INT8: return MPI_INT8_T;
    case ACCORD_UINT8: return MPI_UINT8_T;
    case ACCORD_INT32: return MPI_INT32_T;
    case ACCORD_UINT32: return MPI_UINT32_T;
    case ACCORD_INT64: return MPI_INT64_T;
    case ACCORD_UINT64: return MPI_UINT64_T;
    case ACCORD_FLOAT32: return MPI_FLOAT;
    case ACCORD_FLOAT64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;  // no half types in MPI
  }
}
MPI_Op mpi_op(accord_red_op_t op) {
  switch (op) {
    case ACCORD_SUM: return MPI_SUM;
    case ACCORD_PROD: return MPI_PROD;
    case ACCORD_MAX: return MPI_MAX;
    case ACCORD_MIN: return MPI_MIN;
    default: return MPI_OP_NULL;  // MPI has no average
  }
}
#endif

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

// ---- one rank -------------------------------------------------------------------------------

struct Rank {
  Coll coll;
  const Options& o;
  accord_comm_t comm;
  int rank, n;
  bool use_mpi;  // MPI is initialised and spans the same ranks
  int device = -1;                  // -g: this rank's GPU; buffers are device memory
  // --share-gpus: another rank of this process is on this GPU, so this rank's allocations and
  // synchronous copies (which wait for the GPU, as cudaMalloc and cudaMemcpy do) must not
  // overlap a collective of the other rank that waits for this one: quiet() runs them while
  // every rank is between calls.
  bool shared_gpu = false;
  accord_stream_t stream = nullptr;
  // Device mode: device copies of the host buffers `in` and `out` (same sizes), so that a
  // pointer into a host buffer maps to the same offset of its device twin.
  char* d_in = nullptr;
  char* d_out = nullptr;
  const char* h_in = nullptr;
  const char* h_out = nullptr;
  size_t d_bytes = 0;
  size_t h_in_bytes = 0;

  bool on_device() const { return device >= 0; }
  // (Re)allocates the device twins of in and out and uploads both.
  bool upload(const std::vector<char>& in, const std::vector<char>& out) {
    if (!on_device()) return true;
    return quiet([&] { return upload_now(in, out); });
  }
  bool upload_now(const std::vector<char>& in, const std::vector<char>& out) {
    if (d_bytes < in.size() || d_bytes < out.size()) {
      // Allocated once, for the largest size: freeing device memory waits for every stream
      // (as cudaFree), and other ranks' streams wait for collectives this rank has not
      // called yet.
      if (d_in != nullptr) return fail("device buffers sized too small");
      d_bytes = std::max(std::max(in.size(), out.size()), o.max_bytes + 128);
      if (accord_device_alloc(reinterpret_cast<void**>(&d_in), d_bytes, device) != ACCORD_SUCCESS ||
          accord_device_alloc(reinterpret_cast<void**>(&d_out), d_bytes, device) != ACCORD_SUCCESS)
        return fail("accord_device_alloc");
    }
    h_in = in.data();
    h_out = out.data();
    h_in_bytes = in.size();
    return (accord_device_memcpy(d_in, in.data(), in.size()) == ACCORD_SUCCESS &&
            accord_device_memcpy(d_out, out.data(), out.size()) == ACCORD_SUCCESS) ||
           fail("accord_device_memcpy");
  }
  bool download(std::vector<char>& in, std::vector<char>& out) {
    if (!on_device()) return true;
    if (!sync()) return false;
    return quiet([&] { return download_now(in, out); });
  }
  bool download_now(std::vector<char>& in, std::vector<char>& out) {
    return (accord_device_memcpy(in.data(), d_in, in.size()) == ACCORD_SUCCESS &&
            accord_device_memcpy(out.data(), d_out, out.size()) == ACCORD_SUCCESS) ||
           fail("accord_device_memcpy");
  }
  template <typename T>
  T* dev(T* host) const {
    if (!on_device() || host == nullptr) return host;
    const char* p = reinterpret_cast<const char*>(host);
    if (p >= h_in && p < h_in + h_in_bytes) return reinterpret_cast<T*>(d_in + (p - h_in));
    return reinterpret_cast<T*>(d_out + (p - h_out));
  }
  // Device mode: waits for the rank's stream (before any host-memory call on the communicator).
  bool sync() { return !on_device() || accord_stream_synchronize(stream) == ACCORD_SUCCESS || fail("stream"); }
  // Runs `fn` (this rank's calls that wait for the GPU); on a shared GPU only when every rank's
  // stream is idle, and no rank goes on to a collective before every rank has run its own.
  template <class Fn>
  bool quiet(Fn fn) {
    if (!shared_gpu) return fn();
    if (!sync() || !barrier()) return false;
    const bool ok = fn();
    return barrier() && ok;
  }

  bool fail(const char* what) {
    std::fprintf(stderr, "rank %d: %s failed: %s\n", rank, what, accord_last_error(comm));
    return false;
  }

  // One collective call. `mpi` picks MPI's implementation.
  bool call(const void* send, void* recv, size_t count, accord_datatype_t d, accord_red_op_t op, bool mpi) {
#if ACCORD_HAVE_MPI
    if (mpi) {
      const int c = static_cast<int>(count);
      const void* s = send == recv && coll == Coll::kAllReduce ? MPI_IN_PLACE : send;
      switch (coll) {
        case Coll::kAllReduce: return MPI_Allreduce(s, recv, c, mpi_type(d), mpi_op(op), MPI_COMM_WORLD) == MPI_SUCCESS;
        case Coll::kReduceScatter:
          return MPI_Reduce_scatter_block(send, recv, c, mpi_type(d), mpi_op(op), MPI_COMM_WORLD) == MPI_SUCCESS;
        case Coll::kAllGather:
          return MPI_Allgather(send, c, mpi_type(d), recv, c, mpi_type(d), MPI_COMM_WORLD) == MPI_SUCCESS;
        case Coll::kBroadcast:
          if (rank == o.root && send != recv) std::memcpy(recv, send, count * accord_dtype_size(d));
          return MPI_Bcast(recv, c, mpi_type(d), o.root, MPI_COMM_WORLD) == MPI_SUCCESS;
        case Coll::kReduce:
          return MPI_Reduce(send == recv && rank == o.root ? MPI_IN_PLACE : send, recv, c, mpi_type(d), mpi_op(op),
                            o.root, MPI_COMM_WORLD) == MPI_SUCCESS;
      }
    }
#else
    (void)mpi;
#endif
    accord_status_t s = ACCORD_SUCCESS;
    send = dev(send);
    recv = dev(recv);
    switch (coll) {
      case Coll::kAllReduce: s = accord_all_reduce(send, recv, count, d, op, comm, stream); break;
      case Coll::kReduceScatter: s = accord_reduce_scatter(send, recv, count, d, op, comm, stream); break;
      case Coll::kAllGather: s = accord_all_gather(send, recv, count, d, comm, stream); break;
      case Coll::kBroadcast: s = accord_broadcast(send, recv, count, d, o.root, comm, stream); break;
      case Coll::kReduce: s = accord_reduce(send, recv, count, d, op, o.root, comm, stream); break;
    }
    return s == ACCORD_SUCCESS || fail(kCollNames[static_cast<int>(coll)]);
  }

  bool barrier() { return accord_barrier(comm, nullptr) == ACCORD_SUCCESS || fail("barrier"); }

  double max_over_ranks(double v) {
    double out = v;
    accord_all_reduce(&v, &out, 1, ACCORD_FLOAT64, ACCORD_MAX, comm, nullptr);
    return out;
  }

  // Context switches of the calling thread during the timed calls, per call, the most of any
  // rank (getrusage RUSAGE_THREAD). --compare-mpi prints them for every round, so that a run
  // that collapsed says whether its ranks slept (voluntary) or lost their cores (involuntary).
  struct Switches {
    double voluntary = 0, involuntary = 0;
    int calls = 0;        // how many calls the round timed
    double steal_ms = 0;  // time the hypervisor ran something else on this machine's CPUs
    // When the timed calls began (CLOCK_MONOTONIC, s) and how long they took (s), rank 0's
    // clock: bench/cpu_trace.py samples the CPUs on the same clock, so a slow round can be
    // matched with what the machine did meanwhile.
    double start_s = 0, span_s = 0;
  };
  // The machine's steal time so far (/proc/stat, all CPUs, in clock ticks: 10 ms here), in
  // ms; -1 where unknown. On a VM a vCPU the host takes away shows up only here: its tasks
  // are neither switched out nor sleeping.
  static double steal_ms() {
    FILE* f = std::fopen("/proc/stat", "r");
    if (f == nullptr) return -1;
    unsigned long long v[8] = {};
    const int got = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                                &v[4], &v[5], &v[6], &v[7]);
    std::fclose(f);
    const long hz = sysconf(_SC_CLK_TCK);
    return got == 8 && hz > 0 ? static_cast<double>(v[7]) * 1000.0 / static_cast<double>(hz) : -1;
  }
  static void thread_switches(long* voluntary, long* involuntary) {
    rusage u{};
    getrusage(RUSAGE_THREAD, &u);
    *voluntary = u.ru_nvcsw;
    *involuntary = u.ru_nivcsw;
  }

  // Mean seconds per call, slowest rank; negative on error. `sw`: also the context switches.
  double time_calls(const void* send, void* recv, size_t count, accord_datatype_t d, accord_red_op_t op, bool mpi,
                    Switches* sw = nullptr) {
    auto w0 = std::chrono::steady_clock::now();
    std::vector<double> warm_calls;  // seconds of each host warm-up call
    for (int i = 0; i < o.warmup; ++i) {
      const auto c0 = std::chrono::steady_clock::now();
      if (!call(send, recv, count, d, op, mpi)) return -1;
      warm_calls.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count());
    }
    if (!sync()) return -1;
    int iters = o.iters;
    if (o.min_ms > 0 && o.warmup > 0) {
      // Note [Timing across scheduler ticks]: beside a busy process a rank loses its core for
      // whole scheduler ticks (4 ms here), so a 13 ms measurement (20 calls of 1 MiB) says more
      // about how many ticks fell into it than about the library. The slowest rank's warm-up
      // sets one count for all ranks: its median call on host buffers, not its mean. A stall
      // of tens of ms in the warm-up (a rank that lost its core to a system task, seen in a
      // scheduler trace on 2026-11-27) made the mean call 4 ms at 16 B, so the round timed 25
      // calls instead of 200000, and the stall, which took most of those 25 calls' time too,
      // was reported as 4 ms a call, for Accord and Open MPI alike (bench/NOTES-2026-11.md, "Busy
      // collapses at 16 B"). Device calls return before they finish: their mean it is.
      std::sort(warm_calls.begin(), warm_calls.end());
      const double mean = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count() / o.warmup;
      const double per_call = max_over_ranks(on_device() ? mean : warm_calls[warm_calls.size() / 2]);
      const double want = std::min(1e7, std::ceil(o.min_ms / 1e3 / std::max(per_call, 1e-9)));
      iters = std::max(iters, static_cast<int>(want));
    }
    if (!barrier()) return -1;
    long v0 = 0, i0 = 0, v1 = 0, i1 = 0;
    double steal0 = 0;
    if (sw != nullptr) {
      thread_switches(&v0, &i0);
      steal0 = steal_ms();
    }
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i)
      if (!call(send, recv, count, d, op, mpi)) return -1;
    if (!sync()) return -1;
    if (o.min_ms > 0) {
      // The warm-up only estimates how many calls fill min_ms: the round goes on until it has
      // (every rank the same calls: they agree on the slowest rank's elapsed time). Before,
      // 5 warm-up calls that happened to be slow made a round of 16 B beside a busy process
      // last 1-3 ms instead of 100, all within a stretch where both ranks had their cores,
      // and that library's round read 0.15 us against the other's 0.20 over 100 ms
      // (bench/NOTES-2026-11.md, "Rounds of equal length").
      const double want_s = o.min_ms / 1e3;
      for (;;) {
        const double elapsed =
            max_over_ranks(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        if (elapsed >= want_s || iters >= 10000000) break;
        const double more = std::ceil((want_s - elapsed) / std::max(elapsed / iters, 1e-9));
        const int extra = static_cast<int>(std::clamp(more, 1.0, 1e7 - iters));
        for (int i = 0; i < extra; ++i)
          if (!call(send, recv, count, d, op, mpi)) return -1;
        if (!sync()) return -1;
        iters += extra;
      }
    }
    const auto t1 = std::chrono::steady_clock::now();
    double secs = std::chrono::duration<double>(t1 - t0).count() / iters;
    if (sw != nullptr) {
      sw->start_s = std::chrono::duration<double>(t0.time_since_epoch()).count();
      sw->span_s = std::chrono::duration<double>(t1 - t0).count();
      thread_switches(&v1, &i1);
      sw->voluntary = max_over_ranks(static_cast<double>(v1 - v0) / iters);
      sw->involuntary = max_over_ranks(static_cast<double>(i1 - i0) / iters);
      sw->calls = iters;
      const double steal1 = steal_ms();
      sw->steal_ms = max_over_ranks(steal0 >= 0 && steal1 >= 0 ? steal1 - steal0 : -1);
    }
    return max_over_ranks(secs);
  }

  // Layout: per-rank counts of input and output for a total of `count` elements.
  void layout(size_t count, size_t* in, size_t* out, size_t* call_count) const {
    const size_t nn = static_cast<size_t>(n);
    *in = *out = *call_count = count;
    if (coll == Coll::kReduceScatter) *out = *call_count = count / nn;
    if (coll == Coll::kAllGather) *in = *call_count = count / nn;
  }

  // Number of wrong elements after one validated call.
  long validate(std::vector<char>& in, std::vector<char>& out, size_t count, accord_datatype_t d, accord_red_op_t op,
                bool in_place) {
    size_t in_n, out_n, cc;
    layout(count, &in_n, &out_n, &cc);
    const size_t es = accord_dtype_size(d);
    const bool check_out = coll != Coll::kReduce || rank == o.root;
    // Inputs: reductions use value(); gathers and broadcasts a rank-tagged pattern.
    auto source = [&](int r, size_t i) {
      if (coll == Coll::kAllGather || coll == Coll::kBroadcast) return static_cast<double>((r * 7 + static_cast<int>(i % 13)) % 16);
      return value(d, op, r, n, i);
    };
    char* send = in.data();
    char* recv = out.data();
    if (coll == Coll::kAllGather) {
      for (size_t i = 0; i < in_n; ++i) store(send, i, d, source(rank, i));
      if (in_place) {
        recv = in.data();
        send = recv + static_cast<size_t>(rank) * in_n * es;
        for (size_t i = 0; i < in_n; ++i) store(send, i, d, source(rank, i));
      }
    } else {
      for (size_t i = 0; i < in_n; ++i) store(send, i, d, source(rank, i));
      if (in_place) recv = coll == Coll::kReduceScatter ? send + static_cast<size_t>(rank) * out_n * es : send;
    }
    if (!upload(in, out) || !call(send, recv, cc, d, op, false) || !download(in, out)) return -1;
    if (!check_out) return 0;
    std::vector<char> want(out_n * es + 1);
    for (size_t i = 0; i < out_n; ++i) {
      double w;
      switch (coll) {
        case Coll::kAllGather: w = source(static_cast<int>(i / in_n), i % in_n); break;
        case Coll::kBroadcast: w = source(o.root, i); break;
        case Coll::kReduceScatter: w = expected(d, op, n, static_cast<size_t>(rank) * out_n + i); break;
        default: w = expected(d, op, n, i);
      }
      store(want.data(), i, d, w);
    }
    long wrong = 0;
    for (size_t i = 0; i < out_n; ++i) wrong += std::memcmp(recv + i * es, want.data() + i * es, es) != 0;
    return wrong;
  }

  int run() {
    const bool print = rank == 0;
    const bool rs_ag = coll == Coll::kReduceScatter || coll == Coll::kAllGather;
    if (print) {
      std::printf("# Accord benchmark: %s_perf\n#\n", kCollNames[static_cast<int>(coll)]);
      std::printf("# nranks %d minBytes %zu maxBytes %zu step: %g(%s) warmup iters: %d iters: %d validation: %d%s\n",
                  n, o.min_bytes, o.max_bytes, o.factor > 0 ? o.factor : static_cast<double>(o.step_bytes),
                  o.factor > 0 ? "factor" : "bytes", o.warmup, o.iters, o.check,
                  o.backend_mpi ? " backend: mpi" : "");
    }
    char host[64] = "?";
    gethostname(host, sizeof host - 1);
    for (int r = 0; r < n; ++r) {
      if (r == rank) std::printf("#  Rank %2d Pid %6d on %s\n", rank, static_cast<int>(getpid()), host);
      std::fflush(stdout);
      if (!barrier()) return 2;
    }
    if (o.show_plan && print) {
      size_t len = 0;
      accord_comm_plan(comm, nullptr, &len);
      std::string plan(len, '\0');
      accord_comm_plan(comm, plan.data(), &len);
      std::printf("#\n# Plan:\n");
      size_t start = 0;
      while (start < plan.size() && plan[start] != '\0') {
        size_t nl = plan.find('\n', start);
        std::printf("#   %s\n", plan.substr(start, nl - start).c_str());
        start = nl + 1;
      }
    }
    if (print) {
      std::printf("#\n#%75s%32s%s\n", "out-of-place", "in-place", o.compare_mpi ? "           Open MPI (out-of-place)" : "");
      std::printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s%s\n", "size", "count", "type", "redop", "root",
                  "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong",
                  o.compare_mpi ? "      time   busbw  ratio" : "");
      std::printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s%s\n", "(B)", "(elements)", "", "", "", "(us)",
                  "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", o.compare_mpi ? "      (us)  (GB/s)" : "");
    }
    double bw_sum = 0;
    int bw_count = 0;
    long wrong_total = 0;
    std::vector<std::string> ratios;
    for (accord_datatype_t d : o.dtypes) {
      for (accord_red_op_t op : reduces(coll) ? o.ops : std::vector<accord_red_op_t>{ACCORD_SUM}) {
#if ACCORD_HAVE_MPI
        const bool mpi_ok = use_mpi && mpi_type(d) != MPI_DATATYPE_NULL && (!reduces(coll) || mpi_op(op) != MPI_OP_NULL);
#else
        const bool mpi_ok = false;
#endif
        if (o.backend_mpi && !mpi_ok) {
          if (print) std::printf("# %s %s: MPI has no equivalent; skipped\n", kDtypeNames[d], kOpNames[op]);
          continue;
        }
        const size_t es = accord_dtype_size(d);
        for (size_t bytes = o.min_bytes; bytes <= o.max_bytes;
             bytes = o.factor > 0 ? std::max(bytes + 1, static_cast<size_t>(bytes * o.factor)) : bytes + o.step_bytes) {
          size_t count = bytes / es;
          if (rs_ag) count = count / static_cast<size_t>(n) * static_cast<size_t>(n);
          size_t in_n, out_n, cc;
          layout(count, &in_n, &out_n, &cc);
          std::vector<char> in(std::max(in_n, out_n) * es + 64), out(std::max(in_n, out_n) * es + 64);
          for (size_t i = 0; i < in_n; ++i) store(in.data(), i, d, value(d, op, rank, n, i));
          if (!upload(in, out)) return 2;
          const double S = static_cast<double>(count * es);
          double t[2];
          long wrong[2] = {0, 0};
          double t_mpi = -1;
          double rounds_a[3] = {0, 0, 0}, rounds_m[3] = {0, 0, 0};  // in the order run
          Switches sw_a[3], sw_m[3];
          for (int place = 0; place < 2; ++place) {
            char* send = in.data();
            char* recv = place == 0 ? out.data() : in.data();
            if (place == 1 && coll == Coll::kReduceScatter) recv = in.data() + static_cast<size_t>(rank) * out_n * es;
            if (place == 1 && coll == Coll::kAllGather) send = in.data() + static_cast<size_t>(rank) * in_n * es;
            if (o.compare_mpi && mpi_ok && place == 0) {
              // Alternate the two libraries on the same buffers; medians of 3 rounds.
              double ta[3], tm[3];
              for (int k = 0; k < 3; ++k) {
                ta[k] = rounds_a[k] = time_calls(send, recv, cc, d, op, false, &sw_a[k]);
                tm[k] = rounds_m[k] = time_calls(send, recv, cc, d, op, true, &sw_m[k]);
                if (ta[k] < 0 || tm[k] < 0) return 2;
              }
              std::sort(ta, ta + 3);
              std::sort(tm, tm + 3);
              t[place] = ta[1];
              t_mpi = tm[1];
            } else {
              t[place] = time_calls(send, recv, cc, d, op, o.backend_mpi);
              if (t[place] < 0) return 2;
            }
            if (o.check) {
              long w = validate(in, out, count, d, op, place == 1);
              if (w < 0) return 2;
              uint64_t wl = static_cast<uint64_t>(w), sum = 0;
              accord_all_reduce(&wl, &sum, 1, ACCORD_UINT64, ACCORD_SUM, comm, nullptr);
              wrong[place] = static_cast<long>(sum);
              wrong_total += wrong[place];
              for (size_t i = 0; i < in_n; ++i) store(in.data(), i, d, value(d, op, rank, n, i));
              if (!upload(in, out)) return 2;
            }
          }
          if (print) {
            char line[512];
            int len = std::snprintf(line, sizeof line, "  %10zu %12zu %8s %6s %6d", count * es, count, kDtypeNames[d],
                                    reduces(coll) ? kOpNames[op] : "none", rooted(coll) ? o.root : -1);
            for (int place = 0; place < 2; ++place) {
              const double algbw = S / t[place] / 1e9, busbw = algbw * bus_factor(coll, n);
              bw_sum += busbw;
              ++bw_count;
              char w[16];
              if (o.check) std::snprintf(w, sizeof w, "%ld", wrong[place]);
              else std::snprintf(w, sizeof w, "N/A");
              len += std::snprintf(line + len, sizeof line - static_cast<size_t>(len), " %9.2f %7.2f %7.2f %6s",
                                   t[place] * 1e6, algbw, busbw, w);
            }
            if (o.compare_mpi) {
              if (t_mpi > 0) {
                const double mbus = S / t_mpi / 1e9 * bus_factor(coll, n);
                const double abus = S / t[0] / 1e9 * bus_factor(coll, n);
                std::snprintf(line + len, sizeof line - static_cast<size_t>(len), " %9.2f %7.2f %6.2f", t_mpi * 1e6, mbus,
                              abus / mbus);
                char r[64];
                std::snprintf(r, sizeof r, "%zu:%.2f", count * es, abus / mbus);
                ratios.push_back(r);
              } else {
                std::snprintf(line + len, sizeof line - static_cast<size_t>(len), " %9s %7s %6s", "-", "-", "-");
              }
            }
            std::printf("%s\n", line);
            if (o.compare_mpi && t_mpi > 0) {
              // The three rounds behind the medians, their context switches per call
              // (voluntary/involuntary, the most of any rank), how many calls each timed and
              // the machine's steal time meanwhile:
              // bench/compare.sh shows these lines for every size a run lost.
              std::printf("#   %zu B rounds: Accord", count * es);
              for (int k = 0; k < 3; ++k)
                std::printf(" %.2f us (%.3f/%.3f x%d, steal %.0f ms, at %.3f+%.3f s)", rounds_a[k] * 1e6,
                            sw_a[k].voluntary, sw_a[k].involuntary, sw_a[k].calls, sw_a[k].steal_ms, sw_a[k].start_s,
                            sw_a[k].span_s);
              std::printf(", Open MPI");
              for (int k = 0; k < 3; ++k)
                std::printf(" %.2f us (%.3f/%.3f x%d, steal %.0f ms, at %.3f+%.3f s)", rounds_m[k] * 1e6,
                            sw_m[k].voluntary, sw_m[k].involuntary, sw_m[k].calls, sw_m[k].steal_ms, sw_m[k].start_s,
                            sw_m[k].span_s);
              std::printf("\n");
            }
            std::fflush(stdout);
          }
          if (bytes == o.max_bytes || (o.factor == 0 && o.step_bytes == 0)) break;
        }
      }
    }
    if (print) {
      std::printf("# Out of bounds values : %ld %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
      std::printf("# Avg bus bandwidth    : %g\n", bw_count ? bw_sum / bw_count : 0.0);
      if (!ratios.empty()) {
        std::printf("# Accord / Open MPI busbw ratio by size:");
        for (const auto& r : ratios) std::printf(" %s", r.c_str());
        std::printf("\n");
      }
      std::printf("#\n# Collective test concluded: %s_perf\n", kCollNames[static_cast<int>(coll)]);
    }
    if (on_device()) {
      accord_device_free(d_in);
      accord_device_free(d_out);
    }
    return wrong_total == 0 ? 0 : 1;
  }
};

}  // namespace

int run_main(Coll coll, int argc, char** argv) {
  Options o;
  if (!parse_args(argc, argv, &o)) return 2;
  if (o.share_gpus && !(o.device && o.gpus > 1)) {
    std::fprintf(stderr, "--share-gpus puts -g N's ranks on fewer GPUs: give -g N with N > 1\n");
    return 2;
  }
  if (o.device && o.threads > 1) {
    std::fprintf(stderr, "-g N runs N GPUs as ranks of this process; -t N runs host-memory ranks: pick one\n");
    return 2;
  }
  bool use_mpi = false;
#if ACCORD_HAVE_MPI
  if (launched_by_mpi()) {
    MPI_Init(&argc, &argv);
    use_mpi = true;
  }
#endif
  if ((o.compare_mpi || o.backend_mpi) && !use_mpi) {
    std::fprintf(stderr, "--compare-mpi and --backend mpi need a build with MPI and a launch under mpirun\n");
    return 2;
  }
  if (o.threads > 1 && use_mpi) {
    std::fprintf(stderr, "-t N (ranks as threads) cannot be combined with mpirun here\n");
    return 2;
  }
  int code = 0;
  if (o.device && !use_mpi && o.gpus > 1) {
    // One process, one rank per GPU (accord_comm_init_all), each driven by its own thread.
    int ngpus = 0;
    accord_device_count(&ngpus);
    if (ngpus == 0 || (ngpus < o.gpus && !o.share_gpus)) {
      std::fprintf(stderr, "-g %d: only %d GPUs (%s); --share-gpus puts several ranks on one, or set "
                   "ACCORD_SIM_TOPO=FILE for simulated ones\n", o.gpus, ngpus,
                   ngpus ? "fewer than asked" : accord_last_error(nullptr));
      return 2;
    }
    std::vector<accord_comm_t> comms(static_cast<size_t>(o.gpus));
    std::vector<int> devs(static_cast<size_t>(o.gpus));
    for (int g = 0; g < o.gpus; ++g) devs[static_cast<size_t>(g)] = g % ngpus;
    if (accord_comm_init_all(comms.data(), o.gpus, devs.data()) != ACCORD_SUCCESS) {
      std::fprintf(stderr, "accord_comm_init_all: %s\n", accord_last_error(nullptr));
      return 2;
    }
    std::vector<int> codes(static_cast<size_t>(o.gpus));
    std::vector<std::thread> threads;
    for (int r = 0; r < o.gpus; ++r)
      threads.emplace_back([&, r] {
        Rank rk{coll, o, comms[static_cast<size_t>(r)], r, o.gpus, false};
        rk.device = devs[static_cast<size_t>(r)];
        rk.shared_gpu = std::count(devs.begin(), devs.end(), rk.device) > 1;
        if (accord_stream_create(&rk.stream, rk.device) != ACCORD_SUCCESS) {
          std::fprintf(stderr, "rank %d: accord_stream_create: %s\n", r, accord_last_error(nullptr));
          codes[static_cast<size_t>(r)] = 2;
          return;
        }
        codes[static_cast<size_t>(r)] = rk.run();
        accord_stream_destroy(rk.stream);
      });
    for (auto& t : threads) t.join();
    for (accord_comm_t c : comms) accord_comm_destroy(c);
    for (int c : codes) code = std::max(code, c);
  } else if (o.threads > 1) {
    code = run_rank_threads(o.threads, "", [&](accord_comm_t comm, int r) {
      Rank rk{coll, o, comm, r, o.threads, false};
      return rk.run();
    });
  } else {
    // -g 1: one GPU per rank, the launcher's local rank modulo the GPUs unless ACCORD_DEVICE
    // says; told to the communicator through ACCORD_DEVICE so that both agree.
    int device = -1;
    if (o.device) {
      int ngpus = 0;
      accord_device_count(&ngpus);
      if (ngpus == 0) {
        std::fprintf(stderr, "-g 1 needs a GPU (set ACCORD_SIM_TOPO=FILE for simulated ones)\n");
        return 2;
      }
      const char* env = std::getenv("ACCORD_DEVICE");
      const char* lr = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
      if (lr == nullptr) lr = std::getenv("LOCAL_RANK");
      if (lr == nullptr) lr = std::getenv("RANK");
      device = env ? std::atoi(env) : (lr ? std::atoi(lr) : 0) % ngpus;
      setenv("ACCORD_DEVICE", std::to_string(device).c_str(), 1);
    }
    accord_comm_t comm = nullptr;
    accord_status_t s;
#if ACCORD_HAVE_MPI
    s = use_mpi ? accord_comm_init_mpi(&comm, MPI_COMM_WORLD) : accord_comm_init_from_env(&comm);
#else
    s = accord_comm_init_from_env(&comm);
#endif
    if (s != ACCORD_SUCCESS) {
      std::fprintf(stderr, "init failed: %s\n", accord_last_error(nullptr));
      return 2;
    }
    int rank = 0, n = 1;
    accord_comm_rank(comm, &rank);
    accord_comm_count(comm, &n);
    if (rooted(coll) && (o.root < 0 || o.root >= n)) {
      std::fprintf(stderr, "-r %d is not a rank (0..%d)\n", o.root, n - 1);
      return 2;
    }
    Rank rk{coll, o, comm, rank, n, use_mpi};
    if (o.device) {
      rk.device = device;
      if (accord_stream_create(&rk.stream, rk.device) != ACCORD_SUCCESS) {
        std::fprintf(stderr, "rank %d: accord_stream_create: %s\n", rank, accord_last_error(nullptr));
        return 2;
      }
    }
    code = rk.run();
    if (rk.stream) accord_stream_destroy(rk.stream);
    accord_comm_destroy(comm);
  }
#if ACCORD_HAVE_MPI
  if (use_mpi) MPI_Finalize();
#endif
  return code;
}

}  // namespace accord::bench
