/*
 * Accord bootstrap from an MPI communicator. Separate from accord.h so that programs without
 * MPI never need mpi.h. Available when Accord was built with MPI (meson -Dmpi=enabled|auto and
 * MPI found); builds without MPI neither install this header nor export the function.
 */
#ifndef ACCORD_ACCORD_MPI_H_
#define ACCORD_ACCORD_MPI_H_

#include <mpi.h>

#include "accord.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Creates a communicator over the ranks of mpi_comm (same rank numbering). Collective over
 *  mpi_comm. MPI is used only to exchange the bootstrap address; data moves over Accord's
 *  own transports. mpi_comm may be freed afterwards. */
ACCORD_API accord_status_t accord_comm_init_mpi(accord_comm_t* comm, MPI_Comm mpi_comm);

#ifdef __cplusplus
}
#endif

#endif /* ACCORD_ACCORD_MPI_H_ */
