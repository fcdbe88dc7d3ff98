// Status formatting helpers and the debug-level breadcrumb trail.
#include "core/status.hpp"

#include <cstdio>
#include <cstring>

#include "core/log.hpp"

namespace accord {

const std::string& Status::message() const {
  static const std::string kEmpty;
  return message_ ? *message_ : kEmpty;
}

Status& Status::prefix(const std::string& context) {
  if (message_) message_->insert(0, context);
  return *this;
}

std::string vformat(const char* fmt, va_list ap) {
  char stack[512];
  va_list copy;
  va_copy(copy, ap);
  int n = std::vsnprintf(stack, sizeof stack, fmt, copy);
  va_end(copy);
  if (n < 0) return fmt;
  if (static_cast<size_t>(n) < sizeof stack) return std::string(stack, static_cast<size_t>(n));
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::vsnprintf(out.data(), out.size(), fmt, ap);
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

Status error(accord_status_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return Status(code, std::move(s));
}

Status system_error(int err, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  s += ": ";
  s += std::strerror(err);
  return Status(ACCORD_ERR_SYSTEM, std::move(s));
}

void log_breadcrumb(const char* file, int line, const Status& status) {
  if (log_enabled(LogLevel::kDebug, LogCat::kCore)) {
    log_message(LogLevel::kDebug, LogCat::kCore, "%s:%d: %s (%s)", file, line,
                accord_status_string(status.code()), status.message().c_str());
  }
}

}  // namespace accord
