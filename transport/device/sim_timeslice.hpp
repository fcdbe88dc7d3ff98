// Note [Simulated time slices]: without MPS a GPU runs the kernels of one process (one CUDA
// context) at a time; when kernels of another process wait, the running process is switched
// out at the end of its time slice (about 2 ms). A kernel that spins on a word which the
// other process's kernel writes therefore makes progress only through a slice expiry: every
// hand-off costs a slice (issue 34). The simulation models it, opt-in
// (SimOptions::timeslice_us, with a TimeSlices table shared by the processes):
//  - a simulated kernel (launch_kernel's host body) holds its GPU's slice from its start to
//    its end; kernels of the process that holds it run at once, kernels of another process
//    wait for it (failing after ACCORD_SIM_STALL_MS with the holder's pid, instead of hanging,
//    when the holder never yields);
//  - a kernel is switched out only where it calls timeslice_point() (the host body's spin
//    loops do, between two polls of a flag): there, when it has held the slice for at least
//    timeslice_us and a kernel of another process waits, it gives the slice up (an expiry),
//    waits until the other process's kernels ended or were switched out in turn, and goes on;
//  - a process that was switched out does not take the slice back while another process
//    waits for it (round robin between two processes);
//  - nothing else holds a slice: a stream waiting in stream_wait_value*, an event wait, a copy
//    or a memset does not, so a hand-off through stream memory operations costs no expiry.
// Each GPU counts switches (the slice went to a different process than the one before),
// expiries, and early yields (the holder's last kernel ended while another process waited);
// tests assert those counts, never wall-clock times. The collective kernel's host lanes
// (collectives/device/dev_host.cpp) call timeslice_point() at every poll.
//
// The table lives in a shared mapping of a memfd. Processes forked after it was made share it
// (tests make it before they fork ranks: SimOptions::slices, or, for runtimes made from the
// settings (ACCORD_SIM_TIMESLICE_US), TimeSlices::process_table()). Processes that are not
// forked from a common parent (mpirun, torchrun) each start with a table of their own; a
// communicator's init then makes every rank on the host use the table of its lowest rank with
// a GPU (Note [Simulated time slices of a job], device/engine.cpp), opened through
// /proc/<pid>/fd/<fd> as the simulated IPC handles are.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "core/status.hpp"

namespace accord::sim {

struct SliceCounts {
  uint64_t switches = 0;  // the slice went to a different process than the last holder
  uint64_t expiries = 0;  // a holder was switched out because another process waited
  uint64_t yields = 0;    // a holder's last kernel ended while another process waited (no expiry)
};

class TimeSlices {
 public:
  // A table for `gpus` simulated GPUs in an anonymous MAP_SHARED mapping: processes forked
  // after this share it. Null (with *why) when the mapping fails.
  static std::shared_ptr<TimeSlices> create(int gpus, std::string* why = nullptr);
  // The table of this process for ACCORD_SIM_TIMESLICE_US (kProcessGpus GPUs), made on the
  // first call: processes forked after that call share it. A parent that forks ranks calls it
  // before forking, and reads the counts once they are done. Null when the mapping fails.
  static constexpr int kProcessGpus = 64;
  static std::shared_ptr<TimeSlices> process_table(std::string* why = nullptr);
  // Processes that were not forked from a common parent after the table existed (mpirun,
  // torchrun) share one through a rendezvous: one publishes handle() (its pid, the table's
  // memfd and its inode), the others open() it through /proc/<pid>/fd. Null (with *why) when
  // the process is gone or the fd is no longer the table. same(): the handle names this table.
  std::string handle() const;
  static std::shared_ptr<TimeSlices> open(const std::string& handle, std::string* why = nullptr);
  bool same(const std::string& handle) const;
  ~TimeSlices();
  TimeSlices(const TimeSlices&) = delete;
  TimeSlices& operator=(const TimeSlices&) = delete;

  int gpus() const { return gpus_; }
  SliceCounts counts(int gpu) const;

  struct Gpu;  // the shared state of one GPU (sim_timeslice.cpp)
  Gpu* gpu(int g) const;  // null when g is out of range
  // Kernels of this process waiting for GPU g's slice (process-local: a fork has its own).
  std::atomic<uint32_t>& my_waiting(int g) { return my_waiting_[g]; }

 private:
  TimeSlices() = default;
  static std::shared_ptr<TimeSlices> map(int fd, size_t bytes, std::string* why);  // takes fd
  static constexpr const char* kMemfdName = "accord-sim-timeslices";
  int fd_ = -1;
  int gpus_ = 0;
  Gpu* table_ = nullptr;
  size_t bytes_ = 0;
  std::unique_ptr<std::atomic<uint32_t>[]> my_waiting_;
};

// One running simulated kernel's hold on its GPU's slice.
class KernelSlice {
 public:
  KernelSlice(std::shared_ptr<TimeSlices> slices, int gpu, int64_t timeslice_us, int64_t stall_ms,
              std::string kernel);
  ~KernelSlice();  // leaves the slice if held
  // Waits for the slice (the kernel's start). Fails after stall_ms naming the holder.
  Status enter();
  // A switch point: gives the slice up when it expired and another process waits, then waits
  // to get it back. False (and status() set) when that wait failed: the kernel should stop.
  bool point();
  void leave();
  const Status& status() const { return error_; }

 private:
  Status acquire();
  std::shared_ptr<TimeSlices> slices_;
  const int gpu_;
  const int64_t slice_ns_;
  const int64_t stall_ms_;
  const std::string kernel_;
  std::mutex mu_;  // the kernel's blocks call point() from several threads
  bool held_ = false;
  Status error_;
};

// The calling thread runs (a block of) this kernel; point() below acts on it. Set by the
// simulated launch on the stream's thread; a kernel body that runs blocks on threads of its
// own passes current_kernel_slice() to them and adopts it there.
KernelSlice* current_kernel_slice();
class AdoptKernelSlice {
 public:
  explicit AdoptKernelSlice(KernelSlice* slice);
  ~AdoptKernelSlice();
  AdoptKernelSlice(const AdoptKernelSlice&) = delete;
  AdoptKernelSlice& operator=(const AdoptKernelSlice&) = delete;

 private:
  KernelSlice* previous_;
};

// Called by a simulated kernel between two polls of a flag: the time-slice switch point. True
// at once when the model is off or the thread runs no simulated kernel (a real GPU's kernel
// never calls it). False when the kernel could not get its slice back (stall): it should stop.
bool timeslice_point();

}  // namespace accord::sim
