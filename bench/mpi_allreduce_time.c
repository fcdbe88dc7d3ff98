/* Plain MPI program (knows nothing of Accord): times MPI_Allreduce (float sum, out of place)
 * from 8 B to 64 MiB by 4x and prints "bytes median_us" per size on rank 0: the median over
 * 5 batches of the slowest rank's mean time. bench/mpi_preload.sh runs it with and without
 * LD_PRELOAD=libaccord_mpi.so. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  size_t max_bytes = (size_t)64 << 20;
  if (argc > 1) max_bytes = (size_t)strtoull(argv[1], NULL, 10);
  float* in = malloc(max_bytes);
  float* out = malloc(max_bytes);
  for (size_t i = 0; i < max_bytes / 4; ++i) in[i] = (float)(i % 7);
  for (size_t bytes = 8; bytes <= max_bytes; bytes *= 4) {
    int count = (int)(bytes / 4);
    int iters = bytes <= 65536 ? 200 : bytes <= (1 << 20) ? 40 : 5;
    double batch[5];
    MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* warm-up */
    for (int b = 0; b < 5; ++b) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int i = 0; i < iters; ++i)
        MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double mine = (MPI_Wtime() - t0) / iters * 1e6, slowest = 0;
      PMPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      batch[b] = slowest;
    }
    qsort(batch, 5, sizeof batch[0], cmp);
    int nranks = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (out[count - 1] != (float)(nranks * (int)(((size_t)count - 1) % 7))) {
      fprintf(stderr, "rank %d: wrong result at %zu bytes\n", rank, bytes);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0) printf("%zu %.2f\n", bytes, batch[2]);
  }
  free(in);
  free(out);
  MPI_Finalize();
  return 0;
}
