// An MPI program that knows nothing of Accord: it calls MPI_Allreduce, MPI_Reduce,
// MPI_Reduce_scatter_block, MPI_Allgather and MPI_Bcast and compares every result with the same
// collective done through PMPI_* (which libaccord_mpi.so does not intercept), bit for bit for
// integers and exact-input floats, within 2(n-1) eps sum|x| for random floats; and checks that
// nothing outside the result changed (in place, MPI_Reduce_scatter_block writes only its first
// block; MPI_Reduce writes only the root's buffer). Counts 0, 1, two primes, and a prime of
// 4-8 MiB; MPI_Bcast and MPI_Allgather also with a different datatype of one type signature on
// each rank (named, contiguous, vector with gaps, reversed indexed). Run with and without
// LD_PRELOAD=libaccord_mpi.so. With --expect-accord it also reads the library's counters
// (dlsym) and fails unless every collective went through Accord at least once, the per-rank
// datatype calls went through Accord on every rank, and the fall-through cases (MAXLOC, user
// op, MPI_SHORT, MPI_COMM_SELF, intercommunicator) went to MPI; with --expect-disabled, that no
// call reached Accord.
#include <dlfcn.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

int g_rank = 0, g_failures = 0;

void fail(const std::string& what) {
  if (g_failures++ < 20) std::fprintf(stderr, "rank %d: FAIL %s\n", g_rank, what.c_str());
}

struct Type {
  MPI_Datatype mpi;
  const char* name;
  size_t size;
  bool is_float;
};
const Type kTypes[] = {
    {MPI_INT8_T, "int8", 1, false},     {MPI_UNSIGNED_CHAR, "uchar", 1, false},
    {MPI_INT, "int", 4, false},         {MPI_UINT32_T, "uint32", 4, false},
    {MPI_LONG, "long", 8, false},       {MPI_UINT64_T, "uint64", 8, false},
    {MPI_LONG_LONG, "llong", 8, false}, {MPI_FLOAT, "float", 4, true},
    {MPI_DOUBLE, "double", 8, true},
};
struct Op {
  MPI_Op mpi;
  const char* name;
};
const Op kOps[] = {{MPI_SUM, "sum"}, {MPI_PROD, "prod"}, {MPI_MIN, "min"}, {MPI_MAX, "max"}};

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Integers: any bits (sums and products wrap alike everywhere). Floats: small integers whose
// sums, products, minima and maxima are exact in any order.
void fill(const Type& t, const Op& op, int rank, size_t count, std::vector<char>* buf) {
  buf->assign(count * t.size, 0);
  for (size_t i = 0; i < count; ++i) {
    uint64_t r = mix(i * 131 + static_cast<uint64_t>(rank) * 7919 + t.size);
    char* p = buf->data() + i * t.size;
    if (!t.is_float) {
      std::memcpy(p, &r, t.size);
    } else {
      double v = op.mpi == MPI_PROD ? static_cast<double>(r % 3) - 1.0 + (r % 7 == 0 ? 3 : 0)
                                    : static_cast<double>(static_cast<int64_t>(r % 201) - 100);
      if (t.size == 4) {
        float f = static_cast<float>(v);
        std::memcpy(p, &f, 4);
      } else {
        std::memcpy(p, &v, 8);
      }
    }
  }
}

void same(const std::vector<char>& got, const std::vector<char>& want, size_t bytes,
          const std::string& what) {
  if (bytes == 0 || std::memcmp(got.data(), want.data(), bytes) == 0) return;
  size_t i = 0;
  while (got[i] == want[i]) ++i;
  char at[96];
  std::snprintf(at, sizeof at, ": byte %zu is 0x%02x, PMPI has 0x%02x", i, got[i] & 0xff,
                want[i] & 0xff);
  fail(what + at);
}

// bytes [from, to) of got must still be what the caller put there (want): in-place
// Reduce_scatter_block writes only the first block, nothing writes past the message.
void untouched(const std::vector<char>& got, const std::vector<char>& want, size_t from, size_t to,
               const std::string& what) {
  for (size_t i = from; i < to; ++i)
    if (got[i] != want[i]) {
      char at[96];
      std::snprintf(at, sizeof at, ": byte %zu (outside the result) changed from 0x%02x to 0x%02x",
                    i, want[i] & 0xff, got[i] & 0xff);
      return fail(what + at);
    }
}

