// The user's own GPU buffers mapped into the peers (Note [User buffers mapped into peers],
// user_buffers.cpp): registration, the exchange record of each rank, each peer's allocation
// opened once per process and cached by (owner, base, buffer id), and the let-go at destroy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/status.hpp"
#include "transport/device/device_runtime.hpp"

namespace accord::dev {

// What each rank contributes to one registration's (or deregistration's) host all-gather:
// plain bytes of one size on every rank.
struct UserBufferRecord {
  static constexpr uint64_t kMagic = 0x3142475245525541ULL;  // "AUREGRB1"
  enum Kind : uint32_t { kRegister = 1, kDeregister = 2, kClosed = 3, kFailed = 4 };  // kFailed: mine() failed
  uint64_t magic = 0;
  uint64_t seq = 0;        // the communicator's registration exchanges before this one
  uint32_t kind = 0;
  int32_t rank = -1;
  uint64_t handle = 0;     // kDeregister, kClosed: the registration's number (its seq)
  uint64_t base = 0;       // kRegister: the allocation holding the buffer, as its owner addresses it
  uint64_t bytes = 0;      // its size
  uint64_t buffer_id = 0;  // Note [Buffer ids]
  uint64_t offset = 0;     // of the registered buffer inside the allocation
  uint64_t length = 0;     // the registered bytes
  IpcHandle ipc;           // of the allocation's base (IPC jobs only)
};

using PeerAllocationKey = std::tuple<std::string, uint64_t, uint64_t, int>;

class UserBuffers {
 public:
  // device: this rank's GPU; ipc[r]: rank r is another process (else it addresses this
  // process's pointers); owner[r]: rank r's process ("PID NS TOKEN", equal for ranks of one
  // process), the first part of the cache's key.
  UserBuffers(DeviceRuntime* rt, int device, int rank, std::vector<bool> ipc, std::vector<std::string> owner);
  ~UserBuffers();  // closes what close_all did not (a failed init)
  UserBuffers(const UserBuffers&) = delete;
  UserBuffers& operator=(const UserBuffers&) = delete;

  // Whether registrations are exchanged at all: some rank is another process (then every rank
  // has one, and every rank exchanges). Ranks of one process address each other's pointers.
  bool exchanges() const { return exchanges_; }
  // Whether calls may read registered inputs (the spinning protocol), for the plan's line.
  void set_direct_reads(bool on) { direct_reads_ = on; }
  // This rank's record of a registration of [ptr, ptr + bytes), the seq-th exchange.
  Status mine(void* ptr, size_t bytes, uint64_t seq, UserBufferRecord* out) const;
  // The record of a deregistration (kDeregister) or of its second exchange (kClosed).
  UserBufferRecord closing(uint32_t kind, uint64_t seq, uint64_t handle) const;
  // Every rank's record of the same exchange agrees with this rank's (kind, seq, handle), else
  // an error naming the first rank that differs: registration is collective on Accord.
  Status check(const std::vector<UserBufferRecord>& all, const UserBufferRecord& mine, const char* what) const;
  // After a registration's exchange: opens (or finds in the cache) every peer's allocation
  // and records the registration; its handle is the exchange's seq.
  Status open(const std::vector<UserBufferRecord>& all, uint64_t* handle);
  bool known(uint64_t handle) const;
  // Closes this rank's mappings of the peers' buffers of registration `handle` (a mapping
  // that another registration, or another communicator of this process, still holds stays).
  Status close(uint64_t handle);
  // Note [Freeing memory peers map]: destroy, before this rank says it let go.
  void close_all();
  // Rank r's buffer of registration `handle`, as this process addresses it (null: unknown).
  const uint8_t* peer_buffer(uint64_t handle, int r) const;
  // Note [Registered inputs] (direct_call.hpp): the registration's slot (the same on every
  // rank; -1: none, the job exchanges nothing or every slot is taken), and every rank's
  // buffer in it.
  int slot_of(uint64_t handle, std::vector<const uint8_t*>* buffers) const;
  // The slot of this rank's registered buffer that holds [ptr, ptr + bytes), and ptr's offset
  // in it; false when none does. Counts the calls it finds (Counts::direct_calls).
  bool find_mine(const void* ptr, size_t bytes, int* slot, uint64_t* offset);
  // The plan's line: registrations live, peer allocations this communicator maps, and how
  // many it opened and found in the cache.
  std::string describe() const;
  struct Counts {
    size_t live = 0;    // registrations of this communicator
    size_t opened = 0;  // IPC opens this communicator made
    size_t reused = 0;  // peer allocations found open already (cache hits)
    size_t direct_calls = 0;  // calls whose input the peers read from its registered buffer
  };
  Counts counts() const;

 private:
  // One peer allocation: its owner process, base and buffer id, and the mapping device (the
  // process-wide cache's key).
  using Key = PeerAllocationKey;
  struct Registration {
    std::vector<const uint8_t*> buffer;  // [nranks]
    std::vector<Key> held;               // the cache entries it holds (one reference each)
    int slot = -1;                       // Note [Registered inputs]
    uint64_t length = 0;                 // this rank's registered bytes
  };
  Status release(const Key& k);

  DeviceRuntime* rt_ = nullptr;
  int device_ = -1;
  int rank_ = 0;
  std::vector<bool> ipc_;
  std::vector<std::string> owner_;
  bool exchanges_ = false;
  bool direct_reads_ = false;
  mutable std::mutex mu_;
  std::map<uint64_t, Registration> regs_;
  Counts counts_;
};

}  // namespace accord::dev
