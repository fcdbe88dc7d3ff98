// accord_comm_init_mpi: MPI carries the unique id from rank 0 to the others; the rest of the
// bootstrap is Accord's own (TCP store), so MPI is not used again after this call and need
// not be thread-safe.
#include "accord_config.h"
#include "include/accord/accord.h"

#if ACCORD_HAVE_MPI
#include <mpi.h>

#include "api/handles.hpp"
#include "api/launch.hpp"

extern "C" ACCORD_API accord_status_t accord_comm_init_mpi(accord_comm_t* comm, MPI_Comm mpi_comm) {
  if (comm == nullptr) return ACCORD_ERR_INVALID_ARGUMENT;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    return accord::report(nullptr, accord::error(ACCORD_ERR_INVALID_USAGE,
                                                 "accord_comm_init_mpi: MPI is not initialized; call MPI_Init first"));
  int rank = 0, size = 0;
  if (MPI_Comm_rank(mpi_comm, &rank) != MPI_SUCCESS || MPI_Comm_size(mpi_comm, &size) != MPI_SUCCESS)
    return accord::report(nullptr, accord::error(ACCORD_ERR_INVALID_ARGUMENT,
                                                 "accord_comm_init_mpi: not a valid MPI communicator"));
  // Ranks on several nodes cannot reach a bootstrap server on rank 0's loopback.
  MPI_Comm node = MPI_COMM_NULL;
  int node_size = size;
  if (MPI_Comm_split_type(mpi_comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
  }
  int multi_node = node_size < size, any_multi_node = 0;
  MPI_Allreduce(&multi_node, &any_multi_node, 1, MPI_INT, MPI_MAX, mpi_comm);
  accord_unique_id_t id{};
  accord_status_t st = ACCORD_SUCCESS;
  if (rank == 0) {
    try {
      st = accord::report(nullptr, accord::make_unique_id(&id, any_multi_node != 0));
    } catch (...) {  // no exception crosses the C ABI
      st = ACCORD_ERR_INTERNAL;
    }
  }
  // Every rank must learn whether rank 0 succeeded, or the others would wait for nothing.
  int ok = st == ACCORD_SUCCESS;
  MPI_Bcast(&ok, 1, MPI_INT, 0, mpi_comm);
  if (!ok)
    return rank == 0 ? st
                     : accord::report(nullptr, accord::error(ACCORD_ERR_REMOTE, "accord_comm_init_mpi: rank 0 could "
                                                             "not create a unique id; see rank 0's error"));
  MPI_Bcast(id.internal, ACCORD_UNIQUE_ID_BYTES, MPI_BYTE, 0, mpi_comm);
  return accord_comm_init_rank(comm, size, id, rank);
}
#endif
