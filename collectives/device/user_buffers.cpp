// User buffers mapped into the peers (user_buffers.hpp).
#include "collectives/device/user_buffers.hpp"

#include <tuple>
#include <utility>

#include "collectives/device/direct_call.hpp"
#include "core/log.hpp"

namespace accord::dev {

// Note [User buffers mapped into peers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Issue 33's design maps the user's own buffers into the peers, so that a direct kernel loads
// a peer's input where it lies instead of the peer first copying it into its scratch (Note
// [Direct protocol]; the kernels' side is Note [Registered inputs] in direct_call.hpp):
//
//  * Registration (accord_comm_register; ncclCommRegister, of ncclMemAlloc'ed buffers or any
//    other) is COLLECTIVE on Accord when the job has the direct protocol and some rank is
//    another process: every rank registers at the same point of its sequence of calls on the
//    communicator (its own buffer, any size, 0 included), as NCCL's ncclCommWindowRegister
//    (NCCL's ncclCommRegister is local). That point is what makes the mapping agreed: after a
//    registration every rank has every peer's buffer mapped, in the same slot, so any later
//    call may use it. Each rank publishes one UserBufferRecord (the allocation holding the
//    buffer: base, size, buffer id, the buffer's offset and length, and an IPC handle of the
//    base) through the communicator's host all-gather, which runs on the communicator's
//    worker behind the device calls already queued (the channels are never used twice at
//    once); no other exchange exists after init.
//  * A rank that does not register at that point is found, not waited for forever: the
//    records carry a magic, the exchange's number and its kind, and check() names the first
//    rank whose record differs (a rank in another collective, or at another registration;
//    the communicator is then broken, its ranks being at different calls); a rank that makes
//    no call at all fails the registration at its departure or after ACCORD_TIMEOUT_MS, with
//    the registration's name in the error. A rank whose own registration fails (a bad pointer)
//    still takes part (a kFailed record), so every rank fails it and none waits.
//  * Each peer allocation is opened once per process and mapping GPU: a process-wide cache
//    keyed by (owner process, base, buffer id, GPU) with a count of the registrations, of any
//    communicator, that hold it. CUDA refuses to open one allocation twice in a context, and a
//    key by base alone would hand out a freed buffer's mapping for a new allocation at the
//    same address (Note [Buffer ids]). Memory no peer could map (host memory, another GPU's)
//    is a record only.
//  * Ranks that are threads of one process exchange nothing (so one thread may register
//    every rank of accord_comm_init_all): their registrations are records, and their inputs
//    keep going through the scratch (mapping would need the same agreement).
//  * Deregistration is collective too: each rank first waits until its own queued kernels have
//    ended (after that no kernel of any rank reads the buffers), then the first exchange
//    checks that every rank deregisters the same registration; each rank closes its mappings
//    of the peers' buffers (a mapping another registration still holds stays) and frees the
//    slot; the second exchange says every rank has closed, so that when deregister returns
//    the owner may free its buffer (the simulation makes a free while another process has it
//    open an error: Note [Simulated IPC importers]).
//  * Destroy with registrations live closes their mappings with the scratch's
//    (DeviceEngine::let_go_of_peer_memory) before this rank says it let go, and a rank's
//    destroy waits until its peers have let go (Note [Freeing memory peers map]): after destroy
//    returns the user may free a buffer it registered. Freeing a buffer while it is still
//    registered with a live communicator is a usage error (ncclMemFree refuses it).
//
// The plan's "user buffers" line (and the init log) count the registrations, the peer
// allocations this communicator opened, those it found open already, and the calls whose
// input the peers read from its registered buffer (find_mine).

namespace {
struct Mapping {
  void* ptr = nullptr;
  int refs = 0;
};
std::mutex g_cache_mu;
}  // namespace

// The process-wide cache (Note [User buffers mapped into peers]); guarded by g_cache_mu.
static std::map<PeerAllocationKey, Mapping>& cache() {
  static auto* c = new std::map<PeerAllocationKey, Mapping>();
  return *c;
}

UserBuffers::UserBuffers(DeviceRuntime* rt, int device, int rank, std::vector<bool> ipc, std::vector<std::string> owner)
    : rt_(rt), device_(device), rank_(rank), ipc_(std::move(ipc)), owner_(std::move(owner)) {
  for (bool b : ipc_) exchanges_ = exchanges_ || b;
}

UserBuffers::~UserBuffers() { close_all(); }

Status UserBuffers::mine(void* ptr, size_t bytes, uint64_t seq, UserBufferRecord* out) const {
  UserBufferRecord r;
  r.magic = UserBufferRecord::kMagic;
  r.seq = seq;
  r.kind = UserBufferRecord::kRegister;
  r.rank = rank_;
  r.length = bytes;
  if (bytes == 0) {  // a record, nothing to map (every rank still exchanges)
    *out = r;
    return Status::success();
  }
  if (!exchanges_ || rt_ == nullptr) {  // peers address this process's pointers, or map nothing
    r.base = reinterpret_cast<uintptr_t>(ptr);
    *out = r;
    return Status::success();
  }
  PointerInfo info;
  ACCORD_TRY(rt_->pointer_info(ptr, &info));
  // Memory that no peer could map (host memory, another GPU's, another process's): a record,
  // as NCCL's registration of memory it cannot use.
  if (info.kind != MemoryKind::kDevice || info.device != device_ || info.imported || info.base == nullptr ||
      info.bytes == 0) {
    LOG_INFO(kGpu, "rank %d: registering %p (%zu bytes): %s memory%s: a record only, the peers do not map it",
             rank_, ptr, bytes, memory_kind_name(info.kind),
             info.imported ? " opened from another process" : info.kind == MemoryKind::kDevice && info.device != device_
                                                                  ? " of another GPU"
                                                                  : "");
    *out = r;
    return Status::success();
  }
  const auto at = static_cast<uint64_t>(static_cast<const uint8_t*>(ptr) - static_cast<const uint8_t*>(info.base));
  if (at + bytes > info.bytes)
    return error(ACCORD_ERR_INVALID_ARGUMENT,
                 "rank %d: registering %p (%zu bytes): it runs past the end of its allocation (%p, %zu bytes)", rank_,
                 ptr, bytes, info.base, info.bytes);
  r.base = reinterpret_cast<uintptr_t>(info.base);
  r.bytes = info.bytes;
  r.buffer_id = info.buffer_id;
  r.offset = at;
  ACCORD_TRY(rt_->ipc_get_handle(info.base, &r.ipc)
                 .prefix(format("rank %d: registering %p (%zu bytes): exporting its allocation: ", rank_, ptr, bytes)));
  *out = r;
  return Status::success();
}

UserBufferRecord UserBuffers::closing(uint32_t kind, uint64_t seq, uint64_t handle) const {
  UserBufferRecord r;
  r.magic = UserBufferRecord::kMagic;
  r.seq = seq;
  r.kind = kind;
  r.rank = rank_;
  r.handle = handle;
  return r;
}

namespace {
const char* kind_name(uint64_t magic, uint32_t kind) {
  if (magic != UserBufferRecord::kMagic) return "not registering (its record is not a registration's)";
  return kind == UserBufferRecord::kRegister     ? "registering"
         : kind == UserBufferRecord::kDeregister ? "deregistering"
         : kind == UserBufferRecord::kClosed     ? "closing a deregistered buffer"
         : kind == UserBufferRecord::kFailed     ? "failing to register (its own error says why)"
                                                 : "?";
}
}  // namespace

Status UserBuffers::check(const std::vector<UserBufferRecord>& all, const UserBufferRecord& me, const char* what) const {
  for (size_t r = 0; r < all.size(); ++r) {
    const UserBufferRecord& o = all[r];
    if (o.magic == me.magic && o.seq == me.seq && o.kind == me.kind && o.handle == me.handle &&
        o.rank == static_cast<int>(r))
      continue;
    if (o.magic == me.magic && o.seq == me.seq && o.kind == UserBufferRecord::kFailed)  // in step: only this call failed
      return error(ACCORD_ERR_INVALID_ARGUMENT, "rank %d: %s: rank %zu could not register its buffer (its own error "
                   "says why), so no rank registered it", rank_, what, r);
    return error(ACCORD_ERR_INVALID_USAGE,
                 "rank %d: %s: rank %zu was %s (exchange %llu, registration %llu) when this rank was %s (exchange "
                 "%llu, registration %llu). Registration is collective on Accord in a job of several processes "
                 "(Note [User buffers mapped into peers]): every rank registers and deregisters at the same point "
                 "of its calls on the communicator, in the same order. The communicator is broken: destroy it",
                 rank_, what, r, kind_name(o.magic, o.kind), static_cast<unsigned long long>(o.seq),
                 static_cast<unsigned long long>(o.handle), kind_name(me.magic, me.kind),
                 static_cast<unsigned long long>(me.seq), static_cast<unsigned long long>(me.handle));
  }
  return Status::success();
}

Status UserBuffers::open(const std::vector<UserBufferRecord>& all, uint64_t* handle) {
  Registration reg;
  reg.buffer.assign(all.size(), nullptr);
  Status st = Status::success();
  for (size_t r = 0; r < all.size() && st.ok(); ++r) {
    const UserBufferRecord& o = all[r];
    if (o.base == 0) continue;
    if (static_cast<int>(r) == rank_ || !ipc_[r]) {  // this process: its pointer
      reg.buffer[r] = reinterpret_cast<const uint8_t*>(o.base) + o.offset;
      continue;
    }
    const Key k{owner_[r], o.base, o.buffer_id, device_};
    std::lock_guard<std::mutex> lock(g_cache_mu);
    Mapping& m = cache()[k];
    if (m.refs == 0) {
      void* p = nullptr;
      st = rt_->ipc_open_handle(device_, o.ipc, &p)
               .prefix(format("rank %d: registration: opening rank %zu's buffer (allocation of %llu bytes, buffer id "
                              "%llu): ", rank_, r, static_cast<unsigned long long>(o.bytes),
                              static_cast<unsigned long long>(o.buffer_id)));
      if (!st.ok()) {
        cache().erase(k);
        break;
      }
      m.ptr = p;
      std::lock_guard<std::mutex> mine(mu_);
      ++counts_.opened;
    } else {
      std::lock_guard<std::mutex> mine(mu_);
      ++counts_.reused;
    }
    ++m.refs;
    reg.held.push_back(k);
    reg.buffer[r] = static_cast<const uint8_t*>(m.ptr) + o.offset;
  }
  if (!st.ok()) {
    for (const Key& k : reg.held) (void)release(k);
    return st;
  }
  const uint64_t h = all[static_cast<size_t>(rank_)].seq;
  reg.length = all[static_cast<size_t>(rank_)].length;
  std::lock_guard<std::mutex> lock(mu_);
  // Note [Registered inputs]: the lowest free slot, the same on every rank (registrations are
  // collective there, in the same order).
  for (int k = 0; exchanges_ && k < kDirectUserSlots && reg.slot < 0; ++k) {
    bool taken = false;
    for (const auto& [other, r] : regs_) taken = taken || r.slot == k;
    if (!taken) reg.slot = k;
  }
  regs_[h] = std::move(reg);
  counts_.live = regs_.size();
  *handle = h;
  return Status::success();
}

bool UserBuffers::known(uint64_t handle) const {
  std::lock_guard<std::mutex> lock(mu_);
  return regs_.count(handle) != 0;
}

Status UserBuffers::release(const Key& k) {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  auto it = cache().find(k);
  if (it == cache().end()) return Status::success();
  if (--it->second.refs > 0) return Status::success();
  void* p = it->second.ptr;
  cache().erase(it);
  return rt_->ipc_close_handle(p);
}

Status UserBuffers::close(uint64_t handle) {
  Registration reg;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regs_.find(handle);
    if (it == regs_.end()) return Status::success();
    reg = std::move(it->second);
    regs_.erase(it);
    counts_.live = regs_.size();
  }
  Status first = Status::success();
  for (const Key& k : reg.held) {
    Status s = release(k);
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

void UserBuffers::close_all() {
  std::vector<uint64_t> handles;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [h, reg] : regs_) handles.push_back(h);
  }
  for (uint64_t h : handles) (void)close(h);
}

