// Under mpirun with ACCORD_FAULT set to kill one rank mid all-reduce: the survivors must get
// ACCORD_ERR_REMOTE naming it, and exit non-zero, so the whole job ends non-zero quickly.
#include <accord/accord.h>
#include <accord/accord_mpi.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  accord_comm_t comm = nullptr;
  if (accord_comm_init_mpi(&comm, MPI_COMM_WORLD) != ACCORD_SUCCESS) {
    std::fprintf(stderr, "rank %d: init: %s\n", rank, accord_last_error(nullptr));
    return 2;
  }
  std::vector<float> buf(1 << 18, 1.0f);
  for (int i = 0; i < 1000; ++i) {
    accord_status_t s = accord_all_reduce(buf.data(), buf.data(), buf.size(), ACCORD_FLOAT32, ACCORD_SUM, comm, nullptr);
    if (s != ACCORD_SUCCESS) {
      std::fprintf(stderr, "rank %d: all_reduce %d: %s: %s\n", rank, i, accord_status_string(s), accord_last_error(comm));
      return s == ACCORD_ERR_REMOTE ? 3 : 4;
    }
  }
  std::fprintf(stderr, "rank %d: the injected fault never happened\n", rank);
  accord_comm_destroy(comm);
  MPI_Finalize();
  return 0;
}
