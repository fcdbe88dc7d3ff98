/* C example under mpirun: one rank per process, the Accord communicator made from
 * MPI_COMM_WORLD (accord_comm_init_mpi), an all-reduce and a broadcast on host buffers.
 *   mpirun -np 4 build/examples/example_mpi_c */
#include <accord/accord.h>
#include <accord/accord_mpi.h>
#include <mpi.h>
#include <stdio.h>

#define CHECK(call)                                                       \
  do {                                                                    \
    accord_status_t st_ = (call);                                         \
    if (st_ != ACCORD_SUCCESS) {                                          \
      fprintf(stderr, "%s failed: %s\n", #call, accord_last_error(comm)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                       \
    }                                                                     \
  } while (0)

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  accord_comm_t comm = NULL;
  CHECK(accord_comm_init_mpi(&comm, MPI_COMM_WORLD));

  enum { N = 1000 };
  float grads[N];
  for (int i = 0; i < N; ++i) grads[i] = (float)(rank + i);
  CHECK(accord_all_reduce(grads, grads, N, ACCORD_FLOAT32, ACCORD_SUM, comm, NULL)); /* in place */
  /* sum over ranks of (rank + i) = n(n-1)/2 + n*i */
  float want = (float)(nranks * (nranks - 1) / 2 + nranks * (N - 1));

  int64_t step = rank == 0 ? 42 : -1;
  CHECK(accord_broadcast(&step, &step, 1, ACCORD_INT64, 0, comm, NULL));

  int ok = grads[N - 1] == want && step == 42;
  if (rank == 0)
    printf("example_mpi_c: %d ranks, grads[%d] = %g (want %g), step %lld: %s\n", nranks, N - 1,
           (double)grads[N - 1], (double)want, (long long)step, ok ? "ok" : "WRONG");
  accord_comm_destroy(comm);
  MPI_Finalize();
  return ok ? 0 : 1;
}
