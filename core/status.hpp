// Status values carried through every internal layer. A Status is a code from the public
// accord_status_t plus a message that says what failed, where (rank, peer, operation) and what
// to do. OK statuses carry no message and cost one word; errors allocate their text.
//
// Use ACCORD_TRY(expr) to propagate: at ACCORD_LOG=debug each hop logs a file:line breadcrumb,
// so a failure deep in a transport shows the path it took to the API entry point.
#pragma once

#include <cstdarg>
#include <memory>
#include <string>
#include <utility>

#include "include/accord/accord.h"

namespace accord {

class [[nodiscard]] Status {
 public:
  Status() = default;  // success
  Status(accord_status_t code, std::string message)
      : code_(code),
        message_(code == ACCORD_SUCCESS ? nullptr
                                        : std::make_unique<std::string>(std::move(message))) {}
  Status(const Status& other)
      : code_(other.code_),
        message_(other.message_ ? std::make_unique<std::string>(*other.message_) : nullptr) {}
  Status& operator=(const Status& other) {
    if (this != &other) *this = Status(other);
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status success() { return Status(); }

  bool ok() const { return code_ == ACCORD_SUCCESS; }
  accord_status_t code() const { return code_; }
  // Empty for success.
  const std::string& message() const;

  // Prefix context, e.g. "rank 2: " or "all_reduce (seq 4, 64 MiB, ring): ".
  Status& prefix(const std::string& context);

 private:
  accord_status_t code_ = ACCORD_SUCCESS;
  std::unique_ptr<std::string> message_;
};

// printf-style constructor: error(ACCORD_ERR_SYSTEM, "shm_open(%s) failed: %s", name, strerror(e))
Status error(accord_status_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// "what failed: strerror(errno)" as ACCORD_ERR_SYSTEM, with errno captured by the caller.
Status system_error(int err, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

std::string vformat(const char* fmt, va_list ap);
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

void log_breadcrumb(const char* file, int line, const Status& status);

}  // namespace accord

#define ACCORD_TRY(expr)                                            \
  do {                                                              \
    ::accord::Status accord_try_status_ = (expr);                   \
    if (!accord_try_status_.ok()) {                                 \
      ::accord::log_breadcrumb(__FILE__, __LINE__, accord_try_status_); \
      return accord_try_status_;                                    \
    }                                                               \
  } while (0)
