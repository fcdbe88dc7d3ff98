// Shared-memory segment setup and teardown (see shm_transport.hpp).
#include "transport/shm/shm_transport.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/crypto.hpp"
#include "core/log.hpp"

namespace accord {
namespace {

constexpr char kPrefix[] = "accord-";

// `missing` (optional) is set when the segment to open does not exist.
Status map_segment(const std::string& name, size_t bytes, bool create, void** addr, bool* missing = nullptr) {
  int flags = O_RDWR | O_CLOEXEC | (create ? (O_CREAT | O_EXCL) : 0);
  int fd = shm_open(name.c_str(), flags, 0600);
  if (missing != nullptr) *missing = fd < 0 && errno == ENOENT;
  if (fd < 0)
    return system_error(errno, "shm_open(%s, %s)%s", name.c_str(), create ? "create" : "open",
                        errno == EACCES ? "; /dev/shm must be writable by this user" : "");
  if (create) {
    int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (rc != 0) {
      ::close(fd);
      shm_unlink(name.c_str());
      return system_error(rc, "reserving %zu MiB in /dev/shm for segment %s%s", bytes >> 20, name.c_str(),
                          rc == ENOSPC ? " (too little space in /dev/shm: in Docker, raise --shm-size; or "
                                         "lower ACCORD_SHM_SLOT_BYTES / ACCORD_SHM_NSLOTS)"
                                       : "");
    }
  } else {
    struct stat st;
    if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
      ::close(fd);
      return error(ACCORD_ERR_SYSTEM, "shared memory segment %s is smaller than expected (%zu bytes); do all "
                   "ranks run the same Accord version and ACCORD_SHM_* settings?", name.c_str(), bytes);
    }
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    if (create) shm_unlink(name.c_str());
    return system_error(e, "mmap of shared memory segment %s (%zu bytes)", name.c_str(), bytes);
  }
  *addr = p;
  return Status::success();
}

// Note [FIFO pages at init]: a FIFO's pages are mapped at the first touch of each, by the
// sender's first message into a slot and the receiver's first read of it: 8 slots a direction
// cost 16 page faults over a pair's first calls, which the first size of a benchmark that
// leaves the board showed (2 ranks, 512 B out of place, `-n 20 -w 5`: 1.21 us a call, 0.60 in
// place once warm). Both FIFOs of a pair are mapped here, at init, instead: 0.71 us (6
// alternated pairs under chrt -f 50, Intel Xeon model 207 VM, 2026-11-28). The pages exist
// already (posix_fallocate); this only maps them. Before Linux 5.14 (no MADV_POPULATE_WRITE)
// one read per page maps them.
void prefault(uint8_t* p, size_t bytes) {
  const uintptr_t page = 4096, from = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t to = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) & ~(page - 1);
#ifdef MADV_POPULATE_WRITE
  if (madvise(reinterpret_cast<void*>(from), to - from, MADV_POPULATE_WRITE) == 0) return;
#endif
  for (uintptr_t a = from; a < to; a += page) (void)*reinterpret_cast<volatile uint8_t*>(a);
}

// Note [FIFO lines at init]: mapped, a FIFO's pages still cost each rank's first use of each
// slot (by all we can tell, TLB misses whose page walks are two-dimensional in a VM, and lines
// from memory; prefetching them removes it, below): with 8
// slots, the first size of a benchmark that leaves the board ran its calls 6 to 8 slower (2
// ranks, 512 B out of place, `-n 20 -w 5`: 0.74-0.77 us a call; `-w 13`: 0.61-0.66; with 16
// slots 0.93-1.04). So at the end of init (after the store probe, whose buffers would evict
// them) each rank prefetches the control and header lines and the first kWarmSlotBytes of
// every slot of both FIFOs of each pair (ShmTransport::warm_fifos; 16 KiB: host messages below
// the single copy's window, Note [Single copy], are at most that).
constexpr size_t kWarmSlotBytes = 16 << 10;

// The creator of a segment named "accord-<pid>-n<pidns>-<random>" (or, before pid
// namespaces were named, "accord-<pid>-<random>": ns empty).
void segment_creator(const std::string& name, long* pid, std::string* ns) {
  char* end = nullptr;
  *pid = std::strtol(name.c_str() + sizeof kPrefix - 1, &end, 10);
  ns->clear();
  if (end[0] == '-' && end[1] == 'n') *ns = std::string(end + 2, std::strcspn(end + 2, "-"));
}

}  // namespace

// Read at every call, never kept: a child forked after unshare(CLONE_NEWPID) is in another
// namespace than the process it was forked from.
std::string pid_namespace() {
  char link[64] = "";
  const ssize_t n = readlink("/proc/self/ns/pid", link, sizeof link - 1);
  if (n <= 0) return "?";  // no /proc: every process says so (pids compared as before)
  link[n] = '\0';
  const char* open = std::strchr(link, '[');
  return open != nullptr ? std::string(open + 1, std::strcspn(open + 1, "]")) : std::string(link);
}

