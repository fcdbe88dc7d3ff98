// Under mpirun, on simulated GPUs (ACCORD_SIM_TOPO), every rank on GPU 0 (ACCORD_DEVICE=0),
// time-sliced as without MPS (ACCORD_SIM_TIMESLICE_US > 0): the processes were not forked from
// a common parent, so they share a time-slice table only through the communicator's
// rendezvous (Note [Simulated time slices of a job], collectives/device/gpu_sync.cpp).
// argv[1] is the hand-off form the job must use (ACCORD_SHARED_GPU_SYNC: spin or wait). Each
// rank runs kCalls all-reduces on device buffers, checked exactly; then rank 0 reads GPU 0's
// slice counts from its runtime's table, which is every rank's:
//  - spin: at least one expiry per all-reduce (a kernel that polls its peer's flag gets it only
//    when its slice ends; with a table per process nothing is sliced: no expiry);
//  - wait: switches between the processes (with a table per process: none) and no expiry.
// Prints one line per failure; exits non-zero on any.
#include <accord/accord.h>
#include <accord/accord_device.h>
#include <accord/accord_mpi.h>
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/settings.hpp"
#include "transport/device/device_runtime.hpp"
#include "transport/device/sim_runtime.hpp"

namespace {

constexpr int kCalls = 6;
constexpr size_t kCount = 1031;

// One rank's all-reduces: "" or what went wrong.
std::string all_reduces(accord_comm_t comm, int rank, int n) {
  int dev = -1;
  accord_status_t s = accord_comm_device(comm, &dev);
  accord_stream_t stream = nullptr;
  if (s == ACCORD_SUCCESS) s = accord_stream_create(&stream, dev);
  void* buf = nullptr;
  if (s == ACCORD_SUCCESS) s = accord_device_alloc(&buf, kCount * sizeof(float), dev);
  if (s != ACCORD_SUCCESS) return std::string("set up: ") + accord_last_error(comm);
  std::string failure;
  std::vector<float> host(kCount);
  for (int k = 0; k < kCalls && failure.empty(); ++k) {
    for (size_t i = 0; i < kCount; ++i) host[i] = static_cast<float>(rank + 1 + static_cast<int>(i % 5) + k);
    s = accord_device_memcpy(buf, host.data(), kCount * sizeof(float));
    if (s == ACCORD_SUCCESS) s = accord_barrier(comm, nullptr);  // every rank's input is there
    if (s == ACCORD_SUCCESS) s = accord_all_reduce(buf, buf, kCount, ACCORD_FLOAT32, ACCORD_SUM, comm, stream);
    if (s == ACCORD_SUCCESS) s = accord_stream_synchronize(stream);
    accord_status_t async = ACCORD_SUCCESS;
    if (s == ACCORD_SUCCESS) s = accord_comm_get_async_error(comm, &async);
    if (s == ACCORD_SUCCESS) s = async;
    if (s == ACCORD_SUCCESS) s = accord_device_memcpy(host.data(), buf, kCount * sizeof(float));
    if (s != ACCORD_SUCCESS) {
      failure = "all-reduce " + std::to_string(k) + ": " + accord_last_error(comm);
      break;
    }
    for (size_t i = 0; i < kCount && failure.empty(); ++i) {
      float want = 0;
      for (int q = 0; q < n; ++q) want += static_cast<float>(q + 1 + static_cast<int>(i % 5) + k);
      if (host[i] != want)
        failure = "all-reduce " + std::to_string(k) + ": element " + std::to_string(i) + " is " +
                  std::to_string(host[i]) + ", expected " + std::to_string(want);
    }
  }
  (void)accord_device_free(buf);
  (void)accord_stream_destroy(stream);
  return failure;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const std::string want = argc > 1 ? argv[1] : "wait";
  accord_comm_t comm = nullptr;
  if (accord_comm_init_mpi(&comm, MPI_COMM_WORLD) != ACCORD_SUCCESS) {
    std::printf("rank %d: init failed: %s\n", rank, accord_last_error(nullptr));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int errors = 0;
  size_t len = 0;
  accord_comm_plan(comm, nullptr, &len);
  std::string plan(len, '\0');
  (void)accord_comm_plan(comm, plan.data(), &len);
  if (plan.find("GPU hand-offs: " + want) == std::string::npos) {
    std::printf("rank %d: the plan should say 'GPU hand-offs: %s'; plan:\n%s\n", rank, want.c_str(), plan.c_str());
    ++errors;
  }
  accord::Settings settings;
  accord::DeviceRuntime* rt = accord::load_settings(&settings).ok() ? accord::process_device_runtime(settings) : nullptr;
  auto* sim = dynamic_cast<accord::SimulatedRuntime*>(rt);
  if (sim == nullptr) {
    std::printf("rank %d: no simulated device runtime (set ACCORD_SIM_TOPO)\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const accord::sim::SliceCounts before = sim->slice_counts(0);
  const std::string failure = all_reduces(comm, rank, n);
  if (!failure.empty()) {
    std::printf("rank %d: %s\n", rank, failure.c_str());
    ++errors;
  }
  MPI_Barrier(MPI_COMM_WORLD);  // every rank's kernels are done
  if (rank == 0) {
    const accord::sim::SliceCounts after = sim->slice_counts(0);
    const unsigned long long expiries = after.expiries - before.expiries, switches = after.switches - before.switches;
    std::printf("%d processes, ACCORD_SHARED_GPU_SYNC=%s: %d all-reduces, %llu slice expiries, %llu switches\n", n,
                want.c_str(), kCalls, expiries, switches);
    if (switches == 0) {
      std::printf("rank 0: the processes' kernels never took turns on GPU 0: do they share a time-slice table?\n");
      ++errors;
    }
    if (want == "spin" && expiries < static_cast<unsigned long long>(kCalls)) {
      std::printf("rank 0: the spinning protocol should pay a slice expiry per all-reduce\n");
      ++errors;
    }
    if (want == "wait" && expiries != 0) {
      std::printf("rank 0: a kernel waited for a peer inside its time slice\n");
      ++errors;
    }
  }
  (void)accord_comm_destroy(comm);
  int all = 0;
  MPI_Allreduce(&errors, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return all == 0 ? 0 : 1;
}
