// Simulated GPU time slices between processes: Note [Simulated time slices] (sim_timeslice.hpp).
#include "transport/device/sim_timeslice.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>

namespace accord::sim {

// One GPU's slice, in memory shared by the processes. The fields after `lock` are read and
// written only under it (a spin lock: the critical sections are a few instructions, and a
// pthread mutex would need robust-mutex handling for a process killed inside one).
struct alignas(64) TimeSlices::Gpu {
  std::atomic<uint32_t> lock{0};
  int32_t owner = 0;       // pid whose kernels hold the slice; 0: free
  uint32_t running = 0;    // kernels of `owner` inside the slice
  uint32_t waiting = 0;    // kernels (of every process) waiting for the slice
  int32_t barred = 0;      // pid switched out last: takes the slice back only when nobody else waits
  int32_t last_owner = 0;  // for counting switches
  int64_t since_ns = 0;    // when `owner`'s slice began
  uint64_t switches = 0;
  uint64_t expiries = 0;
  uint64_t yields = 0;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "the slice lock is shared between processes");

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class SliceLock {
 public:
  explicit SliceLock(TimeSlices::Gpu* g) : g_(g) {
    for (uint32_t spins = 0; g_->lock.exchange(1, std::memory_order_acquire) != 0; ++spins)
      if (spins > 64) sched_yield();
  }
  ~SliceLock() { g_->lock.store(0, std::memory_order_release); }

 private:
  TimeSlices::Gpu* g_;
};

void backoff(uint32_t spins) {
  if (spins < 256)
    sched_yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(20));
}

thread_local KernelSlice* t_kernel_slice = nullptr;

}  // namespace

std::shared_ptr<TimeSlices> TimeSlices::create(int gpus, std::string* why) {
  if (gpus <= 0) {
    if (why) *why = "no simulated GPUs";
    return nullptr;
  }
  const size_t bytes = sizeof(Gpu) * static_cast<size_t>(gpus);
  // A memfd (Note [Simulated time slices]: processes not forked from this one open it through
  // /proc/<pid>/fd, as the simulated IPC handles do); close-on-exec, kept by forks.
  const int fd = memfd_create(kMemfdName, MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    if (why) *why = std::string("memfd of the time-slice table: ") + std::strerror(errno);
    if (fd >= 0) close(fd);
    return nullptr;
  }
  std::shared_ptr<TimeSlices> t = map(fd, bytes, why);
  if (t) {
    for (int g = 0; g < gpus; ++g) new (t->table_ + g) Gpu();
  }
  return t;
}

std::shared_ptr<TimeSlices> TimeSlices::map(int fd, size_t bytes, std::string* why) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    if (why) *why = std::string("mmap of the time-slice table: ") + std::strerror(errno);
    close(fd);
    return nullptr;
  }
  const int gpus = static_cast<int>(bytes / sizeof(Gpu));
  std::shared_ptr<TimeSlices> t(new TimeSlices());
  t->fd_ = fd;
  t->gpus_ = gpus;
  t->bytes_ = bytes;
  t->table_ = static_cast<Gpu*>(p);
  t->my_waiting_.reset(new std::atomic<uint32_t>[static_cast<size_t>(gpus)]);
  for (int g = 0; g < gpus; ++g) t->my_waiting_[g].store(0);
  return t;
}

std::string TimeSlices::handle() const {
  struct stat st;
  if (fd_ < 0 || fstat(fd_, &st) != 0) return "";
  return std::to_string(getpid()) + ":" + std::to_string(fd_) + ":" + std::to_string(st.st_ino);
}

bool TimeSlices::same(const std::string& handle) const {
  const std::string mine = this->handle();
  const size_t a = mine.rfind(':'), b = handle.rfind(':');
  return !mine.empty() && b != std::string::npos && mine.substr(a) == handle.substr(b);
}

std::shared_ptr<TimeSlices> TimeSlices::open(const std::string& handle, std::string* why) {
  long pid = 0, fd = 0;
  unsigned long long ino = 0;
  if (std::sscanf(handle.c_str(), "%ld:%ld:%llu", &pid, &fd, &ino) != 3) {
    if (why) *why = "malformed time-slice table handle '" + handle + "'";
    return nullptr;
  }
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int mine = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (mine < 0) {
    if (why) *why = "opening " + path + " (the time-slice table of process " + std::to_string(pid) + "): " +
                    std::strerror(errno);
    return nullptr;
  }
  struct stat st;
  // The fd number and the pid may have been reused since: the inode says whether it is the table.
  if (fstat(mine, &st) != 0 || st.st_ino != ino || st.st_size <= 0 ||
      static_cast<size_t>(st.st_size) % sizeof(Gpu) != 0) {
    if (why) *why = path + " is no longer process " + std::to_string(pid) + "'s time-slice table";
    close(mine);
    return nullptr;
  }
  return map(mine, static_cast<size_t>(st.st_size), why);
}

