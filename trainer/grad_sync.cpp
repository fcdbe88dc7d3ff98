// Buckets and the communication thread (grad_sync.hpp).
#include "trainer/grad_sync.hpp"

#include <chrono>

namespace accord::trainer {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<Bucket> make_buckets(const std::vector<ParamRange>& ranges, size_t bucket_bytes) {
  std::vector<Bucket> out;
  Bucket cur;
  bool open = false;
  for (size_t i = ranges.size(); i-- > 0;) {
    const ParamRange& r = ranges[i];
    // Backward order walks the flat buffer downwards, so a bucket grows at its front.
    if (!open) {
      cur = Bucket{r.offset, r.count, r.layer};
      open = true;
    } else {
      cur.offset = r.offset;
      cur.count += r.count;
      cur.ready_layer = r.layer;
    }
    if (cur.count * sizeof(float) >= bucket_bytes) {
      out.push_back(cur);
      open = false;
    }
  }
  if (open) out.push_back(cur);
  return out;
}

CommWorker::CommWorker() : thread_([this] { loop(); }) {}

CommWorker::~CommWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CommWorker::submit(std::function<Status()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
    ++pending_;
  }
  cv_.notify_all();
}

Status CommWorker::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return pending_ == 0; });
  return error_;
}

void CommWorker::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    std::function<Status()> job = std::move(queue_.front());
    queue_.pop_front();
    const bool skip = !error_.ok();
    lock.unlock();
    Status s = skip ? ok_status() : job();
    lock.lock();
    if (!s.ok() && error_.ok()) error_ = s;
    --pending_;
    cv_.notify_all();
  }
}

Status BucketedSync::broadcast(float* data, size_t count, int root) {
  worker_.submit([=, this] { return broadcast_now(data, count, root); });
  return worker_.wait();
}

Status BucketedSync::sum(double* data, size_t count) {
  worker_.submit([=, this] { return sum_now(data, count); });
  return worker_.wait();
}

void BucketedSync::set_buckets(float* grads, std::vector<Bucket> buckets) {
  grads_ = grads;
  buckets_ = std::move(buckets);
  submitted_ = 0;
}

Status BucketedSync::average_device(float* data, size_t count, void* /*stream*/) {
  return average_via_host(data, count);
}

Status BucketedSync::average_via_host(float* data, size_t count) {
  staging_.resize(count);
  TRAINER_TRY(device_->to_host(data, staging_.data(), count));
  TRAINER_TRY(average(staging_.data(), count));
  return device_->to_device(staging_.data(), data, count);
}

void BucketedSync::submit_bucket(size_t index) {
  const Bucket b = buckets_[index];
  float* data = grads_ + b.offset;
  if (device_ != nullptr) {
    if (Status s = device_->mark_ready(index); !s.ok()) {
      worker_.submit([s] { return s; });
      return;
    }
  }
  worker_.submit([this, data, b, index] {
    const auto t0 = std::chrono::steady_clock::now();
    Status s;
    if (device_ == nullptr) {
      s = average(data, b.count);
    } else {
      void* stream = nullptr;
      s = device_->wait_ready(index, &stream);
      if (s.ok()) s = average_device(data, b.count, stream);
    }
    const double dt = seconds_since(t0);
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.comm_seconds += dt;
    stats_.bytes += b.count * sizeof(float);
    return s;
  });
}

void BucketedSync::bucket_ready(size_t index) {
  if (!overlap_) return;
  // Buckets are reported in order; submit them in that same order on every rank so that
  // the ranks' collectives match.
  submit_bucket(index);
  submitted_ = index + 1;
}

Status BucketedSync::finish() {
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = submitted_; i < buckets_.size(); ++i) submit_bucket(i);
  submitted_ = 0;
  Status s = worker_.wait();
  if (s.ok() && device_ != nullptr) s = device_->join();
  const double dt = seconds_since(t0);
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.wait_seconds += dt;
  return s;
}

SyncStats BucketedSync::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

}  // namespace accord::trainer
