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
// input of the decision is one that MPI requires to be equal on every rank of a correct
// program: the communicator (its kind and size), count, datatype and op of a reduction (MPI
// requires the same datatype and op everywhere for built-in ops), root, and the settings (made
// equal at MPI_Init: Note [Settings agreed at MPI_Init]). Never a buffer address, MPI_IN_PLACE
// (which MPI_Reduce passes at the root only), nor a datatype of MPI_Bcast or MPI_Allgather,
// which only need equal type signatures: for those the byte count decides (Note [Signatures,
// not datatypes] in layout.hpp). The lazy creation of the Accord
// communicator happens inside the first eligible call, which is collective, and ends with an
// agreement (PMPI_Allreduce MIN of "it worked") so that either every rank uses Accord or none.
// What a rank finds wrong after the decision (Accord failed, memory ran out) is raised on the
// MPI error handler (Note [Errors on the MPI error handler]), never sent to MPI instead.
#include <accord/accord.h>
#include <accord/accord_mpi.h>
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <vector>

#include "layout.hpp"

#define ACCORD_MPI_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using accord_mpi::Layout;

enum Coll { kAllreduce, kReduceScatterBlock, kAllgather, kBcast, kReduce, kNumColls };
const char* const kCollNames[kNumColls] = {"MPI_Allreduce", "MPI_Reduce_scatter_block",
                                           "MPI_Allgather", "MPI_Bcast", "MPI_Reduce"};
const char* const kCollEnv[kNumColls] = {
    "ACCORD_MPI_MIN_BYTES_ALLREDUCE", "ACCORD_MPI_MIN_BYTES_REDUCE_SCATTER",
    "ACCORD_MPI_MIN_BYTES_ALLGATHER", "ACCORD_MPI_MIN_BYTES_BCAST", "ACCORD_MPI_MIN_BYTES_REDUCE"};
// From bench/NOTES-2026-11.md ("MPI_Allreduce with libaccord_mpi.so"): with 4 ranks on 2 cores Open
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

