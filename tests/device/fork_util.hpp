// Helpers for device runtime tests that fork processes sharing simulated GPUs: checks that
// make a child exit non-zero (a child must not assert: gtest runs in the parent), pipes, and
// a child with an alarm so that a hung child dies instead of hanging the suite.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <functional>

#include "core/status.hpp"

namespace accord::testing {

// In a forked child: report and exit non-zero instead of asserting.
#define CHILD_CHECK(cond, ...)                                     \
  do {                                                             \
    if (!(cond)) {                                                 \
      std::fprintf(stderr, "[%s:%d] %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                           \
      std::fprintf(stderr, "\n");                                  \
      _exit(1);                                                    \
    }                                                              \
  } while (0)
#define CHILD_OK(expr)                                             \
  do {                                                             \
    Status child_st_ = (expr);                                     \
    CHILD_CHECK(child_st_.ok(), "%s", child_st_.message().c_str()); \
  } while (0)

inline bool read_all(int fd, void* buf, size_t n) {
  char* p = static_cast<char*>(buf);
  while (n) {
    ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}
inline bool write_all(int fd, const void* buf, size_t n) { return write(fd, buf, n) == static_cast<ssize_t>(n); }

inline pid_t spawn(const std::function<void()>& body) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30);  // a hung child dies instead of hanging the suite
    body();
    _exit(2);
  }
  return pid;
}

}  // namespace accord::testing
