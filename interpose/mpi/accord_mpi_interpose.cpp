// libaccord_mpi.so: transparent MPI collective acceleration through the MPI profiling
// interface. Preloaded under mpirun (mpirun -x LD_PRELOAD=.../libaccord_mpi.so), it defines
// MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast and MPI_Reduce. A call
// whose arguments Accord can serve exactly (intra-communicator of 2+ ranks, built-in dtype
// and op that map onto Accord's, contiguous named datatype, message at least the threshold)
// runs on an Accord communicator made lazily for that MPI communicator; every other call goes
// to PMPI_* unchanged. MPI_Finalize frees what is left. See README.md for the rules.
//
// Note [Same decision on every rank]: whether a call goes to Accord must be decided
// identically on every rank, or one rank waits in Accord while another waits in MPI. Every
// input of the decision (communicator kind and size, dtype, op, byte count, settings) is the
// same on every rank of a correct MPI program. The lazy creation of the Accord communicator
// happens inside the first eligible call, which is collective, and ends with an agreement
// (PMPI_Allreduce MIN of "it worked") so that either every rank uses Accord or none does.
#include <accord/accord.h>
#include <accord/accord_mpi.h>
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#define ACCORD_MPI_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

enum Coll { kAllreduce, kReduceScatterBlock, kAllgather, kBcast, kReduce, kNumColls };
const char* const kCollNames[kNumColls] = {"MPI_Allreduce", "MPI_Reduce_scatter_block",
                                           "MPI_Allgather", "MPI_Bcast", "MPI_Reduce"};
const char* const kCollEnv[kNumColls] = {
    "ACCORD_MPI_MIN_BYTES_ALLREDUCE", "ACCORD_MPI_MIN_BYTES_REDUCE_SCATTER",
    "ACCORD_MPI_MIN_BYTES_ALLGATHER", "ACCORD_MPI_MIN_BYTES_BCAST", "ACCORD_MPI_MIN_BYTES_REDUCE"};
// From bench/README.md ("MPI_Allreduce with libaccord_mpi.so"): with 4 ranks on 2 cores Open
// MPI was faster at 32 B and 128 B, Accord from 512 B up (with 2 ranks Accord won at every
// size). Measured for MPI_Allreduce; the other calls use the same default.
constexpr size_t kDefaultMinBytes = 512;

struct Settings {
  bool disabled = false;
  bool stats = false;
  bool verbose = false;
  size_t min_bytes[kNumColls] = {};
};

size_t env_bytes(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 10);
  if (end != nullptr && (*end == 'K' || *end == 'k')) n <<= 10;
  if (end != nullptr && (*end == 'M' || *end == 'm')) n <<= 20;
  return static_cast<size_t>(n);
}

bool log_info_enabled() {
  const char* v = std::getenv("ACCORD_LOG");
  if (v == nullptr) return false;
  std::string spec(v);  // global level: the items without a category
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string item =
        spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (item == "info" || item == "debug" || item == "trace") return true;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return false;
}

const Settings& settings() {
  static const Settings s = [] {
    Settings r;
    const char* d = std::getenv("ACCORD_MPI_DISABLE");
    r.disabled = d != nullptr && *d != '\0' && std::strcmp(d, "0") != 0;
    const char* st = std::getenv("ACCORD_MPI_STATS");
    r.stats = st != nullptr && *st != '\0' && std::strcmp(st, "0") != 0;
    r.verbose = log_info_enabled();
    size_t all = env_bytes("ACCORD_MPI_MIN_BYTES", kDefaultMinBytes);
    for (int c = 0; c < kNumColls; ++c) r.min_bytes[c] = env_bytes(kCollEnv[c], all);
    return r;
  }();
  return s;
}

std::atomic<uint64_t> g_via_accord[kNumColls];
std::atomic<uint64_t> g_via_mpi[kNumColls];

// Calls that Accord itself makes to MPI (accord_comm_init_mpi) come back through our
// wrappers; inside, they go straight to PMPI.
thread_local int t_inside = 0;
struct Inside {
  Inside() { ++t_inside; }
  ~Inside() { --t_inside; }
};

