// How ranks agree on gradients (and on everything else they must share): the seam between
// the training loop and the communication library.
//
// Gradients are fused into buckets: contiguous ranges of the model's flat gradient buffer,
// each made of whole layers, filled in backward order (last layer first) up to a size.
// Backward reports a bucket as soon as its last-computed layer is done, and a communication
// thread averages it while backward goes on with earlier layers (overlap). finish() waits
// for every bucket. Everything that talks to the other ranks runs on that one thread, so a
// communicator is never used by two threads at once.
//
// Implementations: LocalSync (one process, nothing to do; for tests and as a reference),
// and, in accord_sync.hpp, AccordSync (all-reduce with ACCORD_AVG per bucket, overlapped)
// and HostAverageSync (the seeds' method: every gradient to one CPU, averaged there, sent
// back; after backward, not overlapped).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "trainer/model.hpp"
#include "trainer/status.hpp"

namespace accord::trainer {

struct Bucket {
  size_t offset = 0;       // first element in the flat gradient buffer
  size_t count = 0;        // elements
  size_t ready_layer = 0;  // the bucket is complete once backward finished this layer
};

// Whole layers in backward order, a bucket closed as soon as it holds >= bucket_bytes.
std::vector<Bucket> make_buckets(const std::vector<ParamRange>& ranges, size_t bucket_bytes);

struct SyncStats {
  double comm_seconds = 0;  // time the communication thread spent on gradient collectives
  double wait_seconds = 0;  // time training waited for them (communication not hidden)
  uint64_t bytes = 0;       // gradient bytes averaged
};

// Gradients in device memory (the GPU backend, gpu_backend.hpp): what the communication
// thread needs to average buckets that a GPU computes. Backward runs asynchronously on a
// compute stream; collectives run on a separate communication stream (cudaStream_t, passed
// as void* so that this file needs no CUDA).
class DeviceGradients {
 public:
  virtual ~DeviceGradients() = default;
  // Training thread, when a bucket is submitted: marks the point on the compute stream after
  // which the bucket's gradients are final.
  virtual Status mark_ready(size_t bucket) = 0;
  // Communication thread: the communication stream waits for that point; *stream is the
  // stream to hand to the collective.
  virtual Status wait_ready(size_t bucket, void** stream) = 0;
  // Communication thread, synchronous, on the communication stream.
  virtual Status to_host(const float* device, float* host, size_t count) = 0;
  virtual Status to_device(const float* host, float* device, size_t count) = 0;
  // Training thread, in finish(): later work on the compute stream waits for every
  // collective started on the communication stream.
  virtual Status join() = 0;
};

class GradSync {
 public:
  virtual ~GradSync() = default;
  virtual std::string name() const = 0;
  virtual int rank() const = 0;
  virtual int nranks() const = 0;

  // Blocking collectives for setup and metrics.
  virtual Status broadcast(float* data, size_t count, int root) = 0;
  virtual Status sum(double* data, size_t count) = 0;

  // Gradient averaging: set_buckets once, then per step bucket_ready() for each bucket in
  // order as backward completes it, and finish() before using the gradients.
  virtual void set_buckets(float* grads, std::vector<Bucket> buckets) = 0;
  // grads (of set_buckets) are device memory reached through device; nullptr: host memory.
  virtual void set_device(DeviceGradients* device) = 0;
  virtual void bucket_ready(size_t index) = 0;
  virtual Status finish() = 0;
  virtual SyncStats stats() const = 0;
};

class LocalSync : public GradSync {
 public:
  std::string name() const override { return "local"; }
  int rank() const override { return 0; }
  int nranks() const override { return 1; }
  Status broadcast(float*, size_t, int) override { return ok_status(); }
  Status sum(double*, size_t) override { return ok_status(); }
  void set_buckets(float*, std::vector<Bucket>) override {}
  void set_device(DeviceGradients*) override {}
  void bucket_ready(size_t) override {}
  Status finish() override { return ok_status(); }
  SyncStats stats() const override { return {}; }
};

// Runs jobs in order on one thread. After a job fails, later ones are skipped (a collective
// that other ranks will not join would only wait for its timeout) and wait() returns the
// first error.
class CommWorker {
 public:
  CommWorker();
  ~CommWorker();
  CommWorker(const CommWorker&) = delete;
  CommWorker& operator=(const CommWorker&) = delete;

  void submit(std::function<Status()> job);
  Status wait();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<Status()>> queue_;
  size_t pending_ = 0;
  bool stop_ = false;
  Status error_;
  std::thread thread_;
};

// Buckets + communication thread; subclasses say how a range is averaged.
class BucketedSync : public GradSync {
 public:
  // overlap == false: nothing starts before finish() (as a graph that averages after the
  // whole backward, like the seeds' average_gradients).
  explicit BucketedSync(bool overlap) : overlap_(overlap) {}

  Status broadcast(float* data, size_t count, int root) override;
  Status sum(double* data, size_t count) override;
  void set_buckets(float* grads, std::vector<Bucket> buckets) override;
  void set_device(DeviceGradients* device) override { device_ = device; }
  void bucket_ready(size_t index) override;
  Status finish() override;
  SyncStats stats() const override;

 protected:
  // Run on the communication thread.
  virtual Status average(float* data, size_t count) = 0;
  // A bucket in device memory, once the communication stream waits for it. By default
  // through host memory (average_via_host); subclasses may hand the device buffer and the
  // stream to the library.
  virtual Status average_device(float* data, size_t count, void* stream);
  // Copies the bucket to host memory, average()s it there and copies it back.
  Status average_via_host(float* data, size_t count);
  virtual Status broadcast_now(float* data, size_t count, int root) = 0;
  virtual Status sum_now(double* data, size_t count) = 0;

  // Subclasses must call worker_.wait() in their destructor, before the state its jobs use
  // (the communicator) goes away.
  CommWorker worker_;

 private:
  void submit_bucket(size_t index);

  bool overlap_;
  DeviceGradients* device_ = nullptr;
  std::vector<float> staging_;  // host copy of a device bucket (communication thread only)
  float* grads_ = nullptr;
  std::vector<Bucket> buckets_;
  size_t submitted_ = 0;
  mutable std::mutex stats_mu_;
  SyncStats stats_;
};

}  // namespace accord::trainer
