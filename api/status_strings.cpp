// Fixed texts of the public status codes and small table lookups of the C API.
#include <cstddef>
#include <cstring>

#include "accord_config.h"
#include "include/accord/accord.h"

extern "C" {

// The switches below read the enum arguments as ints: a caller may pass any value, and
// loading an out-of-range enum is undefined behaviour in C++.
const char* accord_status_string(accord_status_t status_enum) {
  int status;
  std::memcpy(&status, &status_enum, sizeof status);
  switch (status) {
    case ACCORD_SUCCESS: return "success";
    case ACCORD_ERR_CUDA: return "CUDA error";
    case ACCORD_ERR_SYSTEM: return "system error";
    case ACCORD_ERR_INTERNAL: return "internal error";
    case ACCORD_ERR_INVALID_ARGUMENT: return "invalid argument";
    case ACCORD_ERR_INVALID_USAGE: return "invalid usage";
    case ACCORD_ERR_REMOTE: return "remote rank failed";
    case ACCORD_IN_PROGRESS: return "in progress";
    case ACCORD_ERR_TIMEOUT: return "timed out";
    case ACCORD_ERR_ABORTED: return "aborted";
    case ACCORD_ERR_MISMATCH: return "arguments differ between ranks";
    case ACCORD_ERR_UNSUPPORTED: return "not supported";
    case ACCORD_NUM_STATUS: break;
  }
  return "unknown status code";
}

size_t accord_dtype_size(accord_datatype_t dtype_enum) {
  int dtype;
  std::memcpy(&dtype, &dtype_enum, sizeof dtype);
  switch (dtype) {
    case ACCORD_INT8:
    case ACCORD_UINT8: return 1;
    case ACCORD_FLOAT16:
    case ACCORD_BFLOAT16: return 2;
    case ACCORD_INT32:
    case ACCORD_UINT32:
    case ACCORD_FLOAT32: return 4;
    case ACCORD_INT64:
    case ACCORD_UINT64:
    case ACCORD_FLOAT64: return 8;
    case ACCORD_NUM_DTYPES: break;
  }
  return 0;
}

accord_status_t accord_get_version(int* version) {
  if (version == nullptr) return ACCORD_ERR_INVALID_ARGUMENT;
  *version = ACCORD_VERSION_CODE(ACCORD_VERSION_MAJOR, ACCORD_VERSION_MINOR, ACCORD_VERSION_PATCH);
  return ACCORD_SUCCESS;
}

}  // extern "C"