// The Accord communicator of one MPI communicator, cached as an MPI attribute. usable is
// false when creation failed on some rank: that communicator then always falls through.
struct CommState {
  MPI_Comm mpi_comm;
  accord_comm_t comm = nullptr;
  bool usable = false;
};

std::mutex g_mutex;
int g_keyval = MPI_KEYVAL_INVALID;
std::set<CommState*> g_states;  // every live state, for MPI_Finalize

int delete_state(MPI_Comm, int, void* value, void*) {
  auto* state = static_cast<CommState*>(value);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_states.erase(state);
  }
  if (state->comm != nullptr) accord_comm_destroy(state->comm);
  delete state;
  return MPI_SUCCESS;
}

int keyval() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_keyval == MPI_KEYVAL_INVALID)
    // Dup'ed communicators get their own Accord communicator (no copy callback): two MPI
    // communicators may be used from two threads at once, one Accord communicator may not.
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_state, &g_keyval, nullptr);
  return g_keyval;
}

void say(MPI_Comm comm, const char* fmt, const char* a, const char* b) {
  int rank = -1, size = 0;
  PMPI_Comm_rank(comm, &rank);
  PMPI_Comm_size(comm, &size);
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  std::fprintf(stderr, "[%s:%d r%d/%d] libaccord_mpi: ", host, static_cast<int>(getpid()), rank,
               size);
  std::fprintf(stderr, fmt, a, b);
  std::fputc('\n', stderr);
}

// Returns the usable Accord communicator for comm, creating it on the first call (collective:
// see Note [Same decision on every rank]), or nullptr to fall through.
accord_comm_t accord_comm_for(MPI_Comm comm, Coll coll) {
  int kv = keyval();
  if (kv == MPI_KEYVAL_INVALID) return nullptr;
  void* value = nullptr;
  int found = 0;
  PMPI_Comm_get_attr(comm, kv, &value, &found);
  if (found) {
    auto* state = static_cast<CommState*>(value);
    return state->usable ? state->comm : nullptr;
  }
  auto* state = new CommState{comm};
  accord_status_t st;
  {
    Inside guard;
    st = accord_comm_init_mpi(&state->comm, comm);
  }
  int ok = st == ACCORD_SUCCESS, all_ok = 0;
  PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
  if (!ok)
    say(comm,
        "cannot create an Accord communicator (%s); %s and later calls on this communicator use "
        "MPI",
        accord_last_error(nullptr), kCollNames[coll]);
  if (!all_ok && state->comm != nullptr) {
    accord_comm_destroy(state->comm);
    state->comm = nullptr;
  }
  state->usable = all_ok != 0;
  if (settings().verbose && state->usable)
    say(comm, "Accord communicator created at the first %s%s", kCollNames[coll], "");
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_states.insert(state);
  }
  PMPI_Comm_set_attr(comm, kv, state);
  return state->usable ? state->comm : nullptr;
}

