// AccordSync and HostAverageSync (accord_sync.hpp).
#include "trainer/accord_sync.hpp"

#include <cstdio>

namespace accord::trainer {

AccordSync::AccordSync(accord_comm_t comm, bool overlap) : BucketedSync(overlap), comm_(comm) {
  (void)accord_comm_rank(comm_, &rank_);
  (void)accord_comm_count(comm_, &nranks_);
}

AccordSync::~AccordSync() {
  (void)worker_.wait();
  (void)accord_comm_destroy(comm_);
}

Status AccordSync::check(accord_status_t s, const char* what) const {
  if (s == ACCORD_SUCCESS) return ok_status();
  return Status::error("rank " + std::to_string(rank_) + ": " + what + " failed: " +
                       accord_status_string(s) + ": " + accord_last_error(comm_));
}

Status AccordSync::average(float* data, size_t count) {
  return check(accord_all_reduce(data, data, count, ACCORD_FLOAT32, ACCORD_AVG, comm_, nullptr),
               "gradient all-reduce");
}

Status AccordSync::average_device(float* data, size_t count, void* stream) {
  if (!device_path_unsupported_) {
    const accord_status_t s = accord_all_reduce(data, data, count, ACCORD_FLOAT32, ACCORD_AVG, comm_, stream);
    if (s != ACCORD_ERR_UNSUPPORTED) return check(s, "gradient all-reduce (device buffers)");
    device_path_unsupported_ = true;
    if (rank_ == 0)
      std::fprintf(stderr, "accord-train: accord_all_reduce does not take device buffers in this build (%s); "
                   "gradient buckets go through host memory (copy to host, all-reduce, copy back)\n",
                   accord_last_error(comm_));
  }
  return average_via_host(data, count);
}

Status AccordSync::broadcast_now(float* data, size_t count, int root) {
  return check(accord_broadcast(data, data, count, ACCORD_FLOAT32, root, comm_, nullptr), "broadcast");
}

Status AccordSync::sum_now(double* data, size_t count) {
  return check(accord_all_reduce(data, data, count, ACCORD_FLOAT64, ACCORD_SUM, comm_, nullptr),
               "metrics all-reduce");
}

void HostAverageSync::set_buckets(float* grads, std::vector<Bucket> buckets) {
  size_t total = 0;
  for (const Bucket& b : buckets) total += b.count;
  std::vector<Bucket> one;
  if (!buckets.empty()) one.push_back(Bucket{0, total, buckets.back().ready_layer});
  BucketedSync::set_buckets(grads, std::move(one));
}

Status HostAverageSync::average(float* data, size_t count) {
  gathered_.resize(count * nranks_);
  if (Status s = check(accord_all_gather(data, gathered_.data(), count, ACCORD_FLOAT32, comm_, nullptr),
                       "host-average gather");
      !s.ok())
    return s;
  if (rank_ == 0) {
    // The central CPU average: sum over ranks in rank order, then divide (as ACCORD_AVG).
    std::copy(gathered_.begin(), gathered_.begin() + count, data);
    for (int r = 1; r < nranks_; ++r) {
      const float* g = gathered_.data() + static_cast<size_t>(r) * count;
      for (size_t i = 0; i < count; ++i) data[i] += g[i];
    }
    const float n = static_cast<float>(nranks_);
    for (size_t i = 0; i < count; ++i) data[i] /= n;
  }
  return check(accord_broadcast(data, data, count, ACCORD_FLOAT32, 0, comm_, nullptr),
               "host-average broadcast");
}

Status create_sync(const std::string& mode, bool overlap, std::unique_ptr<GradSync>* out) {
  if (mode != "accord" && mode != "host-average")
    return Status::error("unknown --sync '" + mode + "' (expected accord or host-average)");
  accord_comm_t comm = nullptr;
  const accord_status_t s = accord_comm_init_from_env(&comm);
  if (s != ACCORD_SUCCESS)
    return Status::error(std::string("cannot join the job (accord_comm_init_from_env): ") +
                         accord_status_string(s) + ": " + accord_last_error(nullptr));
  if (mode == "accord")
    *out = std::make_unique<AccordSync>(comm, overlap);
  else
    *out = std::make_unique<HostAverageSync>(comm);
  return ok_status();
}

}  // namespace accord::trainer
