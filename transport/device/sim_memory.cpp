// Simulated device memory as memfds, pinned host memory as anonymous mappings, and IPC between
// processes through /proc/<pid>/fd. Note [Simulated device memory] (sim_memory.hpp) says why.
#include "transport/device/sim_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "core/crypto.hpp"
#include "core/log.hpp"

namespace accord::sim {
namespace {

// What the simulated runtime puts in IpcHandle::payload.
struct Payload {
  int32_t pid;
  int32_t fd;
  char name[64];  // memfd name, NUL-terminated
};
static_assert(sizeof(Payload) <= sizeof(IpcHandle::payload), "payload must fit the handle");

size_t page_round(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

// The link text of an open memfd: "/memfd:NAME (deleted)".
std::string memfd_link(const std::string& name) { return "/memfd:" + name + " (deleted)"; }

std::string read_link(const std::string& path) {
  char buf[256];
  ssize_t n = readlink(path.c_str(), buf, sizeof buf - 1);
  return n < 0 ? std::string() : std::string(buf, static_cast<size_t>(n));
}

// Note [Simulated IPC importers]: the page after the data.
struct Importers {
  static constexpr int kSlots = 256;
  std::atomic<int32_t> pid[kSlots];
  std::atomic<int32_t> opened[kSlots];
};
static_assert(sizeof(Importers) <= 4096, "one page");

size_t page_bytes() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

void* map_importers(int fd, size_t at) {
  void* p = mmap(nullptr, page_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(at));
  return p == MAP_FAILED ? nullptr : p;
}

// This process's slot (claimed on first use), or null when the table is full.
std::atomic<int32_t>* my_open_count(void* table) {
  auto* t = static_cast<Importers*>(table);
  const int32_t me = getpid();
  for (int i = 0; i < Importers::kSlots; ++i) {
    int32_t seen = t->pid[i].load(std::memory_order_acquire);
    if (seen == 0 && t->pid[i].compare_exchange_strong(seen, me)) return &t->opened[i];
    if (seen == me) return &t->opened[i];
  }
  return nullptr;
}

// A process that exited has no mappings, even while it waits to be reaped (a zombie).
bool alive(int32_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  char buf[512];
  const int fd = open(format("/proc/%d/stat", pid).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;  // another user's, or no /proc: assume it lives
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return true;
  buf[n] = '\0';
  const char* state = std::strrchr(buf, ')');  // "pid (comm) S ...": comm may hold spaces
  return state == nullptr || state[1] == '\0' || (state[2] != 'Z' && state[2] != 'X');
}

// Live processes other than this one that have the memory open.
std::string open_elsewhere(void* table) {
  if (table == nullptr) return "";
  auto* t = static_cast<Importers*>(table);
  std::string out;
  for (int i = 0; i < Importers::kSlots; ++i) {
    const int32_t pid = t->pid[i].load(std::memory_order_acquire);
    if (pid == 0 || pid == getpid() || t->opened[i].load(std::memory_order_acquire) <= 0) continue;
    if (!alive(pid)) continue;  // its mappings went with it
    out += (out.empty() ? "" : ", ") + std::to_string(pid);
  }
  return out;
}

// Note [Buffer ids]: one counter for the process, as CUDA's ids are process-wide.
std::atomic<uint64_t> g_next_buffer_id{1};

std::mutex g_violations_mu;
std::vector<std::string> g_violations;

}  // namespace

std::vector<std::string> rule_violations() {
  std::lock_guard<std::mutex> lock(g_violations_mu);
  return g_violations;
}

void record_rule_violation(const std::string& what) {
  LOG_ERROR(kGpu, "simulated GPU rule broken: %s", what.c_str());
  std::lock_guard<std::mutex> lock(g_violations_mu);
  g_violations.push_back(what);
}

SimMemory::~SimMemory() {
  for (auto& [addr, a] : allocs_) {
    if (a.registered) continue;  // the caller's memory
    munmap(a.base, a.map_bytes);
    if (a.importers != nullptr) munmap(a.importers, page_bytes());
    if (a.fd >= 0) close(a.fd);
  }
}

Status SimMemory::alloc_device(int device, size_t bytes, void** out) {
  uint8_t rnd[16];
  ACCORD_TRY(random_bytes(rnd, sizeof rnd));
  Allocation a;
  a.name = format("accord-gpu%d-%s", device, to_hex(rnd, sizeof rnd).c_str());
  a.kind = MemoryKind::kDevice;
  a.device = device;
  a.bytes = bytes;
  a.buffer_id = g_next_buffer_id.fetch_add(1);
  a.map_bytes = page_round(bytes);
  a.fd = memfd_create(a.name.c_str(), MFD_CLOEXEC);
  if (a.fd < 0) return system_error(errno, "device %d: alloc_device(%zu bytes): memfd_create", device, bytes);
  int rc = fchmod(a.fd, 0600);
  // Note [Simulated IPC importers]: one page more, after the data.
  const size_t file_bytes = a.map_bytes + page_bytes();
  if (rc == 0) rc = ftruncate(a.fd, static_cast<off_t>(file_bytes));
  if (rc != 0) rc = errno;
  if (rc == 0) rc = posix_fallocate(a.fd, 0, static_cast<off_t>(file_bytes));
  if (rc != 0) {
    close(a.fd);
    return system_error(rc, "device %d: alloc_device(%zu bytes): reserving simulated device memory "
                        "(is the host out of memory?)", device, bytes);
  }
  a.base = mmap(nullptr, a.map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, a.fd, 0);
  if (a.base == MAP_FAILED) {
    int err = errno;
    close(a.fd);
    return system_error(err, "device %d: alloc_device(%zu bytes): mmap", device, bytes);
  }
  a.importers = map_importers(a.fd, a.map_bytes);
  if (a.importers == nullptr) {
    int err = errno;
    munmap(a.base, a.map_bytes);
    close(a.fd);
    return system_error(err, "device %d: alloc_device(%zu bytes): mmap of its importer table", device, bytes);
  }
  std::lock_guard<std::mutex> lock(mu_);
  allocs_[reinterpret_cast<uintptr_t>(a.base)] = a;
  *out = a.base;
  return Status();
}

Status SimMemory::alloc_pinned(size_t bytes, void** out) {
  Allocation a;
  a.kind = MemoryKind::kHostPinned;
  a.bytes = bytes;
  a.buffer_id = g_next_buffer_id.fetch_add(1);
  a.map_bytes = page_round(bytes);
  a.base = mmap(nullptr, a.map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (a.base == MAP_FAILED) return system_error(errno, "alloc_host_pinned(%zu bytes): mmap", bytes);
  std::lock_guard<std::mutex> lock(mu_);
  allocs_[reinterpret_cast<uintptr_t>(a.base)] = a;
  *out = a.base;
  return Status();
}

Status SimMemory::register_pinned(void* ptr, size_t bytes) {
  if (ptr == nullptr || bytes == 0)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "register_host(%p, %zu bytes): need a pointer and a size", ptr, bytes);
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocs_.lower_bound(p);
  if (it != allocs_.end() && it->first < p + bytes)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "register_host(%p, %zu bytes): overlaps %s at %p", ptr, bytes,
                 memory_kind_name(it->second.kind), it->second.base);
  if (it != allocs_.begin() && std::prev(it)->first + std::prev(it)->second.bytes > p)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "register_host(%p, %zu bytes): overlaps %s at %p", ptr, bytes,
                 memory_kind_name(std::prev(it)->second.kind), std::prev(it)->second.base);
  Allocation a;
  a.kind = MemoryKind::kHostPinned;
  a.base = ptr;
  a.bytes = bytes;
  a.registered = true;
  allocs_[p] = a;
  return Status();
}

Status SimMemory::unregister_pinned(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocs_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == allocs_.end() || !it->second.registered)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "unregister_host(%p): not memory given to register_host (unregistered "
                 "already, or allocated by the runtime)", ptr);
  allocs_.erase(it);
  return Status();
}