// Built-in MPI dtypes with an exact Accord counterpart for reductions. MPI_CHAR, MPI_BYTE and
// the logical/pair types are not valid for SUM/PROD/MIN/MAX in MPI (or have no counterpart);
// they fall through so MPI keeps reporting its own errors.
bool map_dtype(MPI_Datatype t, accord_datatype_t* out) {
  struct Map {
    MPI_Datatype mpi;
    accord_datatype_t acc;
  };
  const Map maps[] = {
      {MPI_INT8_T, ACCORD_INT8},     {MPI_SIGNED_CHAR, ACCORD_INT8},
      {MPI_UINT8_T, ACCORD_UINT8},   {MPI_UNSIGNED_CHAR, ACCORD_UINT8},
      {MPI_INT32_T, ACCORD_INT32},   {MPI_UINT32_T, ACCORD_UINT32},
      {MPI_INT64_T, ACCORD_INT64},   {MPI_UINT64_T, ACCORD_UINT64},
      {MPI_LONG_LONG, ACCORD_INT64}, {MPI_UNSIGNED_LONG_LONG, ACCORD_UINT64},
      {MPI_FLOAT, ACCORD_FLOAT32},   {MPI_DOUBLE, ACCORD_FLOAT64},
  };
  for (const Map& m : maps)
    if (t == m.mpi) return *out = m.acc, true;
  // int, unsigned, long, unsigned long: by their size on this ABI.
  auto by_size = [&](size_t bytes, accord_datatype_t s32, accord_datatype_t s64) {
    *out = bytes == 4 ? s32 : s64;
    return bytes == 4 || bytes == 8;
  };
  if (t == MPI_INT) return by_size(sizeof(int), ACCORD_INT32, ACCORD_INT64);
  if (t == MPI_UNSIGNED) return by_size(sizeof(unsigned), ACCORD_UINT32, ACCORD_UINT64);
  if (t == MPI_LONG) return by_size(sizeof(long), ACCORD_INT32, ACCORD_INT64);
  if (t == MPI_UNSIGNED_LONG) return by_size(sizeof(unsigned long), ACCORD_UINT32, ACCORD_UINT64);
  return false;
}

bool map_op(MPI_Op op, accord_red_op_t* out) {
  if (op == MPI_SUM) return *out = ACCORD_SUM, true;
  if (op == MPI_PROD) return *out = ACCORD_PROD, true;
  if (op == MPI_MIN) return *out = ACCORD_MIN, true;
  if (op == MPI_MAX) return *out = ACCORD_MAX, true;
  return false;
}

// Note [8-bit sums]: Open MPI 4.1's op/avx component adds 8-bit integers with saturating
// vector instructions (and wraps in its scalar tail), Accord wraps everywhere. To keep MPI's
// results bit for bit, 8-bit sums stay with MPI.
bool reducible(MPI_Datatype t, MPI_Op op, accord_datatype_t* dt, accord_red_op_t* aop) {
  if (!map_dtype(t, dt) || !map_op(op, aop)) return false;
  return !(*aop == ACCORD_SUM && (*dt == ACCORD_INT8 || *dt == ACCORD_UINT8));
}

// Size in bytes of one element of a named (predefined) datatype without holes; false for
// derived datatypes and pair types such as MPI_DOUBLE_INT. Only named types are accepted, so
// that two ranks passing different datatypes of one type signature decide alike as often as
// possible (README: "Same decision on every rank").
bool contiguous_named(MPI_Datatype t, size_t* bytes) {
  if (t == MPI_DATATYPE_NULL) return false;
  int ni = 0, na = 0, nd = 0, combiner = 0;
  if (PMPI_Type_get_envelope(t, &ni, &na, &nd, &combiner) != MPI_SUCCESS ||
      combiner != MPI_COMBINER_NAMED)
    return false;
  int size = 0;
  MPI_Aint lb = 0, extent = 0, tlb = 0, textent = 0;
  PMPI_Type_size(t, &size);
  PMPI_Type_get_extent(t, &lb, &extent);
  PMPI_Type_get_true_extent(t, &tlb, &textent);
  if (size <= 0 || lb != 0 || tlb != 0 || extent != size || textent != size) return false;
  *bytes = static_cast<size_t>(size);
  return true;
}

// The communicator-level checks and the threshold; returns the Accord communicator or nullptr.
accord_comm_t eligible_comm(MPI_Comm comm, Coll coll, size_t bytes) {
  const Settings& s = settings();
  if (t_inside > 0 || s.disabled || comm == MPI_COMM_NULL || bytes < s.min_bytes[coll])
    return nullptr;
  int inter = 0, size = 0;
  if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) return nullptr;
  if (PMPI_Comm_size(comm, &size) != MPI_SUCCESS || size < 2)
    return nullptr;  // MPI_COMM_SELF: MPI copies
  return accord_comm_for(comm, coll);
}