std::vector<std::string> list_shm_segments() {
  std::vector<std::string> out;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, kPrefix, sizeof kPrefix - 1) == 0) out.emplace_back(e->d_name);
  }
  closedir(d);
  return out;
}

void sweep_stale_shm_segments() {
  const std::string my_ns = pid_namespace();
  for (const std::string& name : list_shm_segments()) {
    long pid = 0;
    std::string ns;
    segment_creator(name, &pid, &ns);
    // A pid of another namespace (another container on this /dev/shm) names nothing here.
    if (!ns.empty() && ns != my_ns) continue;
    struct stat st;
    std::string path = "/dev/shm/" + name;
    if (pid <= 0 || stat(path.c_str(), &st) != 0 || st.st_uid != getuid()) continue;
    if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      if (shm_unlink(("/" + name).c_str()) == 0)
        LOG_INFO(kShm, "removed shared memory segment %s left by process %ld, which is gone", name.c_str(), pid);
    }
  }
}

void remove_segments_of(const std::vector<long>& pids) {
  const std::string my_ns = pid_namespace();
  for (const std::string& name : list_shm_segments()) {
    long pid = 0;
    std::string ns;
    segment_creator(name, &pid, &ns);
    if ((ns.empty() || ns == my_ns) && std::find(pids.begin(), pids.end(), pid) != pids.end())
      shm_unlink(("/" + name).c_str());
  }
}