std::string label(const char* coll, const Type& t, const Op* op, size_t count, bool in_place,
                  MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  char s[160];
  std::snprintf(s, sizeof s, "%s %s %s count %zu %s np %d", coll, t.name, op ? op->name : "-",
                count, in_place ? "in-place" : "out-of-place", size);
  return s;
}

void check_reductions(MPI_Comm comm, const Type& t, const Op& op, size_t count, bool in_place) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int n = static_cast<int>(count);
  const size_t bytes = count * t.size;
  std::vector<char> in, out, ref;
  fill(t, op, rank, count * static_cast<size_t>(size), &in);  // room for reduce-scatter

  // MPI_Allreduce
  ref.assign(bytes + 1, 0);
  PMPI_Allreduce(in.data(), ref.data(), n, t.mpi, op.mpi, comm);
  out.assign(bytes + 1, 0);
  if (in_place) std::memcpy(out.data(), in.data(), bytes);
  MPI_Allreduce(in_place ? MPI_IN_PLACE : in.data(), out.data(), n, t.mpi, op.mpi, comm);
  same(out, ref, bytes + 1, label("MPI_Allreduce", t, &op, count, in_place, comm));

  // MPI_Reduce to the last rank (in place only at the root, as MPI allows)
  const int root = size - 1;
  ref.assign(bytes + 1, 0);
  PMPI_Reduce(in.data(), ref.data(), n, t.mpi, op.mpi, root, comm);
  out.assign(bytes + 1, 0);
  const bool root_in_place = in_place && rank == root;
  if (root_in_place) std::memcpy(out.data(), in.data(), bytes);
  const std::vector<char> before = out;
  MPI_Reduce(root_in_place ? MPI_IN_PLACE : in.data(), out.data(), n, t.mpi, op.mpi, root, comm);
  if (rank == root) same(out, ref, bytes + 1, label("MPI_Reduce", t, &op, count, in_place, comm));
  if (rank != root)  // recvbuf is the root's alone
    untouched(out, before, 0, bytes + 1, label("MPI_Reduce", t, &op, count, in_place, comm));

  // MPI_Reduce_scatter_block: count elements per rank
  ref.assign(bytes + 1, 0);
  PMPI_Reduce_scatter_block(in.data(), ref.data(), n, t.mpi, op.mpi, comm);
  const size_t whole = bytes * static_cast<size_t>(size);
  out.assign(whole + 1, 0);
  if (in_place) std::memcpy(out.data(), in.data(), whole);
  const std::vector<char> input = out;
  MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : in.data(), out.data(), n, t.mpi, op.mpi, comm);
  const std::string what = label("MPI_Reduce_scatter_block", t, &op, count, in_place, comm);
  same(out, ref, bytes, what);
  untouched(out, input, bytes, whole + 1, what);  // in place: the other blocks stay as they were
}

void check_moves(MPI_Comm comm, const Type& t, size_t count, bool in_place) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int n = static_cast<int>(count);
  const size_t bytes = count * t.size, all = bytes * static_cast<size_t>(size);
  std::vector<char> in, out, ref;
  fill(t, kOps[0], rank, count, &in);

  ref.assign(all + 1, 0);
  PMPI_Allgather(in.data(), n, t.mpi, ref.data(), n, t.mpi, comm);
  out.assign(all + 1, 0);
  if (in_place) std::memcpy(out.data() + bytes * static_cast<size_t>(rank), in.data(), bytes);
  MPI_Allgather(in_place ? MPI_IN_PLACE : in.data(), n, t.mpi, out.data(), n, t.mpi, comm);
  same(out, ref, all + 1, label("MPI_Allgather", t, nullptr, count, in_place, comm));

  const int root = size > 2 ? 1 : 0;
  ref = in;
  PMPI_Bcast(ref.data(), n, t.mpi, root, comm);
  out = in;
  MPI_Bcast(out.data(), n, t.mpi, root, comm);
  same(out, ref, bytes, label("MPI_Bcast", t, nullptr, count, false, comm));
}

