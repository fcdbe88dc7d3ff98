// Monotonic time and deadlines. Every wait in Accord takes a Deadline, so that no call blocks
// forever (see RELIABILITY.md).
#pragma once

#include <time.h>

#include <cstdint>

namespace accord {

inline int64_t to_ns(const timespec& ts) {
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

inline int64_t read_clock_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return to_ns(ts);
}

inline int64_t now_ns() { return read_clock_ns(CLOCK_MONOTONIC); }

// CLOCK_MONOTONIC_COARSE: the same clock, read without the time counter, so it lags by up to
// one tick (its resolution, 4 ms here) and costs 6 ns where now_ns() costs 27 (AMD EPYC VM).
inline int64_t coarse_now_ns() { return read_clock_ns(CLOCK_MONOTONIC_COARSE); }

inline int64_t coarse_tick_ns() {
  static const int64_t tick = [] {
    timespec res{};
    clock_getres(CLOCK_MONOTONIC_COARSE, &res);
    return to_ns(res);
  }();
  return tick;
}

class Deadline {
 public:
  Deadline() = default;  // never expires
  static Deadline after_ms(int64_t ms) { return at(now_ns(), ms); }
  // For every collective call, where a fine clock reading is a tenth of a small call: never
  // earlier than after_ms(ms), at most one coarse tick later.
  static Deadline after_ms_coarse(int64_t ms) { return at(coarse_now_ns() + coarse_tick_ns(), ms); }
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
  static Deadline at(int64_t start_ns, int64_t ms) {
    Deadline d;
    d.at_ns_ = start_ns + ms * 1000000LL;
    d.budget_ms_ = ms;
    return d;
  }

  static constexpr int64_t kNever = INT64_MAX;
  int64_t at_ns_ = kNever;
  int64_t budget_ms_ = 0;
};

}  // namespace accord
