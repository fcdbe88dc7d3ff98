// How one rank's MPI buffer (count elements of a datatype) maps onto the bytes Accord moves.
//
// Note [Signatures, not datatypes]: MPI_Bcast and MPI_Allgather require every rank's data to
// have the same type *signature*, not the same datatype: one rank may pass 4 x MPI_INT, another
// one MPI_Type_contiguous(4, MPI_INT), a third a vector of 4 ints with gaps. What is equal on
// every rank is the number of bytes of data (count x MPI_Type_size), so that alone decides
// whether such a call goes to Accord (Note [Same decision on every rank] in
// accord_mpi_interpose.cpp). Each rank then serves its own layout: a named datatype without
// holes is used in place; any other is packed into (and unpacked from) a contiguous copy with
// PMPI_Pack / PMPI_Unpack, whose native format is the data bytes in type-map order, the order
// in which MPI matches elements between ranks. Reductions need none of this: MPI requires
// their datatype to be the same on every rank, and only named ones go to Accord.
#pragma once

#include <mpi.h>

#include <cstddef>

namespace accord_mpi {

struct Layout {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  size_t count = 0;       // elements
  size_t elem_bytes = 0;  // bytes of data in one element (MPI_Type_size)
  MPI_Aint extent = 0;    // distance between consecutive elements
  bool direct = false;    // named datatype without holes: the buffer is the bytes themselves

  size_t bytes() const { return count * elem_bytes; }
};

// Fills *out for count elements of type; false for a datatype MPI would reject (null, size
// undefined) or a byte count that does not fit size_t, which MPI then reports itself.
bool layout_of(MPI_Datatype type, int count, Layout* out);

// Copies the data of l.count elements at buf into out (l.bytes() bytes), and back. Pieces stay
// under INT_MAX bytes, the limit of PMPI_Pack's int sizes. Return MPI_SUCCESS or MPI's code
// (raised on comm's error handler by MPI itself).
int pack(const Layout& l, const void* buf, char* out, MPI_Comm comm);
int unpack(const Layout& l, const char* in, void* buf, MPI_Comm comm);

}  // namespace accord_mpi
