// The host side of the direct protocol (Note [Direct protocol], direct_call.hpp): each rank's
// scratch, allocated at init and mapped into every peer, the choice between the direct
// protocol and the FIFO schedule for a call, and the direct part of a launch. The
// communicator owns one when every pair of its ranks can address each other's GPU memory
// (engine.cpp / direct_path.cpp decide; Note [Direct or FIFO]), or, in its staged form
// (Note [Staged protocol], direct_staged.cpp), when some pair of a job on one host cannot.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "collectives/device/dev_call.hpp"
#include "collectives/device/process_hold.hpp"
#include "collectives/schedule.hpp"
#include "core/status.hpp"
#include "transport/bootstrap/store.hpp"
#include "transport/device/device_runtime.hpp"

namespace accord::dev {

// ACCORD_DEVICE_PROTO.
enum class ProtoMode { kAuto, kFifo, kDirect, kOneShot, kTwoShot, kStaged };
bool parse_proto_mode(const std::string& text, ProtoMode* out);
const char* proto_mode_name(ProtoMode m);
const char* proto_name(uint32_t proto);  // kProtoFifo... : "fifo", "direct one-shot", "direct two-shot"
// ACCORD_SHARED_GPU_SYNC (Note [Shared GPU sync], gpu_sync.cpp); out may be null.
enum class GpuSync { kAuto, kSpin, kWait };
bool parse_gpu_sync(const std::string& text, GpuSync* out);

constexpr size_t kDefaultDirectScratchBytes = size_t{8} << 20;  // both data halves
constexpr size_t kMinDirectScratchBytes = 4096;
// Note [Staged protocol] (direct_staged.cpp): each rank's staging area in its shared-memory
// segment: kStagedWordBytes of 32-bit words (a round word per sender, then a tag word per
// half and sender, kStagedMaxRanks apart, then a read word per sender), then two data halves.
constexpr size_t kDefaultStagedBytes = size_t{4} << 20;  // both halves
constexpr size_t kStagedWordBytes = 1024;
constexpr int kStagedMaxRanks = 64;  // kStagedTagStride (direct_call.hpp)
constexpr int kStagedReadWord = 3 * kStagedMaxRanks;  // after word[] and tag[2][]
static_assert(kStagedWordBytes % 256 == 0 && kStagedWordBytes >= sizeof(uint32_t) * 4 * kStagedMaxRanks,
              "the staging area's words: word, tag[2], read; the halves 256-byte aligned");
// One data half of a scratch or staging area of `bytes` (both halves): 256-byte aligned.
inline size_t direct_half_bytes(size_t bytes) { return std::max(kMinDirectScratchBytes, bytes) / 2 & ~size_t{255}; }
// ACCORD_STAGED_BYTES (0: the built-in size), and the whole area it makes.
inline size_t staged_bytes(int64_t setting) {
  return setting > 0 ? static_cast<size_t>(setting) : kDefaultStagedBytes;
}
inline size_t staged_area_bytes(size_t staged_bytes) { return kStagedWordBytes + 2 * direct_half_bytes(staged_bytes); }

struct DirectSetup {
  DeviceRuntime* rt = nullptr;
  int device = -1;
  int rank = 0;
  int nranks = 0;
  Stream stream;                  // the communicator's own stream (zeroing the scratch)
  std::vector<bool> ipc;          // per rank: the peer is another process (IPC), else a pointer
  bool one_gpu = true;            // every rank is on this rank's GPU
  size_t scratch_bytes = kDefaultDirectScratchBytes;
  ProtoMode mode = ProtoMode::kAuto;
  StoreClient* store = nullptr;
  Deadline deadline;
  // Note [Waiting protocol] (direct_call.hpp): the job's choice of ACCORD_SHARED_GPU_SYNC
  // (Note [Shared GPU sync]): hand-offs between kernels by stream memory operations, and why.
  bool wait = false;
  std::string sync_why;
  // Note [Staged protocol] (direct_staged.cpp): collectives staged through every rank's area
  // of shared host memory (staging, per rank, registered with the runtime) by copy engines,
  // and why; the device memory joins `hold` (the communicator's, Note [Freeing memory peers
  // map]).
  bool staged = false;
  std::string staged_why;
  std::vector<uint8_t*> staging;
  size_t staged_bytes = kDefaultStagedBytes;
  std::shared_ptr<ProcessHold> hold;
};

class DirectEngine {
 public:
  // Every rank of the job calls it (collective over the store).
  static Status create(const DirectSetup& setup, std::unique_ptr<DirectEngine>* out);
  ~DirectEngine();
  DirectEngine(const DirectEngine&) = delete;
  DirectEngine& operator=(const DirectEngine&) = delete;