// A failed Accord call is not retried through MPI (other ranks may have finished theirs): it is
// reported on stderr with Accord's message and raised on the communicator's MPI error handler,
// which aborts the job by default (MPI_ERRORS_ARE_FATAL) or returns MPI_ERR_OTHER.
int served(MPI_Comm comm, Coll coll, accord_comm_t acc, accord_status_t st) {
  if (st == ACCORD_SUCCESS) {
    g_via_accord[coll].fetch_add(1, std::memory_order_relaxed);
    return MPI_SUCCESS;
  }
  say(comm, "%s through Accord failed: %s (set ACCORD_MPI_DISABLE=1 to run without Accord)",
      kCollNames[coll], accord_last_error(acc));
  PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
  return MPI_ERR_OTHER;
}

int fell_through(Coll coll, int rc) {
  if (t_inside == 0)
    g_via_mpi[coll].fetch_add(1, std::memory_order_relaxed);  // not Accord's own calls
  return rc;
}

void print_stats() {
  int rank = -1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string line;
  for (int c = 0; c < kNumColls; ++c) {
    char item[96];
    std::snprintf(item, sizeof item, "%s%s %llu accord / %llu mpi", c ? ", " : "", kCollNames[c],
                  static_cast<unsigned long long>(g_via_accord[c].load()),
                  static_cast<unsigned long long>(g_via_mpi[c].load()));
    line += item;
  }
  std::fprintf(stderr, "libaccord_mpi: rank %d: %s\n", rank, line.c_str());
}

}  // namespace

// Counters for tests and tools: calls of collective coll (0 Allreduce, 1 Reduce_scatter_block,
// 2 Allgather, 3 Bcast, 4 Reduce) served by Accord and passed to MPI. Find it with
// dlsym(RTLD_DEFAULT, "accord_mpi_interpose_counts") in a program that does not link it.
ACCORD_MPI_EXPORT int accord_mpi_interpose_counts(int coll, uint64_t* via_accord,
                                                  uint64_t* via_mpi) {
  if (coll < 0 || coll >= kNumColls || via_accord == nullptr || via_mpi == nullptr) return -1;
  *via_accord = g_via_accord[coll].load();
  *via_mpi = g_via_mpi[coll].load();
  return 0;
}

ACCORD_MPI_EXPORT int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count,
                                    MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  accord_datatype_t dt;
  accord_red_op_t aop;
  size_t es = 0;
  if (t_inside == 0 && count >= 0 && reducible(datatype, op, &dt, &aop) &&
      (es = accord_dtype_size(dt)) != 0 && (count == 0 || recvbuf != nullptr)) {
    if (accord_comm_t acc = eligible_comm(comm, kAllreduce, es * static_cast<size_t>(count))) {
      const void* send = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
      return served(
          comm, kAllreduce, acc,
          accord_all_reduce(send, recvbuf, static_cast<size_t>(count), dt, aop, acc, nullptr));
    }
  }
  return fell_through(kAllreduce, PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm));
}

ACCORD_MPI_EXPORT int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
                                               MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  accord_datatype_t dt;
  accord_red_op_t aop;
  int size = 0;
  if (t_inside == 0 && recvcount >= 0 && reducible(datatype, op, &dt, &aop) &&
      comm != MPI_COMM_NULL && PMPI_Comm_size(comm, &size) == MPI_SUCCESS) {
    const size_t block = accord_dtype_size(dt) * static_cast<size_t>(recvcount);
    if (accord_comm_t acc =
            eligible_comm(comm, kReduceScatterBlock, block * static_cast<size_t>(size))) {
      if (sendbuf != MPI_IN_PLACE)
        return served(comm, kReduceScatterBlock, acc,
                      accord_reduce_scatter(sendbuf, recvbuf, static_cast<size_t>(recvcount), dt,
                                            aop, acc, nullptr));
      // MPI's in-place input is all of recvbuf and its result goes to the start; Accord's
      // in-place result stays at the rank's block: reduce there, then move it down.
      int rank = 0;
      PMPI_Comm_rank(comm, &rank);
      char* mine = static_cast<char*>(recvbuf) + block * static_cast<size_t>(rank);
      accord_status_t st = accord_reduce_scatter(recvbuf, mine, static_cast<size_t>(recvcount), dt,
                                                 aop, acc, nullptr);
      if (st == ACCORD_SUCCESS && rank != 0) std::memmove(recvbuf, mine, block);
      return served(comm, kReduceScatterBlock, acc, st);
    }
  }
  return fell_through(kReduceScatterBlock,
                      PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm));
}