// Random floats: results may differ from MPI's by the summation order.
void check_float_bound(MPI_Comm comm) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const size_t count = 10007;
  std::vector<double> x(count), ax(count), got(count), ref(count), abs_sum(count);
  std::vector<float> xf(count), gotf(count), reff(count);
  for (size_t i = 0; i < count; ++i) {
    x[i] =
        static_cast<double>(mix(i + 1000003ull * static_cast<uint64_t>(rank)) % 2000001) / 1000.0 -
        1000.0;
    xf[i] = static_cast<float>(x[i]);
    ax[i] = std::fabs(static_cast<double>(xf[i]));
  }
  PMPI_Allreduce(ax.data(), abs_sum.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM, comm);
  MPI_Allreduce(x.data(), got.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM, comm);
  PMPI_Allreduce(x.data(), ref.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM, comm);
  MPI_Allreduce(xf.data(), gotf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm);
  PMPI_Allreduce(xf.data(), reff.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm);
  const double k = 2.0 * (size - 1);
  for (size_t i = 0; i < count; ++i) {
    if (std::fabs(got[i] - ref[i]) > k * std::numeric_limits<double>::epsilon() * abs_sum[i])
      return fail("random double sum outside 2(n-1) eps sum|x|");
    if (std::fabs(static_cast<double>(gotf[i]) - reff[i]) >
        k * std::numeric_limits<float>::epsilon() * abs_sum[i])
      return fail("random float sum outside 2(n-1) eps sum|x|");
  }
}

using CountsFn = int (*)(int, uint64_t*, uint64_t*);
CountsFn counts_fn() {
  return reinterpret_cast<CountsFn>(dlsym(RTLD_DEFAULT, "accord_mpi_interpose_counts"));
}
uint64_t accord_calls(int coll) {
  uint64_t acc = 0, mpi = 0;
  if (CountsFn f = counts_fn()) f(coll, &acc, &mpi);
  return acc;
}

// A datatype for k ints, by rank: MPI lets ranks of one MPI_Bcast or MPI_Allgather pass
// different datatypes of one type signature. 0: k x MPI_INT; 1: one contiguous type; 2: one
// vector type, every other int of 2k-1 (gaps); 3: one indexed type whose ints lie in reverse
// order in memory. Returns the datatype and sets *count and *span (ints one element spans).
MPI_Datatype ints_type(int kind, int k, int* count, int* span) {
  MPI_Datatype t = MPI_INT;
  *count = k, *span = k;
  if (kind == 1) MPI_Type_contiguous(k, MPI_INT, &t), *count = 1, *span = k;
  if (kind == 2) MPI_Type_vector(k, 1, 2, MPI_INT, &t), *count = 1, *span = 2 * k - 1;
  if (kind == 3) {
    std::vector<int> lens(static_cast<size_t>(k), 1), disps(static_cast<size_t>(k));
    for (int i = 0; i < k; ++i) disps[static_cast<size_t>(i)] = k - 1 - i;
    MPI_Type_indexed(k, lens.data(), disps.data(), MPI_INT, &t);
    *count = 1, *span = k;
  }
  if (t != MPI_INT) MPI_Type_commit(&t);
  return t;
}

