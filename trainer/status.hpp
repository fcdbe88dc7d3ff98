// Errors inside the trainer: a Status is either ok or carries a message that says what went
// wrong and where (file, field, rank), ready to print for the user. No exceptions: bad input
// (a corrupt data file, an unknown flag) must end the program with that message, never abort.
#pragma once

#include <string>
#include <utility>

namespace accord::trainer {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }

 private:
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}
  bool failed_ = false;
  std::string message_;
};

inline Status ok_status() { return Status(); }

}  // namespace accord::trainer

// Returns early from the enclosing function when expr fails.
#define TRAINER_TRY(expr)                       \
  do {                                          \
    ::accord::trainer::Status status_ = (expr); \
    if (!status_.ok()) return status_;          \
  } while (0)