Settings& local_settings() {
  static Settings s = [] {
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
const Settings& settings() { return local_settings(); }

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
// false when creation failed on some rank: that communicator then always falls through. One
// thread at a time uses a communicator (MPI's rule), so scratch and error_codes need no lock.
struct CommState {
  MPI_Comm mpi_comm;
  accord_comm_t comm = nullptr;
  bool usable = false;
  std::vector<char> scratch;       // packed copies and in-place results; grows, never shrinks
  std::map<int, int> error_codes;  // MPI error class -> code carrying the last failure's text
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

void say(MPI_Comm comm, const std::string& message) {
  int rank = -1, size = 0;
  PMPI_Comm_rank(comm, &rank);
  PMPI_Comm_size(comm, &size);
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  std::fprintf(stderr, "[%s:%d r%d/%d] libaccord_mpi: %s\n", host, static_cast<int>(getpid()), rank,
               size, message.c_str());
}

// Note [Settings agreed at MPI_Init]: ACCORD_MPI_DISABLE and the thresholds decide where a
// call goes, so by Note [Same decision on every rank] every rank must hold the same values.
// Environments can differ: mpirun passes a variable to other hosts only with -x, and a rank
// may set its own. So MPI_Init and MPI_Init_thread agree on them across MPI_COMM_WORLD (one
// PMPI_Allreduce MAX of the values and their complements: the largest and the smallest): where
// ranks differ every rank takes the largest (Accord off if any rank turned it off; the highest
// threshold), and rank 0 says so once. A program whose MPI_Init does not come through this
// library (MPI initialized before it was loaded) keeps each rank's own values.
void agree_settings() {
  Settings& s = local_settings();
  constexpr int n = 1 + kNumColls;
  const char* names[n] = {"ACCORD_MPI_DISABLE"};
  uint64_t mine[n] = {s.disabled ? 1u : 0u};
  for (int c = 0; c < kNumColls; ++c) {
    names[1 + c] = kCollEnv[c];
    mine[1 + c] = s.min_bytes[c];
  }
  uint64_t in[2 * n], out[2 * n];
  for (int i = 0; i < n; ++i) {
    in[i] = mine[i];
    in[n + i] = ~mine[i];
  }
  if (PMPI_Allreduce(in, out, 2 * n, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS) return;
  int rank = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (int i = 0; i < n; ++i) {
    const uint64_t hi = out[i], lo = ~out[n + i];
    if (hi == lo) continue;
    if (rank == 0 && i == 0)
      say(MPI_COMM_WORLD,
          "ACCORD_MPI_DISABLE is set on some ranks only: Accord is off on every rank, since every rank "
          "must route each call alike; set it on every rank or on none (mpirun -x ACCORD_MPI_DISABLE)");
    else if (rank == 0)
      say(MPI_COMM_WORLD, std::string(names[i]) + " (or ACCORD_MPI_MIN_BYTES) differs between ranks, from " +
                              std::to_string(lo) + " to " + std::to_string(hi) + " bytes: every rank uses " +
                              std::to_string(hi) + ", since every rank must route each call alike; give every " +
                              "rank the same value (mpirun -x " + names[i] + ")");
    if (i == 0) s.disabled = true;
    else s.min_bytes[i - 1] = static_cast<size_t>(hi);
  }
}

// Returns comm's state with a usable Accord communicator, creating it on the first call
// (collective: see Note [Same decision on every rank]), or nullptr to fall through.
CommState* accord_comm_for(MPI_Comm comm, Coll coll) {
  int kv = keyval();
  if (kv == MPI_KEYVAL_INVALID) return nullptr;
  void* value = nullptr;
  int found = 0;
  PMPI_Comm_get_attr(comm, kv, &value, &found);
  if (found) {
    auto* state = static_cast<CommState*>(value);
    return state->usable ? state : nullptr;
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
    say(comm, std::string("cannot create an Accord communicator (") + accord_last_error(nullptr) +
                  "); " + kCollNames[coll] + " and later calls on this communicator use MPI");
  if (!all_ok && state->comm != nullptr) {
    accord_comm_destroy(state->comm);
    state->comm = nullptr;
  }
  state->usable = all_ok != 0;
  if (settings().verbose && state->usable)
    say(comm, std::string("Accord communicator created at the first ") + kCollNames[coll]);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_states.insert(state);
  }
  PMPI_Comm_set_attr(comm, kv, state);
  return state->usable ? state : nullptr;
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

// The communicator-level checks and the threshold; returns comm's state or nullptr.
CommState* eligible_comm(MPI_Comm comm, Coll coll, size_t bytes) {
  const Settings& s = settings();
  if (t_inside > 0 || s.disabled || comm == MPI_COMM_NULL || bytes < s.min_bytes[coll])
    return nullptr;
  int inter = 0, size = 0;
  if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) return nullptr;
  if (PMPI_Comm_size(comm, &size) != MPI_SUCCESS || size < 2)
    return nullptr;  // MPI_COMM_SELF: MPI copies
  return accord_comm_for(comm, coll);
}

// Note [Errors on the MPI error handler]: a call that fails after it went to Accord (a peer
// died, a timeout, no memory for a packed copy) is not retried through MPI: other ranks may have
// completed theirs, and mixing would hang. It is raised as MPI raises its own failures: on the
// communicator's error handler, with an error code of the failure's class (MPI_ERR_OTHER for
// Accord's errors) whose MPI_Error_string is the message, added with MPI_Add_error_code (one code
// per communicator and class; its text is that communicator's last failure). The default
// MPI_ERRORS_ARE_FATAL prints the text and aborts the job; with MPI_ERRORS_RETURN, or a handler
// that returns, the call returns the code. The whole message also goes to stderr.
int raise_error(CommState* state, int error_class, const std::string& message) {
  say(state->mpi_comm, message + " (set ACCORD_MPI_DISABLE=1 to run without Accord)");
  int code = error_class;
  auto found = state->error_codes.find(error_class);
  if (found != state->error_codes.end()) {
    code = found->second;
  } else {
    std::lock_guard<std::mutex> lock(g_mutex);  // MPI's error code table is process-wide
    if (PMPI_Add_error_code(error_class, &code) != MPI_SUCCESS) code = error_class;
    state->error_codes[error_class] = code;
  }
  if (code != error_class) {  // MPI's text holds MPI_MAX_ERROR_STRING - 1 characters
    const size_t room = MPI_MAX_ERROR_STRING - 1;
    const std::string hint = " (ACCORD_MPI_DISABLE=1 runs without Accord)";
    std::string text = "libaccord_mpi: " + message;
    if (text.size() + hint.size() <= room)
      text += hint;
    else if (text.size() > room)
      text = text.substr(0, room - 3) + "...";
    std::lock_guard<std::mutex> lock(g_mutex);
    PMPI_Add_error_string(code, text.c_str());
  }
  PMPI_Comm_call_errhandler(state->mpi_comm, code);
  return code;
}

int served(CommState* state, Coll coll, accord_status_t st) {
  if (st == ACCORD_SUCCESS) {
    g_via_accord[coll].fetch_add(1, std::memory_order_relaxed);
    return MPI_SUCCESS;
  }
  return raise_error(
      state, MPI_ERR_OTHER,
      std::string(kCollNames[coll]) + " through Accord failed: " + accord_last_error(state->comm));
}

// state's scratch grown to bytes, or nullptr when memory runs out, raised as MPI_ERR_NO_MEM
// with *rc set to the code the call returns.
char* scratch(CommState* state, Coll coll, size_t bytes, const char* what, int* rc) {
  try {
    if (state->scratch.size() < bytes) state->scratch.resize(bytes);
    return state->scratch.data();
  } catch (const std::bad_alloc&) {
    *rc = raise_error(state, MPI_ERR_NO_MEM,
                      std::string(kCollNames[coll]) + " through Accord: cannot allocate " +
                          std::to_string(bytes) + " bytes for " + what +
                          "; the other ranks will time out in Accord");
    return nullptr;
  }
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
  if (t_inside == 0 && count >= 0 && reducible(datatype, op, &dt, &aop)) {
    const size_t n = static_cast<size_t>(count);
    if (CommState* s = eligible_comm(comm, kAllreduce, accord_dtype_size(dt) * n)) {
      // MPI_IN_PLACE is passed by every rank or by none.
      const void* send = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
      return served(s, kAllreduce, accord_all_reduce(send, recvbuf, n, dt, aop, s->comm, nullptr));
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
    const size_t n = static_cast<size_t>(recvcount), block = accord_dtype_size(dt) * n;
    if (CommState* s =
            eligible_comm(comm, kReduceScatterBlock, block * static_cast<size_t>(size))) {
      if (sendbuf != MPI_IN_PLACE)
        return served(s, kReduceScatterBlock,
                      accord_reduce_scatter(sendbuf, recvbuf, n, dt, aop, s->comm, nullptr));
      // MPI's in-place input is all of recvbuf and only its first block is written (MPI
      // implementations leave the rest as it was, and mpi4py's tests check that). Accord's
      // in-place result lands on the rank's own block: right for rank 0; the others reduce into
      // scratch and copy the block to the start.
      int rank = 0;
      PMPI_Comm_rank(comm, &rank);
      char* out = static_cast<char*>(recvbuf);
      int rc = MPI_SUCCESS;
      if (rank != 0 && block > 0 &&
          (out = scratch(s, kReduceScatterBlock, block, "the result", &rc)) == nullptr)
        return rc;
      accord_status_t st = accord_reduce_scatter(recvbuf, out, n, dt, aop, s->comm, nullptr);
      if (st == ACCORD_SUCCESS && out != recvbuf && block > 0) std::memcpy(recvbuf, out, block);
      return served(s, kReduceScatterBlock, st);
    }
  }
  return fell_through(kReduceScatterBlock,
                      PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm));
}

namespace {

// MPI_Allgather on Accord, every block moved as bytes; recv is the layout of one received block.
// Each side that is not a named datatype without holes goes through a packed copy in scratch:
// [send block | n received blocks].
int all_gather(CommState* s, const void* sendbuf, const Layout& send, void* recvbuf,
               const Layout& recv, int rank, int size) {
  const size_t block = recv.bytes(), n = static_cast<size_t>(size);
  const bool in_place = sendbuf == MPI_IN_PLACE;  // passed by every rank or by none
  if (!in_place && send.bytes() != block)
    return raise_error(s, MPI_ERR_TRUNCATE,
                       "MPI_Allgather: rank " + std::to_string(rank) + " sends " +
                           std::to_string(send.bytes()) + " bytes but receives blocks of " +
                           std::to_string(block) +
                           "; sendcount x sendtype must have the type signature of recvcount x "
                           "recvtype");
  char* tmp = nullptr;
  int rc = MPI_SUCCESS;
  const bool pack_send = !in_place && !send.direct, pack_recv = !recv.direct;
  if ((pack_send || pack_recv) && block > 0 &&
      (tmp = scratch(s, kAllgather, block + (pack_recv ? n * block : 0), "a packed copy", &rc)) ==
          nullptr)
    return rc;
  char* out = pack_recv ? tmp + block : static_cast<char*>(recvbuf);
  const void* in = sendbuf;
  if (block > 0 && in_place) {
    in = out + block * static_cast<size_t>(rank);
    if (pack_recv) {  // this rank's block, from its place in recvbuf
      const char* at = static_cast<const char*>(recvbuf) +
                       static_cast<MPI_Aint>(recv.count) * recv.extent * rank;
      rc = accord_mpi::pack(recv, at, out + block * static_cast<size_t>(rank), s->mpi_comm);
    }
  } else if (block > 0 && pack_send) {
    rc = accord_mpi::pack(send, sendbuf, tmp, s->mpi_comm);
    in = tmp;
  }
  if (rc != MPI_SUCCESS) return rc;
  accord_status_t st = accord_all_gather(in, out, block, ACCORD_UINT8, s->comm, nullptr);
  if (st == ACCORD_SUCCESS && pack_recv && block > 0) {
    Layout whole = recv;
    whole.count *= n;
    rc = accord_mpi::unpack(whole, out, recvbuf, s->mpi_comm);
  }
  const int served_rc = served(s, kAllgather, st);
  return served_rc != MPI_SUCCESS ? served_rc : rc;
}

}  // namespace

ACCORD_MPI_EXPORT int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                    void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                    MPI_Comm comm) {
  Layout recv, send;
  int size = 0;
  // The decision uses the received block's bytes (equal on every rank: Note [Signatures, not
  // datatypes]); the send side, ignored in place, is checked after it.
  if (t_inside == 0 && comm != MPI_COMM_NULL && PMPI_Comm_size(comm, &size) == MPI_SUCCESS &&
      layout_of(recvtype, recvcount, &recv)) {
    if (CommState* s = eligible_comm(comm, kAllgather, recv.bytes() * static_cast<size_t>(size))) {
      int rank = 0;
      PMPI_Comm_rank(comm, &rank);
      if (sendbuf != MPI_IN_PLACE && !layout_of(sendtype, sendcount, &send))
        return raise_error(s, MPI_ERR_TYPE,
                           "MPI_Allgather: rank " + std::to_string(rank) +
                               ": the send count or datatype is invalid (count " +
                               std::to_string(sendcount) +
                               "); pass a count >= 0 and a committed datatype, or MPI_IN_PLACE");
      return all_gather(s, sendbuf, send, recvbuf, recv, rank, size);
    }
  }
  return fell_through(
      kAllgather, PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm));
}

ACCORD_MPI_EXPORT int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root,
                                MPI_Comm comm) {
  Layout l;
  int size = 0;
  if (t_inside == 0 && layout_of(datatype, count, &l) && comm != MPI_COMM_NULL &&
      PMPI_Comm_size(comm, &size) == MPI_SUCCESS && root >= 0 && root < size) {
    if (CommState* s = eligible_comm(comm, kBcast, l.bytes())) {
      const size_t bytes = l.bytes();
      if (l.direct || bytes == 0)
        return served(
            s, kBcast,
            accord_broadcast(buffer, buffer, bytes, ACCORD_UINT8, root, s->comm, nullptr));
      int rank = 0, rc = MPI_SUCCESS;
      PMPI_Comm_rank(comm, &rank);
      char* tmp = scratch(s, kBcast, bytes, "a packed copy", &rc);
      if (tmp == nullptr) return rc;
      if (rank == root && (rc = accord_mpi::pack(l, buffer, tmp, comm)) != MPI_SUCCESS) return rc;
      accord_status_t st = accord_broadcast(tmp, tmp, bytes, ACCORD_UINT8, root, s->comm, nullptr);
      if (st == ACCORD_SUCCESS && rank != root) rc = accord_mpi::unpack(l, tmp, buffer, comm);
      const int served_rc = served(s, kBcast, st);
      return served_rc != MPI_SUCCESS ? served_rc : rc;
    }
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
    const size_t n = static_cast<size_t>(count);
    if (CommState* s = eligible_comm(comm, kReduce, accord_dtype_size(dt) * n)) {
      // MPI_IN_PLACE is the root's alone (sendbuf is significant on the other ranks): the root
      // reduces in place, in recvbuf; the others' recvbuf is not written.
      const void* send = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
      return served(s, kReduce, accord_reduce(send, recvbuf, n, dt, aop, root, s->comm, nullptr));
    }
  }
  return fell_through(kReduce, PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm));
}

ACCORD_MPI_EXPORT int MPI_Init(int* argc, char*** argv) {
  const int rc = PMPI_Init(argc, argv);
  if (rc == MPI_SUCCESS) agree_settings();  // Note [Settings agreed at MPI_Init]
  return rc;
}

ACCORD_MPI_EXPORT int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  const int rc = PMPI_Init_thread(argc, argv, required, provided);
  if (rc == MPI_SUCCESS) agree_settings();  // Note [Settings agreed at MPI_Init]
  return rc;
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
