// Under mpirun: every dtype x op x size of all-reduce, in place and out of place, checked
// exactly and, for integer types, against MPI_Allreduce bit for bit. argv[1] picks how the
// communicator is made: "mpi" (accord_comm_init_mpi) or "env" (Open MPI's environment).
// Prints one line per failure; exits non-zero on any.
#include <accord/accord.h>
#include <accord/accord_mpi.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/support/harness.hpp"

using namespace accord::testing;

namespace {

MPI_Datatype mpi_type(accord_datatype_t d) {
  switch (d) {
    case ACCORD_INT8: return MPI_INT8_T;
    case ACCORD_UINT8: return MPI_UINT8_T;
    case ACCORD_INT32: return MPI_INT32_T;
    case ACCORD_UINT32: return MPI_UINT32_T;
    case ACCORD_INT64: return MPI_INT64_T;
    case ACCORD_UINT64: return MPI_UINT64_T;
    default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op(accord_red_op_t op) {
  switch (op) {
    case ACCORD_SUM: return MPI_SUM;
    case ACCORD_PROD: return MPI_PROD;
    case ACCORD_MAX: return MPI_MAX;
    case ACCORD_MIN: return MPI_MIN;
    default: return MPI_OP_NULL;
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const std::string mode = argc > 1 ? argv[1] : "mpi";
  accord_comm_t comm = nullptr;
  accord_status_t st = mode == "env" ? accord_comm_init_from_env(&comm) : accord_comm_init_mpi(&comm, MPI_COMM_WORLD);
  if (st != ACCORD_SUCCESS) {
    std::printf("rank %d: init (%s) failed: %s\n", rank, mode.c_str(), accord_last_error(nullptr));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int errors = 0;
  const size_t nn = static_cast<size_t>(n);
  const size_t sizes[] = {0, 1, 2, 7, nn - 1, nn + 1, 1000003, (256 << 10) / 4 - 1, (256 << 10) / 4 + 1};
  for (int d = 0; d < ACCORD_NUM_DTYPES; ++d) {
    for (int o = 0; o < ACCORD_NUM_OPS; ++o) {
      auto dt = static_cast<accord_datatype_t>(d);
      auto op = static_cast<accord_red_op_t>(o);
      for (size_t count : sizes) {
        if (count == 1000003 && !(dt == ACCORD_FLOAT32 || dt == ACCORD_INT32)) continue;
        const size_t es = accord_dtype_size(dt);
        std::vector<char> in(count * es + 8), out(count * es + 8), want(count * es + 8), ref(count * es + 8);
        for (bool in_place : {false, true}) {
          fill_input(in.data() + 1, count, dt, op, rank, n);
          fill_expected(want.data(), count, dt, op, n);
          char* recv = in_place ? in.data() + 1 : out.data() + 1;
          st = accord_all_reduce(in.data() + 1, recv, count, dt, op, comm, nullptr);
          std::string where = std::string(dtype_name(dt)) + " " + op_name(op) + " count " + std::to_string(count) +
                              (in_place ? " in place" : "");
          if (st != ACCORD_SUCCESS) {
            std::printf("rank %d: %s: %s\n", rank, where.c_str(), accord_last_error(comm));
            ++errors;
            continue;
          }
          if (size_t bad = count_mismatches(recv, want.data(), count, dt)) {
            std::printf("rank %d: %s: %zu wrong\n", rank, where.c_str(), bad);
            ++errors;
          }
          if (mpi_type(dt) != MPI_DATATYPE_NULL && mpi_op(op) != MPI_OP_NULL && !in_place) {
            fill_input(in.data() + 1, count, dt, op, rank, n);
            MPI_Allreduce(in.data() + 1, ref.data(), static_cast<int>(count), mpi_type(dt), mpi_op(op), MPI_COMM_WORLD);
            if (std::memcmp(ref.data(), recv, count * es) != 0) {
              std::printf("rank %d: %s: differs from MPI_Allreduce\n", rank, where.c_str());
              ++errors;
            }
          }
        }
      }
    }
  }
  accord_comm_destroy(comm);
  int total = 0;
  MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("%s, %d ranks: %d failures\n", mode.c_str(), n, total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
