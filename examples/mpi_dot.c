/* An ordinary MPI program (no Accord in its source or link line): a distributed dot product
 * and vector norm with MPI_Allreduce, a parameter MPI_Bcast and an MPI_Allgather. Run it as
 * is, or accelerated without recompiling:
 *   mpirun -np 4 -x LD_PRELOAD=build/interpose/mpi/libaccord_mpi.so -x ACCORD_MPI_STATS=1 \
 *       build/examples/example_mpi_dot */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  double scale[256];
  for (int i = 0; i < 256; ++i) scale[i] = rank == 0 ? 2.0 : 0.0;
  MPI_Bcast(scale, 256, MPI_DOUBLE, 0, MPI_COMM_WORLD);

  enum { N = 1 << 16 };
  double* x = malloc(N * sizeof *x);
  double partial[N / 64];
  for (int i = 0; i < N; ++i) x[i] = (double)((rank * N + i) % 5);
  for (int b = 0; b < N / 64; ++b) {
    partial[b] = 0;
    for (int i = 0; i < 64; ++i) partial[b] += scale[0] * x[b * 64 + i] * x[b * 64 + i];
  }
  /* per-block sums of squares over all ranks, then the total */
  MPI_Allreduce(MPI_IN_PLACE, partial, N / 64, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  double total = 0;
  for (int b = 0; b < N / 64; ++b) total += partial[b];

  long counts[1] = {N};
  long* all = malloc((size_t)nranks * 128 * sizeof *all);
  long mine[128];
  for (int i = 0; i < 128; ++i) mine[i] = counts[0];
  MPI_Allgather(mine, 128, MPI_LONG, all, 128, MPI_LONG, MPI_COMM_WORLD);
  long elements = 0;
  for (int r = 0; r < nranks; ++r) elements += all[r * 128];

  /* exact: x cycles 0..4 over all nranks*N elements (N is not a multiple of 5, but the
   * global index runs 0..nranks*N-1), squares 0,1,4,9,16 times the scale 2 */
  double want = 0;
  for (long g = 0; g < (long)nranks * N; ++g) want += 2.0 * (double)((g % 5) * (g % 5));
  int ok = total == want && elements == (long)nranks * N;
  if (rank == 0)
    printf("example_mpi_dot: %ld elements, 2|x|^2 = %.0f (want %.0f): %s\n", elements, total, want,
           ok ? "ok" : "WRONG");
  free(all);
  free(x);
  MPI_Finalize();
  return ok ? 0 : 1;
}
