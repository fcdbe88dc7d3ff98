// Shared-memory transport between ranks on one host.
//
// Each rank creates one POSIX shared-memory segment holding a receive FIFO for every local
// peer (receiver-side buffers: a sender writes into the memory its receiver will read). Names
// are "/accord-<pid>-n<pid namespace>-<128 random bits>", created O_EXCL with mode 0600, and
// unlinked as soon as every local peer has mapped the segment, so after init nothing is left in
// /dev/shm even if a rank is later killed. If a rank dies during the few milliseconds between
// create and unlink, the next Accord process on the host in the same pid namespace removes
// segments whose creator pid is gone (a pid of another namespace, another container sharing
// this /dev/shm, names no process here: Note [Process identity], collectives/communicator.cpp).
//
// The first page of the segment holds the owner's death note, its departure record (Note
// [Departures], wait.hpp) and its board (Note [Board]).
// After the FIFOs, the segment holds one device-FIFO area per rank (zero-filled; a whole FIFO
// with ShmOptions::device_fifos, else its control part): the device path's host-staged FIFOs
// (Note [Device FIFOs], fifo.hpp), so host calls and device calls never share a FIFO.
// Last, with ShmOptions::staging_bytes, the owner's staging area for the staged collectives
// (Note [Staged protocol], collectives/device/direct_staged.cpp): 1 KiB of words, then the
// data halves.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.hpp"
#include "core/status.hpp"
#include "transport/bootstrap/store.hpp"
#include "transport/shm/board.hpp"
#include "transport/shm/fifo.hpp"

namespace accord {

struct ShmOptions {
  FifoShape shape;
  WaitPolicy policy;
  // Note [Device FIFOs]: each device area holds a whole FIFO (slots too), for the host-staged
  // device path; otherwise only its control part.
  bool device_fifos = false;
  // Note [Staged protocol] (collectives/device/direct_staged.cpp): bytes of the owner's
  // staging area at the end of each segment (0: none). Every rank must give the same.
  size_t staging_bytes = 0;
};

class ShmTransport {
 public:
  // Collective over the ranks in `local_ranks` (which includes `rank`).
  static Status setup(StoreClient* store, int rank, int nranks, const std::vector<int>& local_ranks,
                      const ShmOptions& options, Deadline deadline, const std::function<void()>& after_publish,
                      std::unique_ptr<ShmTransport>* out);
  ~ShmTransport();

  // Note [FIFO lines at init] (shm_transport.cpp): the host FIFOs' first lines into this CPU's
  // caches and TLB, at the end of init.
  void warm_fifos() const;
  SendChannel* sender(int peer) const { return senders_[static_cast<size_t>(peer)].get(); }
  RecvChannel* receiver(int peer) const { return receivers_[static_cast<size_t>(peer)].get(); }
  const FifoShape& shape() const { return options_.shape; }
  // Every segment this rank mapped (its own and its local peers'): the device path registers
  // them with the device runtime, so GPU kernels read and write the slots (host-staged).
  struct Mapping {
    void* addr = nullptr;
    size_t bytes = 0;
  };
  const std::vector<Mapping>& mappings() const { return mappings_; }
  // Note [Device FIFOs]: the control area of the device FIFO from `peer` to this rank (in this
  // rank's segment), and of the one from this rank to `peer` (in the peer's segment).
  void* device_ctrl_recv(int peer) const { return dev_ctrl_recv_[static_cast<size_t>(peer)]; }
  void* device_ctrl_send(int peer) const { return dev_ctrl_send_[static_cast<size_t>(peer)]; }
  // Note [Staged protocol]: `rank`'s staging area (zero-filled, in its segment as this rank
  // maps it), of ShmOptions::staging_bytes; null without one or for a rank that is not local.
  uint8_t* staging(int rank) const {
    return staging_.empty() ? nullptr : staging_[static_cast<size_t>(rank)];
  }

  // Note [Death notes] (wait.hpp): per rank, the first word of its segment's header page.
  // Zero-filled memory reads as rank 0, so the owner stores -1 at creation.
  const std::atomic<int32_t>* const* death_notes() const { return notes_.data(); }
  void leave_death_note(int rank, int32_t blamed) { notes_[static_cast<size_t>(rank)]->store(blamed); }

  // Note [Departures] (wait.hpp): per rank, at kDepartureOffset of its segment's header page
  // (zero-filled: not departed). depart() publishes this rank's.
  static constexpr size_t kDepartureOffset = 64;
  const Departure* const* departures() const { return departures_.data(); }
  void depart(int rank, uint64_t host_seq, uint64_t device_seq) {
    Departure* d = departures_[static_cast<size_t>(rank)];
    d->host_seq.store(host_seq, std::memory_order_relaxed);
    d->device_seq.store(device_seq, std::memory_order_relaxed);
    d->left.store(1, std::memory_order_release);
  }

  // Note [Freeing memory peers map] (collectives/device/engine.cpp): per rank, at
  // kReleaseOffset of its segment's header page (zero-filled: not yet), set once the rank
  // no longer touches any peer's device memory (its kernels are done, its mappings closed).
  static constexpr size_t kReleaseOffset = 128;
  void release_device_memory(int rank) { releases_[static_cast<size_t>(rank)]->store(1, std::memory_order_release); }
  bool device_memory_released(int rank) const {
    const std::atomic<uint32_t>* r = releases_[static_cast<size_t>(rank)];
    return r != nullptr && r->load(std::memory_order_acquire) != 0;
  }

  // Note [Board] (board.hpp): the local ranks' boards, in the segments' header pages; null
  // when there are more local ranks than a board's sleep table holds.
  Board* board() const { return board_.get(); }

 private:
  ShmTransport() = default;
  ShmOptions options_;
  std::vector<Mapping> mappings_;
  std::vector<std::atomic<int32_t>*> notes_;
  std::vector<Departure*> departures_;
  std::vector<std::atomic<uint32_t>*> releases_;
  std::vector<std::unique_ptr<SendChannel>> senders_;
  std::vector<std::unique_ptr<RecvChannel>> receivers_;
  std::vector<uint8_t*> host_fifos_;  // both of each pair's, for warm_fifos
  std::vector<void*> dev_ctrl_recv_, dev_ctrl_send_;
  std::vector<uint8_t*> staging_;
  std::unique_ptr<Board> board_;
};

// The inode of this process's pid namespace (/proc/self/ns/pid), as text; "?" without /proc.
std::string pid_namespace();

// Removes /dev/shm/accord-<pid>-* segments of this user, made in this pid namespace, whose
// creating process is gone.
void sweep_stale_shm_segments();

// Removes every /dev/shm/accord-<pid>-* segment of these processes (of this pid namespace):
// when a job's init fails,
// its segments are useless, and a rank that died may have created one nobody else learned of.
void remove_segments_of(const std::vector<long>& pids);

// Lists our segments currently in /dev/shm (tests check it is empty after a job).
std::vector<std::string> list_shm_segments();

}  // namespace accord
