// Memory of the simulated GPUs: a registry of every allocation (device memory, pinned host
// memory, and device memory mapped from another process), so that pointer queries work and
// wrong-device use is caught.
//
// Note [Simulated device memory]: every device allocation is its own memfd (memfd_create,
// mode 0600, close-on-exec), space reserved up front (fallocate: a full machine fails the
// allocation instead of raising SIGBUS later) and mapped shared. A memfd has no name in any
// file system, so nothing can be left in /dev/shm, even if the process is killed. Another
// process opens it through /proc/<pid>/fd/<fd> (the kernel allows this to the same user, as
// for ptrace-read); the handle also carries the memfd's random name, which the opener checks
// on the file it actually opened, so a reused fd number or pid is an error, never someone
// else's memory. The memory disappears when the owner frees it and every importer closed it.
//
// Note [Simulated IPC importers]: the memfd has one page more than the data, mapped by the
// owner and by every importer: a table of (pid, open count) that import_handle and
// close_imported keep. Freeing memory that a live process still has open is an error (and a
// rule violation, below): that process's kernels may still read or write it, and on a GPU
// that faults (cudaErrorIllegalAddress) or reads memory given to someone else. This is
// stricter than CUDA, which cannot tell whether an importer will touch the memory again: an
// open mapping counts as a possible reader. Ranks that are threads of one process share plain
// pointers, which the simulation does not track; a free there unmaps at once, so a late read
// crashes the test.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "transport/device/device_runtime.hpp"

namespace accord::sim {

struct Allocation {
  void* base = nullptr;
  size_t bytes = 0;
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;         // kDevice: owner
  int fd = -1;             // memfd of device memory we own; -1 otherwise
  std::string name;        // memfd name (device memory, own or imported)
  bool imported = false;   // mapped from another process's handle
  bool registered = false; // the caller's memory pinned by register_host (never unmapped here)
  size_t map_bytes = 0;    // length of the mapping (>= bytes, page-rounded)
  void* importers = nullptr;  // device memory: Note [Simulated IPC importers], one page
  uint64_t buffer_id = 0;     // Note [Buffer ids] (device_runtime.hpp): never reused in this process
};

// Every rule of the simulation broken in this process so far (Note [Simulated IPC importers]),
// one message each: also returned as errors, but the caller may ignore those, so tests ask here.
std::vector<std::string> rule_violations();
void record_rule_violation(const std::string& what);

class SimMemory {
 public:
  SimMemory() = default;
  ~SimMemory();  // unmaps whatever is left
  SimMemory(const SimMemory&) = delete;
  SimMemory& operator=(const SimMemory&) = delete;

  Status alloc_device(int device, size_t bytes, void** out);
  Status alloc_pinned(size_t bytes, void** out);
  // Records the caller's host memory as pinned (register_host); it must not overlap anything
  // known. unregister forgets it and leaves the memory alone.
  Status register_pinned(void* ptr, size_t bytes);
  Status unregister_pinned(void* ptr);
  // Frees an allocation of `kind` that starts at ptr (imported memory is closed, not freed).
  Status free(void* ptr, MemoryKind kind, const char* op);

  // The allocation holding [ptr, ptr + bytes), if any.
  bool find(const void* ptr, size_t bytes, Allocation* out) const;

  Status export_handle(const void* ptr, IpcHandle* out) const;
  // Maps the memory of `h` and registers it as device memory of h.device.
  Status import_handle(const IpcHandle& h, void** out);
  Status close_imported(void* ptr);

 private:
  mutable std::mutex mu_;
  std::map<uintptr_t, Allocation> allocs_;  // by base address
};

}  // namespace accord::sim