  // The protocol of a call (the same on every rank: from the call and the job's settings), and
  // why, for the log.
  uint32_t choose(Collective coll, size_t bytes, std::string* why) const;
  // The direct part of a launch of `count` elements per rank (as CollArgs::count), and its
  // blocks (at most max_blocks).
  void prepare(Collective coll, int root, uint32_t proto, size_t count, size_t elem_bytes, unsigned max_blocks,
               DevDirect* d, uint32_t* nblocks) const;
  // Note [Waiting protocol]: whether calls hand off through the stream, and the launch of one
  // call that way: its kernels, one per phase of each round, with the stream's writes and
  // waits of the round words between them, on `stream` (direct_wait.cpp). A failure after some
  // kernels were queued leaves the stream unusable for this communicator: *partial says so.
  bool waiting() const { return wait_; }
  Status launch_waiting(const DevLaunch& launch, Stream stream, bool* partial);
  // Note [Staged protocol]: whether collectives are staged through host memory (sends and
  // receives keep the FIFOs), and the launch of one such call (direct_staged.cpp), as
  // launch_waiting.
  bool staged() const { return staged_; }
  // Note [Inputs read where they lie] (direct_path.cpp): every rank is a thread of this process
  // on this GPU and the job spins, so any input may be described by its own address.
  bool pointer_inputs() const { return pointer_inputs_; }
  Status launch_staged(const DevLaunch& launch, Stream stream, bool* partial);
  // The watchdog, after it set DevCtl::abort (a dead peer, a timeout, an abort): writes every
  // word this rank's stream may wait on past the last round waited for, so that no stream
  // waits for a peer that will never write (the kernels after the waits see the abort and do
  // nothing). Safe from any thread; a no-op in the spinning protocol.
  void release_waits();
  // After a launch of `d` succeeded: its rounds are spent (Note [Direct rounds]).
  void commit(const DevDirect& d);
  // Note [Registered inputs] (direct_call.hpp): every rank's buffer of a registration's slot
  // into DevDirect::user, through `stream` (synchronized). No kernel may be reading the slot.
  Status set_user_slot(int slot, const std::vector<const uint8_t*>& buffers, Stream stream);
  // One line for the plan (--show-plan).
  std::string describe() const;
  // Logs a call's choice at info level, once per protocol and power of two of the size.
  void log_choice(Collective coll, size_t bytes, uint32_t proto, const std::string& why);

  // Note [Freeing memory peers map] (engine.cpp). Once this rank's kernels are done:
  // closes its mappings of the peers' memory and hands its own scratch (and `more`: other
  // device memory that peers address) to the ranks of this process in the job. True when it
  // was the last of them: the caller then waits until the other processes' ranks let go too,
  // and calls free_held() (or leaves the memory allocated, if they never do).
  bool let_go(const std::vector<void*>& more);
  bool grouped() const { return held_ != nullptr; }  // false: init failed before; the destructor frees
  void free_held();

 private:
  DirectEngine() = default;
  Status open(const DirectSetup& s);
  Status open_staged(const DirectSetup& s);  // direct_staged.cpp
  Status upload_table(const std::vector<uint8_t*>& table, const DirectSetup& s);
  Status launch_phase(const DevLaunch& l, Stream stream);  // direct_wait.cpp
  void release_staged();
  void destroy_streams();  // rescue_, side_ and its events

  DeviceRuntime* rt_ = nullptr;
  int rank_ = 0;
  int nranks_ = 0;
  ProtoMode mode_ = ProtoMode::kAuto;
  size_t half_bytes_ = 0;
  size_t flag_bytes_ = 0;
  void* mine_ = nullptr;                 // this rank's scratch
  std::vector<void*> opened_;            // peers' scratch opened through IPC
  void* table_ = nullptr;                // DevDirect::scratch, in GPU memory
  void* user_table_ = nullptr;           // DevDirect::user (Note [Registered inputs]); null: waiting protocol
  bool any_user_slot_ = false;           // some registration has had a slot (every rank alike)
  bool pointer_inputs_ = false;          // Note [Inputs read where they lie]: every rank in this process, on this GPU
  uint32_t round_ = 1;                   // the next call's first round
  std::shared_ptr<ProcessHold> held_;  // this process's ranks' memory, freed by the last to let go
  bool let_go_ = false;
  std::vector<uint8_t*> scratch_;        // [nranks] every rank's scratch as this process addresses it
  bool wait_ = false;                    // Note [Waiting protocol]
  std::string sync_why_;
  Stream rescue_;                        // release_waits' own stream (waiting protocol only)
  std::atomic<uint32_t> waited_round_{0};  // the last round a wait was queued for
  std::set<std::pair<uint32_t, int>> logged_;
  // Note [Staged protocol]
  bool staged_ = false;
  std::string staged_why_;
  std::vector<uint8_t*> staging_;       // [nranks] every rank's staging area, as this process maps it
  std::vector<uint8_t*> staging_dev_;   // the same, as the GPU addresses it (device_address)
  // Note [Staged pipeline]: the stream that stages out (copies out and tells) beside the
  // caller's, and its events: A of a round done (on the caller's stream), a round's staging
  // out done (on side_, by round parity).
  Stream side_;
  Event a_done_;
  Event out_done_[2];
};

}  // namespace accord::dev