Status SimMemory::free(void* ptr, MemoryKind kind, const char* op) {
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocs_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == allocs_.end()) {
      Allocation inside;
      bool interior = false;
      for (auto& [addr, x] : allocs_)
        if (reinterpret_cast<uintptr_t>(ptr) > addr && reinterpret_cast<uintptr_t>(ptr) < addr + x.bytes) {
          interior = true;
          inside = x;
        }
      if (interior)
        return error(ACCORD_ERR_INVALID_ARGUMENT, "%s(%p): the pointer is inside an allocation that starts at %p; "
                     "free the pointer the allocation returned", op, ptr, inside.base);
      return error(ACCORD_ERR_INVALID_ARGUMENT, "%s(%p): not an allocation of this runtime (freed already, "
                   "or never allocated here)", op, ptr);
    }
    if (it->second.registered)
      return error(ACCORD_ERR_INVALID_ARGUMENT, "%s(%p): the memory was pinned by register_host; use unregister_host",
                   op, ptr);
    if (it->second.kind != kind || it->second.imported)
      return error(ACCORD_ERR_INVALID_ARGUMENT, "%s(%p): the pointer is %s%s, not %s; use %s", op, ptr,
                   it->second.imported ? "imported " : "", memory_kind_name(it->second.kind), memory_kind_name(kind),
                   it->second.imported ? "ipc_close_handle"
                   : it->second.kind == MemoryKind::kDevice ? "free_device" : "free_host_pinned");
    a = it->second;
    allocs_.erase(it);
  }
  Status st;
  const std::string readers = a.imported ? "" : open_elsewhere(a.importers);
  if (!readers.empty()) {
    st = error(ACCORD_ERR_INVALID_USAGE,
               "simulated GPU %d: %s(%p): process %s still has this memory open through IPC "
               "(ipc_open_handle without ipc_close_handle), so its kernels may still read or write it; on a "
               "GPU that faults (cudaErrorIllegalAddress) or touches memory given to someone else. Free it "
               "only after every importer has closed it (Note [Simulated IPC importers])",
               a.device, op, ptr, readers.c_str());
    record_rule_violation(st.message());
  }
  munmap(a.base, a.map_bytes);
  if (a.importers != nullptr) munmap(a.importers, page_bytes());
  if (a.fd >= 0) close(a.fd);
  return st;
}

