// Layouts of MPI buffers: see Note [Signatures, not datatypes] in layout.hpp.
#include "layout.hpp"

#include <climits>
#include <cstdint>
#include <cstring>

namespace accord_mpi {
namespace {

// A named (predefined) datatype whose elements are their bytes, with no holes: MPI_INT, MPI_BYTE,
// MPI_PACKED... but not MPI_DOUBLE_INT (padding) nor any derived datatype, even a contiguous
// one (its type map may reorder elements).
bool direct_type(MPI_Datatype t, size_t elem_bytes) {
  int ni = 0, na = 0, nd = 0, combiner = 0;
  if (PMPI_Type_get_envelope(t, &ni, &na, &nd, &combiner) != MPI_SUCCESS ||
      combiner != MPI_COMBINER_NAMED)
    return false;
  MPI_Aint lb = 0, extent = 0, tlb = 0, textent = 0;
  PMPI_Type_get_extent(t, &lb, &extent);
  PMPI_Type_get_true_extent(t, &tlb, &textent);
  const auto n = static_cast<MPI_Aint>(elem_bytes);
  return elem_bytes > 0 && lb == 0 && tlb == 0 && extent == n && textent == n;
}

const char* at(const void* base, size_t elems, MPI_Aint extent) {
  // MPI_BOTTOM with absolute addresses is NULL: step by integers, not pointer arithmetic.
  return reinterpret_cast<const char*>(
      reinterpret_cast<uintptr_t>(base) +
      static_cast<uintptr_t>(static_cast<intptr_t>(extent) * static_cast<intptr_t>(elems)));
}

size_t piece_elems(const Layout& l) {
  return l.elem_bytes == 0 ? l.count : INT_MAX / l.elem_bytes;  // 0: an element over 2 GiB
}

}  // namespace

bool layout_of(MPI_Datatype type, int count, Layout* out) {
  if (type == MPI_DATATYPE_NULL || count < 0) return false;
  MPI_Count size = 0;
  MPI_Aint lb = 0, extent = 0;
  if (PMPI_Type_size_x(type, &size) != MPI_SUCCESS || size == MPI_UNDEFINED || size < 0 ||
      PMPI_Type_get_extent(type, &lb, &extent) != MPI_SUCCESS)
    return false;
  const auto n = static_cast<size_t>(count), elem = static_cast<size_t>(size);
  if (elem != 0 && n > SIZE_MAX / elem) return false;
  *out = Layout{type, n, elem, extent, direct_type(type, elem)};
  return true;
}

int pack(const Layout& l, const void* buf, char* out, MPI_Comm comm) {
  const size_t step = piece_elems(l);
  if (step == 0 && l.bytes() > 0) return MPI_ERR_TYPE;
  for (size_t i = 0; i < l.count && l.bytes() > 0; i += step) {
    const size_t n = l.count - i < step ? l.count - i : step;
    int pos = 0;
    int rc = PMPI_Pack(at(buf, i, l.extent), static_cast<int>(n), l.type, out + i * l.elem_bytes,
                       static_cast<int>(n * l.elem_bytes), &pos, comm);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

int unpack(const Layout& l, const char* in, void* buf, MPI_Comm comm) {
  const size_t step = piece_elems(l);
  if (step == 0 && l.bytes() > 0) return MPI_ERR_TYPE;
  for (size_t i = 0; i < l.count && l.bytes() > 0; i += step) {
    const size_t n = l.count - i < step ? l.count - i : step;
    int pos = 0;
    int rc =
        PMPI_Unpack(in + i * l.elem_bytes, static_cast<int>(n * l.elem_bytes), &pos,
                    const_cast<char*>(at(buf, i, l.extent)), static_cast<int>(n), l.type, comm);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

}  // namespace accord_mpi