const uint8_t* UserBuffers::peer_buffer(uint64_t handle, int r) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regs_.find(handle);
  if (it == regs_.end() || r < 0 || static_cast<size_t>(r) >= it->second.buffer.size()) return nullptr;
  return it->second.buffer[static_cast<size_t>(r)];
}

int UserBuffers::slot_of(uint64_t handle, std::vector<const uint8_t*>* buffers) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regs_.find(handle);
  if (it == regs_.end()) return -1;
  *buffers = it->second.buffer;
  return it->second.slot;
}

bool UserBuffers::find_mine(const void* ptr, size_t bytes, int* slot, uint64_t* offset) {
  const auto* p = static_cast<const uint8_t*>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [h, reg] : regs_) {
    const uint8_t* b = reg.buffer[static_cast<size_t>(rank_)];
    if (reg.slot < 0 || b == nullptr || p < b || p + bytes > b + reg.length) continue;
    *slot = reg.slot;
    *offset = static_cast<uint64_t>(p - b);
    ++counts_.direct_calls;
    return true;
  }
  return false;
}

UserBuffers::Counts UserBuffers::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

std::string UserBuffers::describe() const {
  const Counts c = counts();
  return format("user buffers: %zu registered, %zu peer allocations opened, %zu found open, %zu calls read by the "
                "peers from a registered input (%s; Note [User buffers mapped into peers])\n",
                c.live, c.opened, c.reused, c.direct_calls,
                !exchanges_ ? direct_reads_ ? "ranks of one process: nothing exchanged; the peers read inputs by "
                                              "their address (the plan's next line)"
                                            : "ranks of one process: nothing exchanged; inputs go through the scratch"
                : direct_reads_
                    ? "registration is collective: every rank registers at the same point; every collective reads "
                      "a registered input where it lies (an all-reduce in place: two-shot only)"
                    : "registration is collective: every rank registers at the same point; the waiting protocol's "
                      "inputs go through the scratch");
}

}  // namespace accord::dev
