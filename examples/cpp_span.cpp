// The C++ RAII layer (accord.hpp) with std::span: the communicator from the launcher's
// environment (mpirun's OMPI_COMM_WORLD_*, or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT), errors
// as exceptions, destroyed at the end of scope.
//   mpirun -np 2 build/examples/example_cpp_span
#include <accord/accord.hpp>
#include <cstdio>
#include <numeric>
#include <vector>

int main() {
  try {
    accord::Comm comm = accord::Comm::from_env();
    const int rank = comm.rank(), nranks = comm.size();

    std::vector<double> grads(4096);
    std::iota(grads.begin(), grads.end(), static_cast<double>(rank));
    comm.all_reduce(std::span<double>(grads), accord::Op::kAvg);  // in place, average over ranks

    std::vector<int> mine(3, rank), everyone(3 * static_cast<size_t>(nranks));
    comm.all_gather(std::span<const int>(mine), std::span<int>(everyone));

    // average of (rank + i) over ranks = (n-1)/2 + i
    bool ok = grads[10] == (nranks - 1) / 2.0 + 10 && everyone.back() == nranks - 1;
    if (rank == 0)
      std::printf("example_cpp_span: %d ranks, grads[10] = %g, gathered last = %d: %s\n", nranks,
                  grads[10], everyone.back(), ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
  } catch (const accord::Error& e) {
    std::fprintf(stderr, "example_cpp_span: %s\n", e.what());
    return 1;
  }
}