bool SimMemory::find(const void* ptr, size_t bytes, Allocation* out) const {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocs_.upper_bound(p);
  if (it == allocs_.begin()) return false;
  --it;
  const Allocation& a = it->second;
  const uintptr_t base = it->first;
  // A zero-byte range still needs its pointer inside (or at the end of) the allocation.
  if (p < base || p > base + a.bytes || (bytes > 0 && (p == base + a.bytes || bytes > base + a.bytes - p)))
    return false;
  *out = a;
  return true;
}

Status SimMemory::export_handle(const void* ptr, IpcHandle* out) const {
  Allocation a;
  if (!find(ptr, 0, &a) || a.kind != MemoryKind::kDevice)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "ipc_get_handle(%p): not device memory of this runtime "
                 "(freed, or a host pointer)", ptr);
  if (a.imported)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: ipc_get_handle(%p): the memory was itself opened "
                 "from an IPC handle; export it from the process that allocated it", a.device, ptr);
  IpcHandle h;
  h.magic = IpcHandle::kMagic;
  h.runtime = static_cast<uint32_t>(IpcRuntime::kSimulated);
  h.device = a.device;
  h.offset = static_cast<const char*>(ptr) - static_cast<const char*>(a.base);
  h.bytes = a.bytes;
  Payload pl{};
  pl.pid = getpid();
  pl.fd = a.fd;
  std::snprintf(pl.name, sizeof pl.name, "%s", a.name.c_str());
  std::memcpy(h.payload, &pl, sizeof pl);
  *out = h;
  return Status();
}