Status ShmTransport::setup(StoreClient* store, int rank, int nranks, const std::vector<int>& local_ranks,
                           const ShmOptions& options, Deadline deadline,
                           const std::function<void()>& after_publish, std::unique_ptr<ShmTransport>* out) {
  std::unique_ptr<ShmTransport> t(new ShmTransport());
  t->options_ = options;
  t->senders_.resize(static_cast<size_t>(nranks));
  t->receivers_.resize(static_cast<size_t>(nranks));
  t->dev_ctrl_recv_.assign(static_cast<size_t>(nranks), nullptr);
  t->dev_ctrl_send_.assign(static_cast<size_t>(nranks), nullptr);
  const size_t fifo_bytes = options.shape.total_bytes();
  const size_t ctrl_bytes = options.device_fifos ? options.shape.total_bytes() : options.shape.header_bytes();
  // Segment: one 4 KiB header page (the owner's death note, departure and board), a FIFO per rank, then a device
  // FIFO control area per rank.
  constexpr size_t kHeaderBytes = 4096;
  static_assert(kDepartureOffset >= sizeof(std::atomic<int32_t>) &&
                kDepartureOffset + sizeof(Departure) <= kReleaseOffset &&
                kReleaseOffset + sizeof(std::atomic<uint32_t>) <= kBoardOffset && kBoardOffset + kBoardBytes <= kHeaderBytes);
  const size_t ctrl_at = kHeaderBytes + fifo_bytes * static_cast<size_t>(nranks);
  // Note [Staged protocol]: the owner's staging area last, page-aligned.
  const size_t staging_at = (ctrl_at + ctrl_bytes * static_cast<size_t>(nranks) + 4095) & ~size_t{4095};
  const size_t seg_bytes = staging_at + options.staging_bytes;

  sweep_stale_shm_segments();
  uint8_t rnd[16];
  ACCORD_TRY(random_bytes(rnd, sizeof rnd));
  std::string mine = "/" + std::string(kPrefix) + std::to_string(getpid()) + "-n" + pid_namespace() + "-" +
                     to_hex(rnd, sizeof rnd);
  void* my_addr = nullptr;
  ACCORD_TRY(map_segment(mine, seg_bytes, true, &my_addr).prefix(format("rank %d: ", rank)));
  t->mappings_.push_back({my_addr, seg_bytes});
  if (options.staging_bytes > 0) {
    t->staging_.assign(static_cast<size_t>(nranks), nullptr);
    t->staging_[static_cast<size_t>(rank)] = static_cast<uint8_t*>(my_addr) + staging_at;
  }
  t->notes_.assign(static_cast<size_t>(nranks), nullptr);
  t->notes_[static_cast<size_t>(rank)] = static_cast<std::atomic<int32_t>*>(my_addr);
  t->notes_[static_cast<size_t>(rank)]->store(-1);
  t->departures_.assign(static_cast<size_t>(nranks), nullptr);
  t->departures_[static_cast<size_t>(rank)] =
      reinterpret_cast<Departure*>(static_cast<uint8_t*>(my_addr) + kDepartureOffset);
  t->releases_.assign(static_cast<size_t>(nranks), nullptr);
  t->releases_[static_cast<size_t>(rank)] =
      reinterpret_cast<std::atomic<uint32_t>*>(static_cast<uint8_t*>(my_addr) + kReleaseOffset);
  std::vector<uint8_t*> boards(static_cast<size_t>(nranks), nullptr);
  boards[static_cast<size_t>(rank)] = static_cast<uint8_t*>(my_addr) + kBoardOffset;
  std::vector<std::string> known = {mine};
  // On any failure below, remove every name we know: the creators may be gone.
  auto fail = [&](Status s) {
    for (const std::string& n : known) shm_unlink(n.c_str());
    return s;
  };

  Status s = store->set("shm/" + std::to_string(rank), mine);
  if (!s.ok()) return fail(std::move(s));
  after_publish();
  for (int peer : local_ranks) {
    if (peer == rank) continue;
    std::string name;
    s = store->get("shm/" + std::to_string(peer), &name, deadline, "rank " + std::to_string(peer));
    if (!s.ok()) return fail(std::move(s));
    known.push_back(name);
    void* addr = nullptr;
    bool missing = false;
    s = map_segment(name, seg_bytes, false, &addr, &missing);
    if (missing) {
      // Another rank removed it because the job's init failed: report that failure, which
      // names its cause, rather than the missing file.
      std::string unused;
      Status why = store->get("no-such-key", &unused, Deadline::after_ms(500), "the other ranks");
      if (!why.ok() && why.code() != ACCORD_ERR_TIMEOUT) return fail(std::move(why));
      // No rank said it failed: the segment may have been removed (its creator died before
      // saying so), or never have been visible here, which the host grouping should have
      // ruled out (Note [Shared memory domain], communicator.cpp). Name both, and the fixes.
      return fail(error(ACCORD_ERR_REMOTE,
                        "rank %d: the shared memory of rank %d (%s) is not in this rank's "
                        "/dev/shm: either it was removed because rank %d or another rank failed "
                        "during init (see their output), or rank %d sees another /dev/shm than "
                        "this rank (containers that do not share it); then set ACCORD_HOST_ID "
                        "differently per container, or ACCORD_SHM_DISABLE=1 (TCP between all "
                        "ranks)",
                        rank, peer, name.c_str(), peer, peer));
    }
    if (!s.ok()) return fail(std::move(s.prefix(format("rank %d, peer %d: ", rank, peer))));
    t->mappings_.push_back({addr, seg_bytes});
    if (options.staging_bytes > 0) t->staging_[static_cast<size_t>(peer)] = static_cast<uint8_t*>(addr) + staging_at;
    t->notes_[static_cast<size_t>(peer)] = static_cast<std::atomic<int32_t>*>(addr);
    t->departures_[static_cast<size_t>(peer)] =
        reinterpret_cast<Departure*>(static_cast<uint8_t*>(addr) + kDepartureOffset);
    t->releases_[static_cast<size_t>(peer)] =
        reinterpret_cast<std::atomic<uint32_t>*>(static_cast<uint8_t*>(addr) + kReleaseOffset);
    boards[static_cast<size_t>(peer)] = static_cast<uint8_t*>(addr) + kBoardOffset;
    uint8_t* peer_fifo = static_cast<uint8_t*>(addr) + kHeaderBytes + fifo_bytes * static_cast<size_t>(rank);
    uint8_t* my_fifo = static_cast<uint8_t*>(my_addr) + kHeaderBytes + fifo_bytes * static_cast<size_t>(peer);
    t->senders_[static_cast<size_t>(peer)] =
        std::make_unique<FifoSender>(peer_fifo, options.shape, &t->options_.policy);
    t->receivers_[static_cast<size_t>(peer)] =
        std::make_unique<FifoReceiver>(my_fifo, options.shape, &t->options_.policy);
    prefault(peer_fifo, fifo_bytes);  // Note [FIFO pages at init]
    prefault(my_fifo, fifo_bytes);
    t->host_fifos_.push_back(peer_fifo);  // Note [FIFO lines at init]
    t->host_fifos_.push_back(my_fifo);
    t->dev_ctrl_send_[static_cast<size_t>(peer)] =
        static_cast<uint8_t*>(addr) + ctrl_at + ctrl_bytes * static_cast<size_t>(rank);
    t->dev_ctrl_recv_[static_cast<size_t>(peer)] =
        static_cast<uint8_t*>(my_addr) + ctrl_at + ctrl_bytes * static_cast<size_t>(peer);
  }
  s = store->set("shm_mapped/" + std::to_string(rank), "1");
  if (!s.ok()) return fail(std::move(s));
  for (int peer : local_ranks) {
    if (peer == rank) continue;
    std::string v;
    s = store->get("shm_mapped/" + std::to_string(peer), &v, deadline, "rank " + std::to_string(peer));
    if (!s.ok()) return fail(std::move(s));
  }
  shm_unlink(mine.c_str());
  if (static_cast<int>(local_ranks.size()) <= kBoardMaxRanks)
    t->board_ = std::make_unique<Board>(boards, rank, &t->options_.policy);
  LOG_INFO(kShm, "rank %d: shared memory ready with %zu local peers (%zu slots x %zu KiB per peer)", rank,
           local_ranks.size() - 1, options.shape.nslots, options.shape.slot_bytes >> 10);
  *out = std::move(t);
  return Status::success();
}

void ShmTransport::warm_fifos() const {
  for (uint8_t* f : host_fifos_) warm_fifo(f, options_.shape, kWarmSlotBytes);
}

ShmTransport::~ShmTransport() {
  senders_.clear();
  receivers_.clear();
  for (const Mapping& m : mappings_) munmap(m.addr, m.bytes);
}

}  // namespace accord
