// nccl-tests style benchmark harness shared by all_reduce_perf, reduce_scatter_perf,
// all_gather_perf, broadcast_perf and reduce_perf. Uses only the public API (and MPI, when
// built with it, for --compare-mpi and --backend mpi).
#pragma once

namespace accord::bench {

enum class Coll { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce };

// Runs the benchmark program for `coll`; returns the process exit code.
int run_main(Coll coll, int argc, char** argv);

}  // namespace accord::bench