ACCORD_MPI_EXPORT int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                    void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                    MPI_Comm comm) {
  size_t res = 0, ses = 0;
  int size = 0;
  if (t_inside == 0 && recvcount >= 0 && contiguous_named(recvtype, &res) &&
      (sendbuf == MPI_IN_PLACE ||
       (sendcount >= 0 && contiguous_named(sendtype, &ses) &&
        ses * static_cast<size_t>(sendcount) == res * static_cast<size_t>(recvcount))) &&
      comm != MPI_COMM_NULL && PMPI_Comm_size(comm, &size) == MPI_SUCCESS) {
    const size_t block = res * static_cast<size_t>(recvcount);
    if (accord_comm_t acc = eligible_comm(comm, kAllgather, block * static_cast<size_t>(size))) {
      const void* send = sendbuf;
      if (sendbuf == MPI_IN_PLACE) {
        int rank = 0;
        PMPI_Comm_rank(comm, &rank);
        send = static_cast<const char*>(recvbuf) + block * static_cast<size_t>(rank);
      }
      return served(comm, kAllgather, acc,
                    accord_all_gather(send, recvbuf, block, ACCORD_UINT8, acc, nullptr));
    }
  }
  return fell_through(
      kAllgather, PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm));
}

ACCORD_MPI_EXPORT int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root,
                                MPI_Comm comm) {
  size_t es = 0;
  int size = 0;
  if (t_inside == 0 && count >= 0 && contiguous_named(datatype, &es) && comm != MPI_COMM_NULL &&
      PMPI_Comm_size(comm, &size) == MPI_SUCCESS && root >= 0 && root < size) {
    const size_t bytes = es * static_cast<size_t>(count);
    if (accord_comm_t acc = eligible_comm(comm, kBcast, bytes))
      return served(comm, kBcast, acc,
                    accord_broadcast(buffer, buffer, bytes, ACCORD_UINT8, root, acc, nullptr));
  }
  return fell_through(kBcast, PMPI_Bcast(buffer, count, datatype, root, comm));
}

ACCORD_MPI_EXPORT int MPI_Reduce(const void* sendbuf, void* recvbuf, int count,
                                 MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm) {
  accord_datatype_t dt;
  accord_red_op_t aop;
  int size = 0;
  if (t_inside == 0 && count >= 0 && reducible(datatype, op, &dt, &aop) && comm != MPI_COMM_NULL &&
      PMPI_Comm_size(comm, &size) == MPI_SUCCESS && root >= 0 && root < size) {
    if (accord_comm_t acc =
            eligible_comm(comm, kReduce, accord_dtype_size(dt) * static_cast<size_t>(count))) {
      const void* send = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
      return served(
          comm, kReduce, acc,
          accord_reduce(send, recvbuf, static_cast<size_t>(count), dt, aop, root, acc, nullptr));
    }
  }
  return fell_through(kReduce, PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm));
}

// MPI_Comm_free needs no wrapper: PMPI_Comm_free runs delete_state through the keyval.
// MPI_Finalize frees the Accord communicators of MPI communicators never freed (at least
// MPI_COMM_WORLD's) while MPI still works.
ACCORD_MPI_EXPORT int MPI_Finalize(void) {
  if (settings().stats) print_stats();
  for (;;) {
    CommState* state = nullptr;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      if (g_states.empty()) break;
      state = *g_states.begin();
    }
    PMPI_Comm_delete_attr(state->mpi_comm, g_keyval);  // runs delete_state
  }
  if (g_keyval != MPI_KEYVAL_INVALID) PMPI_Comm_free_keyval(&g_keyval);
  return PMPI_Finalize();
}
