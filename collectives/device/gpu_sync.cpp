// Note [Shared GPU sync]: how the direct protocol's ranks hand off to each other (issue 34).
// Without MPS a GPU runs one process's kernels at a time, in time slices (about 2 ms): a
// kernel that polls a flag which another process's kernel writes waits for the end of its
// slice at every hand-off (2.3 ms a hand-off, measured on an H200). The waiting protocol
// (Note [Waiting protocol], direct_call.hpp) hands off through the stream instead: a stream
// blocked in a wait holds no slice. Where every rank's kernel runs at once (MPS, threads of
// one process, one GPU each) spinning in the kernel is cheaper: one launch a call, no stream
// operation.
//
// ACCORD_SHARED_GPU_SYNC=spin|wait forces one; auto (the default) picks wait where some GPU of
// the job is shared by ranks of different processes and is time-sliced, spin elsewhere:
//  - with CUDA, time-sliced means MPS does not run (its control pipe is absent: mps_running,
//    the check of the init warning, Note [Shared GPU warnings]);
//  - with simulated GPUs, it means ACCORD_SIM_TIMESLICE_US > 0: the simulation models a GPU
//    without MPS only then (Note [Simulated time slices]); with 0 kernels of every process run
//    at once, as under MPS.
// Each rank knows only its own GPU, so every rank all-gathers its view and takes one answer
// (wait when any rank's GPU is time-sliced), so every rank launches the same kernels and
// waits. The setting itself is one every rank shares (Note [Settings every rank shares]). The
// choice applies to jobs on the direct protocol, which runs every collective of such a job
// (pre-multiplied sums too), and to every job's FIFO kernels: sends and receives, and the
// collectives of jobs on the FIFOs (ranks on other hosts, ACCORD_DEVICE_PROTO=fifo), which wait
// at stream level between kernels (Note [Waiting FIFOs], fifo_wait.cpp). Only a job that spins
// on a time-sliced GPU keeps the init warning about time slices.
//
// Note [Simulated time slices of a job]: the simulation slices a GPU between the processes
// that share one table (Note [Simulated time slices], transport/device/sim_timeslice.hpp).
// Processes forked after their parent made it share it from the start; processes started
// apart (mpirun, torchrun) each made their own. So at init, once the ranks know which of them
// share a host (local_ranks_) and have GPUs, the lowest such rank publishes its table's handle
// in the job's store and every other rank on the host with ACCORD_SIM_TIMESLICE_US > 0 opens
// that table (through /proc/<pid>/fd, as simulated IPC does) and launches its kernels in it
// from then on. The key is the job's store and the rank, so two jobs never share a table, and
// ranks forked from one parent find the table they already share (a no-op); a table that
// cannot be opened is a warning (the kernels are then not sliced against it). Not handled:
// communicators whose processes already use two different tables (two jobs' worth of ranks
// that a later communicator joins) keep them.
#include <strings.h>

#include <algorithm>

#include "collectives/communicator.hpp"
#include "collectives/device/direct.hpp"
#include "core/log.hpp"
#include "transport/device/sim_runtime.hpp"

namespace accord {

namespace dev {
bool parse_gpu_sync(const std::string& text, GpuSync* out) {
  GpuSync m;
  if (text.empty() || strcasecmp(text.c_str(), "auto") == 0)
    m = GpuSync::kAuto;
  else if (strcasecmp(text.c_str(), "spin") == 0)
    m = GpuSync::kSpin;
  else if (strcasecmp(text.c_str(), "wait") == 0)
    m = GpuSync::kWait;
  else
    return false;
  if (out != nullptr) *out = m;
  return true;
}
}  // namespace dev

bool DeviceEngine::gpu_time_sliced() const {
  if (device_ < 0) return false;
  bool shared = false;
  for (int r : local_ranks_)
    shared = shared || (r != rank_ && same_gpu(r, rank_) && !same_process(r, rank_));
  if (!shared) return false;
  if (rt_ != nullptr && std::string(rt_->kind()) == "simulated")
    return settings_.sim_timeslice_us > 0;
  return !mps_running();
}

Status DeviceEngine::share_sim_slices(StoreClient* store, Deadline deadline) {
  auto* sim = dynamic_cast<SimulatedRuntime*>(rt_);
  if (device_ < 0 || sim == nullptr) return Status::success();
  int lowest = -1;
  for (int r : local_ranks_)
    if (device_of_[static_cast<size_t>(r)] >= 0 && (lowest < 0 || r < lowest)) lowest = r;
  const std::string key = format("sim_slices/%d", lowest);
  if (lowest == rank_) return store->set(key, sim->slices_handle());
  if (lowest < 0 || settings_.sim_timeslice_us <= 0) return Status::success();
  std::string handle;
  ACCORD_TRY(store->get(key, &handle, deadline, format("rank %d", lowest)));
  // A table that cannot be opened (rank `lowest` in another pid namespace, say) only leaves
  // this process's kernels unsliced against it: a warning, not a failed init.
  const Status s = sim->adopt_slices(handle);
  if (!s.ok())
    LOG_WARN(kGpu, "rank %d: simulated GPU time slices: rank %d's table is not shared, so this process's kernels "
             "are not sliced against its: %s", rank_, lowest, s.message().c_str());
  return Status::success();
}

Status DeviceEngine::choose_gpu_sync(StoreClient* store, Deadline deadline, bool* wait,
                                     std::string* why) {
  dev::GpuSync mode = dev::GpuSync::kAuto;
  (void)dev::parse_gpu_sync(settings_.shared_gpu_sync, &mode);  // checked in configure()
  const bool sliced = gpu_time_sliced();
  std::vector<std::string> all;
  ACCORD_TRY(store->all_gather("gpu_sync", rank_, nranks_, sliced ? "1" : "0", &all, deadline));
  std::vector<int> sliced_ranks;
  for (int r = 0; r < nranks_; ++r)
    if (all[static_cast<size_t>(r)] == "1") sliced_ranks.push_back(r);
  std::string list;
  for (int r : sliced_ranks) list += format("%s%d", list.empty() ? "" : ",", r);
  const bool sim = rt_ != nullptr && std::string(rt_->kind()) == "simulated";
  const std::string where =
      sliced_ranks.empty() ? std::string(sim ? "no simulated GPU is time-sliced "
                                               "(ACCORD_SIM_TIMESLICE_US=0, or no GPU shared by "
                                               "processes)"
                                             : "no GPU is shared by processes without MPS")
                           : format("ranks %s share a GPU with other processes %s", list.c_str(),
                                    sim ? "in time slices (ACCORD_SIM_TIMESLICE_US)"
                                        : "and MPS does not run (time slices)");
  switch (mode) {
    case dev::GpuSync::kSpin:
      *wait = false;
      *why = "ACCORD_SHARED_GPU_SYNC=spin; " + where;
      break;
    case dev::GpuSync::kWait:
      *wait = true;
      *why = "ACCORD_SHARED_GPU_SYNC=wait; " + where;
      break;
    default:
      *wait = !sliced_ranks.empty();
      *why = "auto: " + where;
  }
  return Status::success();
}

}  // namespace accord
