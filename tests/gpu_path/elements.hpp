// Element i of a host buffer of a test dtype, read or written as a double: the gpu_path tests'
// inputs are small integers, exact in each of these dtypes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "include/accord/accord.h"

namespace accord::testing {

// False for a dtype these tests do not use (nothing is written).
inline bool put_element(accord_datatype_t d, void* p, size_t i, double v) {
  switch (d) {
    case ACCORD_INT32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      return true;
    case ACCORD_FLOAT32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      return true;
    case ACCORD_FLOAT64:
      static_cast<double*>(p)[i] = v;
      return true;
    case ACCORD_UINT8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      return true;
    default:
      return false;
  }
}

// -1 for a dtype these tests do not use.
inline double get_element(accord_datatype_t d, const void* p, size_t i) {
  switch (d) {
    case ACCORD_INT32:
      return static_cast<const int32_t*>(p)[i];
    case ACCORD_FLOAT32:
      return static_cast<const float*>(p)[i];
    case ACCORD_FLOAT64:
      return static_cast<const double*>(p)[i];
    case ACCORD_UINT8:
      return static_cast<const uint8_t*>(p)[i];
    default:
      return -1;
  }
}

}  // namespace accord::testing
