// An MPI program that knows nothing of Accord, run with libaccord_mpi.so preloaded while
// ACCORD_FAULT stops one rank inside an Accord collective: the other ranks' MPI_Allreduce then
// fails inside Accord (a timeout) and must reach the communicator's MPI error handler as MPI's
// own failures do. Usage: interpose_errhandler fatal|return
//   fatal:  MPI_COMM_WORLD keeps MPI_ERRORS_ARE_FATAL; the job must abort with Accord's message
//           in MPI's own abort text ("*** libaccord_mpi: MPI_Allreduce through Accord failed").
//   return: a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN; the call must return a code of
//           class MPI_ERR_OTHER whose MPI_Error_string is Accord's message. The rank prints it and
//           aborts the job, since the stopped rank never ends by itself.
// Whenever a failed call returns, the rank prints "rank R: MPI_Allreduce returned ..." and ends
// the job with MPI_Abort(kReturnedStatus): in fatal mode the handler must have ended it first
// (with the error code as status), so the test tells the two apart by the exit status and that
// line (tests/mpi/meson.build).
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <vector>

constexpr int kReturnedStatus = 3;  // the job's exit status when a failed call returned

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const bool returns = argc > 1 && std::strcmp(argv[1], "return") == 0;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm comm = MPI_COMM_WORLD;
  if (returns) {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  }
  std::vector<float> in(1024, 1.0f), out(1024);
  for (int i = 0; i < 50; ++i) {
    int rc = MPI_Allreduce(in.data(), out.data(), 1024, MPI_FLOAT, MPI_SUM, comm);
    if (rc == MPI_SUCCESS) continue;
    int error_class = -1, len = 0;
    char text[MPI_MAX_ERROR_STRING] = "";
    MPI_Error_class(rc, &error_class);
    MPI_Error_string(rc, text, &len);
    std::printf("rank %d: MPI_Allreduce returned %d\n", rank, rc);
    if (!returns) {
      std::printf("rank %d: FAIL: MPI_ERRORS_ARE_FATAL returned %d (%s)\n", rank, rc, text);
    } else if (error_class != MPI_ERR_OTHER) {
      std::printf("rank %d: FAIL: call %d returned class %d, not MPI_ERR_OTHER (%s)\n", rank, i,
                  error_class, text);
    } else {
      std::printf(
          "rank %d: MPI_ERRORS_RETURN: MPI_Allreduce returned class MPI_ERR_OTHER, "
          "MPI_Error_string: %s\n",
          rank, text);
    }
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, kReturnedStatus);
  }
  std::printf(
      "rank %d: FAIL: the injected fault never happened (is ACCORD_FAULT set and "
      "libaccord_mpi.so preloaded?)\n",
      rank);
  if (comm != MPI_COMM_WORLD) MPI_Comm_free(&comm);
  MPI_Finalize();
  return 1;
}