Status SimMemory::import_handle(const IpcHandle& h, void** out) {
  Payload pl;
  std::memcpy(&pl, h.payload, sizeof pl);
  pl.name[sizeof pl.name - 1] = '\0';
  if (pl.pid == getpid())
    return error(ACCORD_ERR_INVALID_USAGE, "device %d: ipc_open_handle: the handle was exported by this "
                 "process (pid %d); CUDA refuses this too, use the pointer itself", h.device, pl.pid);
  const std::string path = format("/proc/%d/fd/%d", pl.pid, pl.fd);
  const std::string want = memfd_link(pl.name);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT)
      return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: ipc_open_handle: the memory (%s) is gone: process %d "
                   "exited or freed it", h.device, pl.name, pl.pid);
    return system_error(err, "device %d: ipc_open_handle: opening %s of process %d (another user, or "
                        "ptrace restrictions?)", h.device, path.c_str(), pl.pid);
  }
  // Check what we actually opened: the fd number and the pid may have been reused.
  if (read_link(format("/proc/self/fd/%d", fd)) != want) {
    close(fd);
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: ipc_open_handle: the memory (%s) is gone: process %d "
                 "freed it", h.device, pl.name, pl.pid);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < h.bytes || h.offset > h.bytes) {
    close(fd);
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: ipc_open_handle: the handle is corrupt (%s: %llu bytes "
                 "at offset %llu)", h.device, pl.name, (unsigned long long)h.bytes, (unsigned long long)h.offset);
  }
  Allocation a;
  a.kind = MemoryKind::kDevice;
  a.device = h.device;
  a.bytes = h.bytes;
  a.map_bytes = page_round(h.bytes);
  a.name = pl.name;
  a.imported = true;
  a.buffer_id = g_next_buffer_id.fetch_add(1);  // a mapping of its own, as CUDA gives it
  a.base = mmap(nullptr, a.map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  if (a.base != MAP_FAILED && static_cast<uint64_t>(st.st_size) >= a.map_bytes + page_bytes())
    a.importers = map_importers(fd, a.map_bytes);
  close(fd);  // the mappings keep the memory alive
  if (a.base == MAP_FAILED) return system_error(err, "device %d: ipc_open_handle: mmap of %s", h.device, pl.name);
  if (a.importers != nullptr)
    if (std::atomic<int32_t>* n = my_open_count(a.importers)) n->fetch_add(1, std::memory_order_acq_rel);
  std::lock_guard<std::mutex> lock(mu_);
  allocs_[reinterpret_cast<uintptr_t>(a.base)] = a;
  *out = static_cast<char*>(a.base) + h.offset;
  return Status();
}

Status SimMemory::close_imported(void* ptr) {
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocs_.upper_bound(reinterpret_cast<uintptr_t>(ptr));
    if (it != allocs_.begin()) --it;
    if (it == allocs_.end() || !it->second.imported || reinterpret_cast<uintptr_t>(ptr) < it->first ||
        reinterpret_cast<uintptr_t>(ptr) > it->first + it->second.bytes)
      return error(ACCORD_ERR_INVALID_ARGUMENT, "ipc_close_handle(%p): not memory opened with ipc_open_handle "
                   "(closed already?)", ptr);
    a = it->second;
    allocs_.erase(it);
  }
  munmap(a.base, a.map_bytes);
  if (a.importers != nullptr) {
    if (std::atomic<int32_t>* n = my_open_count(a.importers)) n->fetch_sub(1, std::memory_order_acq_rel);
    munmap(a.importers, page_bytes());
  }
  return Status();
}

}  // namespace accord::sim
