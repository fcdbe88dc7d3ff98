// libaccord_mpi.so when ranks start with different routing settings (Note [Settings agreed at
// MPI_Init]): before MPI_Init each rank sets its own environment, as a rank on another host
// without mpirun -x would have it, then checks that every rank routed each call alike (the
// library's counters) and that every result is exact. Rank 0 also checks what it was told.
//   thresholds: ACCORD_MPI_MIN_BYTES 0 on rank 0, 4096 on rank 1, unset (512) elsewhere: every
//               rank uses 4096, so 4 and 400 B go to MPI and 4 KiB and more to Accord;
//   disable:    ACCORD_MPI_DISABLE=1 on the last rank only: no call goes to Accord.
// Without the agreement rank 0 would wait in Accord for a call that the others made in MPI.
//   badalgo:    ACCORD_ALGO=bogus on rank 1 only (ACCORD_MPI_MIN_BYTES=0 everywhere): Accord's
//               init fails on rank 1 alone, which tells the others through the bootstrap
//               (Note [A rank that fails alone at init]), so every rank falls back to MPI at
//               the first call, within seconds, not after ACCORD_INIT_TIMEOUT_MS (30 s here).
#include <dlfcn.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "thresholds" && mode != "disable" && mode != "badalgo") {
    std::fprintf(stderr, "usage: interpose_mixed_env thresholds|disable|badalgo\n");
    return 2;
  }
  const char* world_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* world_size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (world_rank == nullptr || world_size == nullptr) {
    std::fprintf(stderr, "FAIL: OMPI_COMM_WORLD_RANK/SIZE unset: run under Open MPI's mpirun\n");
    return 2;
  }
  const int my = std::atoi(world_rank), size = std::atoi(world_size);
  if (mode == "thresholds") {
    if (my == 0) setenv("ACCORD_MPI_MIN_BYTES", "0", 1);
    else if (my == 1) setenv("ACCORD_MPI_MIN_BYTES", "4096", 1);
    else unsetenv("ACCORD_MPI_MIN_BYTES");
  } else if (mode == "disable") {
    if (my == size - 1) setenv("ACCORD_MPI_DISABLE", "1", 1);
  } else {
    setenv("ACCORD_MPI_MIN_BYTES", "0", 1);
    setenv("ACCORD_INIT_TIMEOUT_MS", "30000", 1);
    if (my == 1) setenv("ACCORD_ALGO", "bogus", 1);
  }
  // Rank 0 keeps what the library says at MPI_Init and the first calls.
  char log_path[] = "/tmp/accord-mixed-env-XXXXXX";
  int saved_err = -1;
  if (my == 0) {
    const int fd = mkstemp(log_path);
    if (fd < 0) return 2;
    saved_err = dup(2);
    dup2(fd, 2);
    close(fd);
  }
  MPI_Init(&argc, &argv);
  int rank = 0, failures = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string failed;  // said after rank 0's stderr is back
  auto fail = [&](const std::string& what) {
    ++failures;
    failed += "rank " + std::to_string(rank) + ": FAIL " + what + "\n";
  };
  const double start = MPI_Wtime();
  for (int count : {1, 100, 1024, 5000}) {
    std::vector<int32_t> in(static_cast<size_t>(count)), out(static_cast<size_t>(count), -1);
    for (int i = 0; i < count; ++i) in[static_cast<size_t>(i)] = i + rank;
    MPI_Allreduce(in.data(), out.data(), count, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < count; ++i)
      if (out[static_cast<size_t>(i)] != size * i + size * (size - 1) / 2) {
        fail("MPI_Allreduce of " + std::to_string(count) + " int32: wrong value at " + std::to_string(i));
        break;
      }
  }
  const double secs = MPI_Wtime() - start;
  if (mode == "badalgo" && secs > 15.0)
    fail("the calls took " + std::to_string(secs) + " s: the ranks waited for rank 1's failed init");
  std::string said;
  if (my == 0) {
    std::fflush(stderr);
    dup2(saved_err, 2);
    close(saved_err);
    if (FILE* f = std::fopen(log_path, "r")) {
      char buf[1024];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) said.append(buf, n);
      std::fclose(f);
    }
    std::remove(log_path);
    std::fputs(said.c_str(), stderr);
  }
  using CountsFn = int (*)(int, uint64_t*, uint64_t*);
  auto counts = reinterpret_cast<CountsFn>(dlsym(RTLD_DEFAULT, "accord_mpi_interpose_counts"));
  uint64_t via_accord = 0, via_mpi = 0;
  if (counts == nullptr || counts(0, &via_accord, &via_mpi) != 0) {
    fail("accord_mpi_interpose_counts not found: is libaccord_mpi.so preloaded?");
  } else {
    const uint64_t want = mode == "thresholds" ? 2 : 0;  // 4096 and 20000 B; else none
    if (via_accord != want)
      fail("MPI_Allreduce went to Accord " + std::to_string(via_accord) + " times, expected " +
           std::to_string(want) + " (the ranks did not agree on the settings)");
    if (via_accord + via_mpi != 4) fail("expected 4 MPI_Allreduce calls counted");
  }
  if (rank == 0) {
    const std::string needle =
        mode == "thresholds" ? "ACCORD_MPI_MIN_BYTES_ALLREDUCE (or ACCORD_MPI_MIN_BYTES) differs between "
                               "ranks, from 0 to 4096 bytes: every rank uses 4096"
        : mode == "disable"  ? "ACCORD_MPI_DISABLE is set on some ranks only: Accord is off on every rank"
                             : "rank 1 failed during init: ACCORD_ALGO='bogus' is not an algorithm";
    if (said.find(needle) == std::string::npos) fail("rank 0 was not told '" + needle + "'");
  }
  std::fputs(failed.c_str(), stderr);
  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && all == 0) std::printf("interpose_mixed_env %s: every rank routed alike\n", mode.c_str());
  MPI_Finalize();
  return all == 0 ? 0 : 1;
}
