// Gradient averaging over Accord (the library's public C API only).
//
// AccordSync: one accord_all_reduce(ACCORD_AVG) per bucket, in place, started as soon as
// backward completed the bucket (grad_sync.hpp).
//
// HostAverageSync: the seeds' recipe, implemented honestly as a central CPU average. After
// backward, every rank's whole gradient goes to rank 0 (accord_all_gather: Accord has no
// gather, so the others receive the copies too), rank 0 sums them on its CPU in rank order
// and divides by the number of ranks, and accord_broadcast sends the average back.
#pragma once

#include <memory>
#include <string>

#include "accord/accord.h"
#include "trainer/grad_sync.hpp"

namespace accord::trainer {

class AccordSync : public BucketedSync {
 public:
  // Takes ownership of comm.
  AccordSync(accord_comm_t comm, bool overlap);
  ~AccordSync() override;
  std::string name() const override { return "accord"; }
  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }

 protected:
  Status average(float* data, size_t count) override;
  // Device buffers and the stream to accord_all_reduce; when this Accord build says
  // ACCORD_ERR_UNSUPPORTED (no device path), through host memory from then on, said once.
  Status average_device(float* data, size_t count, void* stream) override;
  Status broadcast_now(float* data, size_t count, int root) override;
  Status sum_now(double* data, size_t count) override;
  Status check(accord_status_t s, const char* what) const;

  accord_comm_t comm_;
  int rank_ = 0, nranks_ = 1;
  bool device_path_unsupported_ = false;
};

class HostAverageSync : public AccordSync {
 public:
  explicit HostAverageSync(accord_comm_t comm) : AccordSync(comm, false) {}
  std::string name() const override { return "host-average"; }
  // The whole gradient in one exchange, as the seeds' average_gradients does.
  void set_buckets(float* grads, std::vector<Bucket> buckets) override;

 protected:
  Status average(float* data, size_t count) override;
  // The seeds' method averages on a CPU: device gradients always go through host memory.
  Status average_device(float* data, size_t count, void* /*stream*/) override {
    return average_via_host(data, count);
  }

 private:
  std::vector<float> gathered_;
};

// Joins the job described by the launcher's environment (mpirun, torchrun-style variables,
// or none: a single rank) and returns the sync for `mode` ("accord" or "host-average").
Status create_sync(const std::string& mode, bool overlap, std::unique_ptr<GradSync>* out);

}  // namespace accord::trainer
