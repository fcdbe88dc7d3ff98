// Monotonic time and deadlines. Every wait in Accord takes a Deadline, so that no call blocks
// forever (see RELIABILITY.md).
#pragma once

#include <time.h>

#include <cstdint>

namespace accord {

inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

class Deadline {
 public:
  Deadline() = default;  // never expires
  static Deadline after_ms(int64_t ms) {
    Deadline d;
    d.at_ns_ = now_ns() + ms * 1000000LL;
    d.budget_ms_ = ms;
    return d;
  }
  static Deadline never() { return Deadline(); }

  bool expired() const { return at_ns_ != kNever && now_ns() >= at_ns_; }
  bool expired_at(int64_t t_ns) const { return at_ns_ != kNever && t_ns >= at_ns_; }
  // Milliseconds left, clamped to [0, cap]; cap when it never expires.
  int remaining_ms(int cap = 1 << 30) const {
    if (at_ns_ == kNever) return cap;
    int64_t left = (at_ns_ - now_ns() + 999999) / 1000000;
    if (left < 0) return 0;
    return left > cap ? cap : static_cast<int>(left);
  }
  int64_t at_ns() const { return at_ns_; }
  // The budget it was made with, for messages ("after 60000 ms").
  int64_t budget_ms() const { return budget_ms_; }

 private:
  static constexpr int64_t kNever = INT64_MAX;
  int64_t at_ns_ = kNever;
  int64_t budget_ms_ = 0;
};

}  // namespace accord