std::shared_ptr<TimeSlices> TimeSlices::process_table(std::string* why) {
  static std::mutex mu;
  static std::shared_ptr<TimeSlices> table;  // kept until exit: forked children map it too
  std::lock_guard<std::mutex> lock(mu);
  if (!table) table = create(kProcessGpus, why);
  return table;
}

TimeSlices::~TimeSlices() {
  if (table_ != nullptr) munmap(table_, bytes_);
  if (fd_ >= 0) close(fd_);
}

TimeSlices::Gpu* TimeSlices::gpu(int g) const { return g >= 0 && g < gpus_ ? table_ + g : nullptr; }

SliceCounts TimeSlices::counts(int g) const {
  SliceCounts c;
  Gpu* s = gpu(g);
  if (s == nullptr) return c;
  SliceLock lock(s);
  c.switches = s->switches;
  c.expiries = s->expiries;
  c.yields = s->yields;
  return c;
}

KernelSlice::KernelSlice(std::shared_ptr<TimeSlices> slices, int gpu, int64_t timeslice_us, int64_t stall_ms,
                         std::string kernel)
    : slices_(std::move(slices)), gpu_(gpu), slice_ns_(timeslice_us * 1000), stall_ms_(stall_ms),
      kernel_(std::move(kernel)) {}

KernelSlice::~KernelSlice() { leave(); }

Status KernelSlice::enter() {
  std::lock_guard<std::mutex> lock(mu_);
  if (held_) return Status();
  error_ = acquire();
  return error_;
}

// Under mu_. Waits until this process's kernels may run on the GPU.
Status KernelSlice::acquire() {
  TimeSlices::Gpu* g = slices_->gpu(gpu_);
  if (g == nullptr) return Status();
  const int32_t me = static_cast<int32_t>(getpid());
  std::atomic<uint32_t>& mine = slices_->my_waiting(gpu_);
  {
    SliceLock lock(g);
    ++g->waiting;
    mine.fetch_add(1);
  }
  const int64_t deadline = now_ns() + stall_ms_ * 1000000;
  for (uint32_t spins = 0;; ++spins) {
    int32_t holder = 0;
    {
      SliceLock lock(g);
      const uint32_t others_waiting = g->waiting - mine.load();
      const bool take = g->owner == me ||
                        (g->owner == 0 && (g->barred != me || others_waiting == 0));
      if (take) {
        if (g->owner != me) {
          g->owner = me;
          g->since_ns = now_ns();
          if (g->last_owner != 0 && g->last_owner != me) ++g->switches;
          g->last_owner = me;
          if (g->barred != me) g->barred = 0;
        }
        ++g->running;
        --g->waiting;
        mine.fetch_sub(1);
        held_ = true;
        return Status();
      }
      holder = g->owner;
      if (now_ns() > deadline) {
        --g->waiting;
        mine.fetch_sub(1);
        return error(ACCORD_ERR_TIMEOUT,
                     "simulated GPU %d: kernel %s of pid %d waited %lld ms for the GPU's time slice, held by "
                     "the kernels of pid %d, which did not give it up at a switch point (Note [Simulated time "
                     "slices]; a GPU would switch at the end of the slice; ACCORD_SIM_STALL_MS sets the "
                     "limit)",
                     gpu_, kernel_.c_str(), me, (long long)stall_ms_, holder);
      }
    }
    backoff(spins);
  }
}

bool KernelSlice::point() {
  TimeSlices::Gpu* g = slices_->gpu(gpu_);
  if (g == nullptr) return true;
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_.ok()) return false;
  if (held_) {
    SliceLock sl(g);
    const uint32_t others_waiting = g->waiting - slices_->my_waiting(gpu_).load();
    if (others_waiting == 0 || now_ns() - g->since_ns < slice_ns_) return true;
    // Expired while another process waits: this kernel steps out.
    ++g->expiries;
    if (--g->running == 0) {
      g->owner = 0;
      g->barred = static_cast<int32_t>(getpid());
    }
    held_ = false;
  }
  error_ = acquire();
  return error_.ok();
}

void KernelSlice::leave() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!held_) return;
  TimeSlices::Gpu* g = slices_->gpu(gpu_);
  SliceLock sl(g);
  if (--g->running == 0) {
    g->owner = 0;
    if (g->waiting > slices_->my_waiting(gpu_).load()) ++g->yields;  // another process gets it early
  }
  held_ = false;
}

KernelSlice* current_kernel_slice() { return t_kernel_slice; }

AdoptKernelSlice::AdoptKernelSlice(KernelSlice* slice) : previous_(t_kernel_slice) { t_kernel_slice = slice; }
AdoptKernelSlice::~AdoptKernelSlice() { t_kernel_slice = previous_; }

bool timeslice_point() {
  KernelSlice* k = t_kernel_slice;
  return k == nullptr || k->point();
}

}  // namespace accord::sim
