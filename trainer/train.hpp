// The training loop of accord-train: load the shard-sampled data, agree on the initial
// parameters (rank 0's, broadcast) or on a checkpoint, then per step forward, loss,
// backward with overlapped gradient averaging, and the optimizer; progress lines, metrics,
// TensorBoard scalars and checkpoints on rank 0; test accuracy (moving-average weights,
// test set split across ranks) at the end of every epoch and at the end of the run.
#pragma once

#include <cstdint>

#include "trainer/backend.hpp"
#include "trainer/grad_sync.hpp"
#include "trainer/options.hpp"
#include "trainer/status.hpp"

namespace accord::trainer {

struct TrainResult {
  int64_t steps = 0;             // optimizer steps done in total (including before a resume)
  double test_accuracy = 0;      // at the end, in [0, 1]
  double last_loss = 0;          // mean training loss of the last logging interval
  double samples_per_s = 0;      // global samples per second of this run
  double comm_share = 0;         // share of step time the comm thread spent on gradients
  double exposed_comm_share = 0; // share of step time training waited for it
};

// On the CPU backend.
Status train(const Options& options, GradSync& sync, TrainResult* result);
// On the backend the factory makes (the GPU backend: gpu_backend.hpp).
Status train(const Options& options, GradSync& sync, const BackendFactory& factory, TrainResult* result);

// This process's rank on its host: LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID or
// SLURM_LOCALID, else RANK, else 0. The GPU backend uses device local_rank() % device count.
int local_rank();

// OpenBLAS threads per rank when --threads is 0: the cores divided by the ranks on this host
// (LOCAL_WORLD_SIZE or OMPI_COMM_WORLD_LOCAL_SIZE, else all ranks), at least 1.
int default_blas_threads(int nranks);

}  // namespace accord::trainer
