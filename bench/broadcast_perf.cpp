// broadcast_perf: nccl-tests style benchmark of accord_broadcast (see bench/README.md).
#include "harness.hpp"

int main(int argc, char** argv) { return accord::bench::run_main(accord::bench::Coll::kBroadcast, argc, argv); }
