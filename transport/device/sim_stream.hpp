// Simulated streams and events. A stream is an ordered work queue with its own thread: enqueue
// returns at once, the thread runs the work in order, synchronize waits for what was enqueued
// before it. An event counts its records: recording takes the next sequence number and
// enqueues "mark it complete"; waiting on an event takes the latest sequence number at the
// time of the call and enqueues "block until that number completed". Since the record being
// waited for was enqueued before the wait, waits never form cycles and cannot deadlock.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "core/status.hpp"

namespace accord::sim {

class SimEvent {
 public:
  SimEvent(uint64_t id, int device) : id_(id), device_(device) {}
  uint64_t id() const { return id_; }
  int device() const { return device_; }

  // A new record: returns its sequence number, to pass to complete() when it is reached.
  uint64_t begin_record();
  void complete(uint64_t seq);
  // The latest record (0: never recorded).
  uint64_t latest() const;
  bool done(uint64_t seq) const;
  void wait_for(uint64_t seq) const;

 private:
  const uint64_t id_;
  const int device_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  uint64_t recorded_ = 0;
  // Records may complete out of order (on different streams); an event is "done up to" the
  // largest completed number, as a CUDA event reflects only its latest record.
  uint64_t completed_ = 0;
};

class SimStream {
 public:
  using Work = std::function<Status()>;

  // `blocking`: a stream made as cudaStreamCreate makes one, which synchronizes with the
  // legacy default stream (Note [Simulated CUDA rules], sim_runtime.hpp); the library's own
  // streams are non-blocking.
  SimStream(uint64_t id, int device, bool blocking = false);
  // Runs what is queued, then stops the thread.
  ~SimStream();
  SimStream(const SimStream&) = delete;
  SimStream& operator=(const SimStream&) = delete;

  uint64_t id() const { return id_; }
  int device() const { return device_; }
  bool blocking() const { return blocking_; }

  // `always`: run even on a broken stream (event records, so waiters elsewhere never hang).
  void enqueue(Work work, bool always = false);
  // Waits for everything enqueued so far; returns the first error of this stream's work.
  // After an error the stream skips its remaining work (it is broken, as a CUDA stream after a
  // fault) and every synchronize returns that error.
  Status synchronize();
  // As synchronize, for at most `ms`: false if the work enqueued so far has not finished by then.
  bool synchronize_for(int64_t ms, Status* out);
  // Ends this stream's waits on words (stream_wait_value*), running or queued, with an error:
  // the stream or its runtime is being destroyed, and the simulation joins the stream's thread
  // where a GPU would leave the wait pending for ever.
  void cancel_waits() { cancelled_.store(true, std::memory_order_release); }
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

 private:
  void run();

  const uint64_t id_;
  const int device_;
  const bool blocking_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  struct Item {
    Work work;
    bool always;
  };
  std::deque<Item> queue_;
  uint64_t enqueued_ = 0;
  uint64_t finished_ = 0;
  bool stopping_ = false;
  std::atomic<bool> cancelled_{false};
  Status error_;
  std::thread thread_;
};

}  // namespace accord::sim
