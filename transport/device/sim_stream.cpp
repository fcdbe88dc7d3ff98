// Simulated streams (one thread each) and events; see sim_stream.hpp for the ordering rules.
#include "transport/device/sim_stream.hpp"

#include <algorithm>
#include <chrono>

namespace accord::sim {

uint64_t SimEvent::begin_record() {
  std::lock_guard<std::mutex> lock(mu_);
  return ++recorded_;
}

void SimEvent::complete(uint64_t seq) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    completed_ = std::max(completed_, seq);
  }
  cv_.notify_all();
}

uint64_t SimEvent::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return recorded_;
}

bool SimEvent::done(uint64_t seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ >= seq;
}

void SimEvent::wait_for(uint64_t seq) const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return completed_ >= seq; });
}

SimStream::SimStream(uint64_t id, int device, bool blocking) : id_(id), device_(device), blocking_(blocking) {
  thread_ = std::thread([this] { run(); });
}

SimStream::~SimStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

void SimStream::enqueue(Work work, bool always) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Item{std::move(work), always});
    ++enqueued_;
  }
  work_cv_.notify_one();
}

Status SimStream::synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = enqueued_;
  done_cv_.wait(lock, [&] { return finished_ >= target; });
  return error_;
}

bool SimStream::synchronize_for(int64_t ms, Status* out) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = enqueued_;
  if (!done_cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return finished_ >= target; })) return false;
  *out = error_;
  return true;
}

void SimStream::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Stop only once the queue is empty: destroying a stream lets its work finish.
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    Item item = std::move(queue_.front());
    queue_.pop_front();
    const bool skip = !error_.ok() && !item.always;
    lock.unlock();
    Status st = skip ? Status() : item.work();
    lock.lock();
    if (!st.ok() && error_.ok()) error_ = std::move(st);
    ++finished_;
    done_cv_.notify_all();
  }
}

}  // namespace accord::sim