// MPI_Bcast and MPI_Allgather with a different datatype (same type signature) on each rank,
// in place and not, compared whole (gaps included) with the same calls through PMPI. With
// --expect-accord every rank must have sent each call to Accord: one rank routing by its
// datatype would leave another waiting in MPI.
void check_mixed_types(MPI_Comm comm, bool expect_accord) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const uint64_t bcasts = accord_calls(3), gathers = accord_calls(2);
  for (int k : {1, 7, 1009, 65537}) {
    int count = 0, span = 0;
    MPI_Datatype t = ints_type(rank % 4, k, &count, &span);
    char what[96];
    std::snprintf(what, sizeof what, "with datatype kind %d (%d ints) np %d", rank % 4, k, size);

    std::vector<int> buf(static_cast<size_t>(span) + 3), ref;
    for (size_t i = 0; i < buf.size(); ++i)
      buf[i] = rank == 1 % size ? static_cast<int>(i) * 3 + 1 : -7;
    ref = buf;
    PMPI_Bcast(ref.data(), count, t, 1 % size, comm);
    MPI_Bcast(buf.data(), count, t, 1 % size, comm);
    if (buf != ref) fail(std::string("MPI_Bcast ") + what);

    MPI_Aint lb = 0, extent = 0;
    MPI_Type_get_extent(t, &lb, &extent);
    const size_t per_block = static_cast<size_t>(extent) / sizeof(int) * static_cast<size_t>(count);
    const size_t all = per_block * static_cast<size_t>(size) + static_cast<size_t>(span) + 3;
    std::vector<int> send(static_cast<size_t>(span)), out(all, -5);
    for (int i = 0; i < span; ++i) send[static_cast<size_t>(i)] = rank * 100000 + i;
    for (bool in_place : {false, true}) {
      out.assign(all, -5);
      if (in_place)  // this rank's block where MPI_Allgather would put it
        std::copy(send.begin(), send.end(), out.begin() + static_cast<long>(per_block) * rank);
      ref = out;
      PMPI_Allgather(in_place ? MPI_IN_PLACE : send.data(), count, t, ref.data(), count, t, comm);
      MPI_Allgather(in_place ? MPI_IN_PLACE : send.data(), count, t, out.data(), count, t, comm);
      if (out != ref) fail(std::string("MPI_Allgather ") + (in_place ? "in place " : "") + what);
    }
    if (t != MPI_INT) MPI_Type_free(&t);
  }
  if (expect_accord && size > 1 &&
      (accord_calls(3) - bcasts != 4 || accord_calls(2) - gathers != 8))
    fail("MPI_Bcast / MPI_Allgather with per-rank datatypes did not all go through Accord");
}

// Large messages (a prime count of 4 and 8 MiB), in place and not: exact sums and maxima.
void check_large(MPI_Comm comm) {
  const size_t count = 1048573;
  for (const Type& t : {kTypes[2], kTypes[8]})
    for (const Op& op : {kOps[0], kOps[3]})
      for (bool in_place : {false, true}) check_reductions(comm, t, op, count, in_place);
  check_moves(comm, kTypes[8], count, true);
}

void user_max(void* in, void* inout, int* len, MPI_Datatype*) {
  for (int i = 0; i < *len; ++i)
    static_cast<int*>(inout)[i] = std::max(static_cast<int*>(in)[i], static_cast<int*>(inout)[i]);
}

