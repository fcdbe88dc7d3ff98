// reduce_scatter_perf: nccl-tests style benchmark of accord_reduce_scatter (see bench/README.md).
#include "harness.hpp"

int main(int argc, char** argv) { return accord::bench::run_main(accord::bench::Coll::kReduceScatter, argc, argv); }