// Calls libaccord_mpi.so must pass to MPI unchanged, each checked for its result (and one vector
// datatype in MPI_Bcast, which goes to Accord packed).
void check_fall_through(MPI_Comm world) {
  int rank = 0, size = 0;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  struct {
    int v, r;
  } in{rank * 10 % 7, rank}, out{};
  MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MAXLOC, world);
  int want_v = -1, want_r = -1;
  for (int r = 0; r < size; ++r)
    if (r * 10 % 7 > want_v) want_v = r * 10 % 7, want_r = r;
  if (out.v != want_v || out.r != want_r) fail("MPI_MAXLOC");

  MPI_Op op;
  MPI_Op_create(user_max, 1, &op);
  std::vector<int> u(5, rank), uo(5, -1);
  MPI_Allreduce(u.data(), uo.data(), 5, MPI_INT, op, world);
  MPI_Op_free(&op);
  if (uo[4] != size - 1) fail("user op");

  short s = static_cast<short>(rank + 1), so = 0;  // no int16 in Accord
  MPI_Allreduce(&s, &so, 1, MPI_SHORT, MPI_SUM, world);
  if (so != size * (size + 1) / 2) fail("MPI_SHORT sum");

  MPI_Datatype vec;  // every other int of 8: packed, the gaps untouched
  MPI_Type_vector(4, 1, 2, MPI_INT, &vec);
  MPI_Type_commit(&vec);
  std::vector<int> b(8);
  for (int i = 0; i < 8; ++i) b[i] = rank == 0 ? 100 + i : -i;
  MPI_Bcast(b.data(), 1, vec, 0, world);
  MPI_Type_free(&vec);
  for (int i = 0; i < 8; ++i)
    if (b[i] != (rank == 0 || i % 2 == 0 ? 100 + i : -i)) fail("MPI_Bcast of a vector type");

  std::vector<long> self_in(300, rank + 1), self_out(300, 0);
  MPI_Allreduce(self_in.data(), self_out.data(), 300, MPI_LONG, MPI_SUM, MPI_COMM_SELF);
  if (self_out[299] != rank + 1) fail("MPI_COMM_SELF");

  // Intercommunicator between the even and odd ranks: allreduce gives each side the other's sum.
  if (size >= 2) {
    MPI_Comm half, inter;
    MPI_Comm_split(world, rank % 2, rank, &half);
    MPI_Intercomm_create(half, 0, world, rank % 2 == 0 ? 1 : 0, 77, &inter);
    std::vector<int> v(300, rank), w(300, -1);
    MPI_Allreduce(v.data(), w.data(), 300, MPI_INT, MPI_SUM, inter);
    int want = 0;
    for (int r = 0; r < size; ++r)
      if (r % 2 != rank % 2) want += r;
    if (w[0] != want || w[299] != want) fail("intercommunicator MPI_Allreduce");
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  const bool expect_accord = argc > 1 && std::strcmp(argv[1], "--expect-accord") == 0;
  const bool expect_disabled = argc > 1 && std::strcmp(argv[1], "--expect-disabled") == 0;
  const size_t counts[] = {0, 1, 1009, 100003};

  // The world, and the halves of MPI_Comm_split (odd and even ranks, a sub-communicator each;
  // with 3 ranks one half has a single rank and falls through).
  MPI_Comm split;
  MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, -g_rank, &split);
  for (MPI_Comm comm : {MPI_COMM_WORLD, split}) {
    for (const Type& t : kTypes)
      for (size_t count : counts)
        for (bool in_place : {false, true}) {
          for (const Op& op : kOps) check_reductions(comm, t, op, count, in_place);
          check_moves(comm, t, count, in_place);
        }
    check_float_bound(comm);
    check_mixed_types(comm, expect_accord);
  }
  check_large(MPI_COMM_WORLD);
  MPI_Comm_free(&split);
  check_fall_through(MPI_COMM_WORLD);

  if (expect_disabled) {  // preloaded with ACCORD_MPI_DISABLE=1: nothing may reach Accord
    CountsFn counts = counts_fn();
    if (counts == nullptr)
      fail("accord_mpi_interpose_counts not found: is libaccord_mpi.so preloaded?");
    for (int c = 0; counts != nullptr && c < 5; ++c) {
      uint64_t acc = 0, mpi = 0;
      counts(c, &acc, &mpi);
      if (acc != 0 || mpi == 0) fail("ACCORD_MPI_DISABLE=1 did not send every call to MPI");
    }
  }
  if (expect_accord) {
    CountsFn counts = counts_fn();
    if (counts == nullptr) {
      fail("accord_mpi_interpose_counts not found: is libaccord_mpi.so preloaded?");
    } else {
      const char* names[] = {"MPI_Allreduce", "MPI_Reduce_scatter_block", "MPI_Allgather",
                             "MPI_Bcast", "MPI_Reduce"};
      for (int c = 0; c < 5; ++c) {
        uint64_t acc = 0, mpi = 0;
        counts(c, &acc, &mpi);
        if (acc == 0) fail(std::string(names[c]) + " never went through Accord");
        if (g_rank == 0)
          std::printf("%s: %llu through Accord, %llu through MPI\n", names[c],
                      static_cast<unsigned long long>(acc), static_cast<unsigned long long>(mpi));
      }
      uint64_t acc = 0, mpi = 0;
      counts(0, &acc, &mpi);
      if (mpi < 4) fail("the fall-through MPI_Allreduce calls did not reach MPI");
    }
  }
  int local = g_failures, total = 0;
  PMPI_Allreduce(&local, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0)
    std::printf(total == 0 ? "interpose_check: ok\n" : "interpose_check: %d failures\n", total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
