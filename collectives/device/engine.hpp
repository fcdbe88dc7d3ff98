// The device engine: everything a communicator does with GPU buffers, beside the host executor
// (collectives/executor.hpp). Note [Device engine].
//
// Note [Device engine]: a communicator (collectives/communicator.hpp) owns one DeviceEngine and
// calls it; the engine holds the device half of the communicator's state: the GPU this rank
// runs on and every rank's (Note [GPU identity]), the route to every peer (Note [Device FIFOs]),
// the FIFOs or the direct engine's mapped buffers (Note [Direct or FIFO]), the registered user
// buffers, the kernels' control block and step ring, the streams the caller hands in (Note [One
// stream per rank], Note [Kernel order]), the watchdog thread (Note [Device watchdog]) and the
// pump threads of GPU data over TCP (Note [Device data over TCP]).
// What it reads of its communicator, it reads through references bound at construction to the
// communicator's members (the job: rank, ranks, settings, FIFO shapes, hosts and processes,
// shared-memory transport, host links, abort flag), which the communicator's init fills in
// before it calls the engine, and which outlive the engine (it is a member of the
// communicator, declared after them). What it asks of the communicator is a short list of
// calls: planning a call as the host path does (plan_call, check_args, the pre-multiplied
// sums' scalars) and the communicator's error (set_sticky, leave_death_note,
// publish_departure). The engine never touches the host path's state (schedules' memo, board,
// single copy, host scratch).
// Method definitions: collectives/device/engine.cpp (setup, routes, launches, watchdog),
// engine_tcp.cpp (TCP pumps), direct_path.cpp (the direct engine and user buffers), gpu_sync.cpp
// (spin or wait), and collectives/point_to_point.cpp (point-to-point on device buffers, beside
// the host form it shares its checks with).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/device/dev_call.hpp"
#include "collectives/device/direct.hpp"
#include "collectives/device/process_hold.hpp"
#include "collectives/device/user_buffers.hpp"
#include "collectives/executor.hpp"
#include "collectives/schedule.hpp"
#include "core/settings.hpp"
#include "core/status.hpp"
#include "transport/bootstrap/store.hpp"
#include "transport/device/device_runtime.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace accord {

class Communicator;
struct CollArgs;

// Note [Point-to-point FIFOs] (collectives/point_to_point.cpp): the FIFOs that carry sends and
// receives of device buffers between two ranks that address each other's GPU memory:
// kP2pFifoSlots slots of a quarter of ACCORD_DEVICE_P2P_BYTES (0: kDefaultP2pFifoBytes), in
// 4 KiB multiples. INVALID_ARGUMENT for a size that gives slots under 4 KiB or over the FIFO
// header's limit.
constexpr size_t kDefaultP2pFifoBytes = size_t{8} << 20;
constexpr size_t kP2pFifoSlots = 4;
Status p2p_fifo_shape(int64_t setting, FifoShape* out);

class DeviceEngine {
 public:
  // Binds the references to `comm`'s job (Note [Device engine]); touches nothing else.
  explicit DeviceEngine(Communicator& comm);
  ~DeviceEngine() { release(); }
  DeviceEngine(const DeviceEngine&) = delete;
  DeviceEngine& operator=(const DeviceEngine&) = delete;

  // ---- init, called by Communicator::init in this order ----
  // Note [Device data over TCP] (engine_tcp.cpp): the sockets of GPU data to the ranks over TCP.
  Status connect_tcp(StoreClient* store, const TcpOptions& options, Deadline deadline);
  Status setup_device(int requested);
  Status gather_gpus(StoreClient* store, Deadline deadline);  // Note [GPU identity]
  Status share_sim_slices(StoreClient* store, Deadline deadline);  // Note [Simulated time slices of a job]
  void compute_ring();       // Note [Ring order]
  void find_gpu_sharers();   // Note [One stream per rank]
  Status connect_device_fifos(StoreClient* store, Deadline deadline);
  Status setup_direct(StoreClient* store, Deadline deadline);  // Note [Direct or FIFO] (direct_path.cpp)
  void warn_shared_gpu() const;  // Note [Shared GPU warnings]
  // Destroy: waits for this rank's kernels, lets go of the memory peers map, stops the threads.
  // Once; later calls do nothing.
  void release();

  // ---- what the communicator asks ----
  int device() const { return device_; }
  // Whether rank r has a GPU (false before setup_device, and for a host-only job).
  bool has_gpu(int r) const {
    return r >= 0 && static_cast<size_t>(r) < device_of_.size() && device_of_[static_cast<size_t>(r)] >= 0;
  }
  bool job_has_gpus() const;
  // Note [Ring order]: position -> rank, rank -> position; empty: rank order.
  const std::vector<int>& ring() const { return ring_; }
  const std::vector<int>& pos_of() const { return pos_of_; }
  // How GPU ranks a and b (a < b, both on this host) exchange device buffers, and why.
  std::string device_pair(int a, int b) const;
  // The device transport to `peer`: "p2p", "ipc", "host-staged", "tcp-staged", or null (none).
  const char* device_channel(int peer) const;
  bool has_tcp_data() const { return tcp_dev_ != nullptr; }
  // The plan's device lines: the protocol, the point-to-point FIFOs, and the user buffers
  // registration has mapped.
  std::string plan_lines() const;
  // Note [Pre-multiplied sum]: the runtime that can say where a scalar pointer points (the
  // host-only communicator's probe in a process with CUDA), or null.
  DeviceRuntime* pointer_runtime() const { return rt_ != nullptr ? rt_ : probe_rt_; }

  // Communicator::classify: whether the call's buffers are this GPU's memory.
  Status classify(const CollArgs& args, bool* on_device) const {
    *on_device = false;
    // Host-only, and no CUDA to ask about pointers: nothing to look at (every call asks).
    if (rt_ == nullptr && probe_rt_ == nullptr) return Status::success();
    ACCORD_TRY(classify_buffers(args, on_device));
    return *on_device ? check_device_peers(args) : Status::success();
  }
  Status enqueue_device(const CollArgs& args, void* user_stream);
  Status enqueue_device_p2p(const std::vector<CollArgs>& ops, void* user_stream);
  Status register_buffer(void* ptr, size_t bytes, uint64_t* handle);
  Status deregister_buffer(uint64_t handle);
  const void* registered_buffer(uint64_t handle, int r) {
    std::lock_guard<std::mutex> lock(users_mu_);
    return users_ == nullptr ? nullptr : users_->peer_buffer(handle, r);
  }

  // Note [Device watchdog]: whether kernels may have recorded a failure (a GPU communicator),
  // and that failure made the communicator's error.
  bool has_kernels() const { return ctl_host_ != nullptr; }
  void adopt_kernel_error();
  // The last device call this rank completed (DevCtl::done; 0 without a GPU): Note [Departures].
  uint64_t device_done() const;

 private:
  Communicator& comm_;
  // ---- the communicator's job, read only (Note [Device engine]) ----
  const int& rank_;
  const int& nranks_;
  const Settings& settings_;
  const FifoShape& shape_;
  const FifoShape& p2p_shape_;  // Note [Point-to-point FIFOs]: checked by the communicator's configure()
  const StoreEndpoint& endpoint_;
  const std::unique_ptr<ShmTransport>& shm_;
  const PeerLinks& links_;
  const std::vector<int>& local_ranks_;
  const std::vector<int>& remote_ranks_;
  const std::vector<std::string>& hosts_;
  const std::vector<std::string>& shm_domains_;
  const std::vector<long>& pid_of_;
  const std::vector<std::string>& proc_of_;
  const std::vector<std::string>& pidns_of_;
  const int& nhosts_;
  const std::atomic<bool>& abort_;
  bool same_process(int a, int b) const;  // the communicator's (Note [Process identity])

  Status register_slots();
  Status warm_up_kernel();  // Note [Warm-up launch] (engine.cpp)
  const std::string& job_key() const;  // built once (Note [One stream per rank])
  Status check_stream_owner(void* user_stream, const char* name) const;
  void note_stream_use(void* user_stream, uint64_t seq);
  void forget_stream_uses();
  Status classify_buffers(const CollArgs& args, bool* on_device) const;
  Status check_device_peers(const CollArgs& args) const;
  Status refuse_device_buffers(const CollArgs& args) const;
  // Note [Device FIFOs]: how GPU ranks a and b (on this host) exchange device buffers, and why.
  enum class DeviceRoute { kHostStaged, kP2p, kIpc, kTcpStaged };
  DeviceRoute device_route(int a, int b, std::string* why) const;
  // Note [GPU identity] (engine.cpp): every rank's GPU as the ranks told each other at init;
  // what every route is decided from.
  struct GpuFacts {
    int ordinal = -1;                // as the rank's own process numbers it
    std::string uuid;                // or the bus id, where the runtime has no UUID
    std::string bus;                 // canonical_bus_id
    std::vector<std::string> peers;  // bus ids it can peer with both ways (peer_bus_ids)
  };
  bool same_gpu(int a, int b) const;
  std::string gpu_label(int r) const;  // "GPU 3", or with the bus id when numberings differ
  // Note [Device data over TCP] (engine_tcp.cpp): GPU buffers to ranks over TCP staged
  // through pinned host FIFOs that pump threads drive.
  struct TcpPump {
    int peer = -1;
    void* out = nullptr;  // pinned FIFO the kernel sends into; the send pump drains it
    void* in = nullptr;   // pinned FIFO the recv pump fills; the kernel receives from it
    std::thread send, recv;
    std::mutex mu;
    Status failure;  // the first failure of either pump (guarded by mu)
    std::atomic<bool> failed{false};
  };
  Status add_tcp_pump(int peer, size_t fifo_bytes, void** out_fifo, void** in_fifo);
  void start_tcp_pumps();
  void stop_tcp_pumps();
  void pump_send(TcpPump* p);
  void pump_recv(TcpPump* p);
  Status pump_failure(int peer);  // success: its pumps are well (or it has none)
  void pump_failed(TcpPump* p, Status s, const char* what);
  Status upload_peers(const std::vector<dev::DevPeer>& peers);
  Status setup_engine(StoreClient* store, Deadline deadline, dev::ProtoMode mode, const std::vector<uint8_t*>& staging,
                      const std::string& staged_why);
  // Note [Shared GPU sync] (device/gpu_sync.cpp): whether the direct protocol hands off through
  // the stream (true) or in the kernel, the same on every rank (collective over the store).
  Status choose_gpu_sync(StoreClient* store, Deadline deadline, bool* wait, std::string* why);
  bool gpu_time_sliced() const;  // this rank's GPU is shared by processes without MPS
  Status hand_offs(bool wait);    // Note [Waiting FIFOs] (direct_path.cpp)
  bool prepare_direct(const CollArgs& a, size_t elem_bytes, dev::DevLaunch* launch);
  bool reads_input_in_place(const CollArgs& a, uint32_t proto, size_t bytes, const dev::DevDirect& launch) const;
  Status wrap_stream(void* user_stream, Stream* out);
  Status check_device_call(void* user_stream, const char* name);
  Status reserve_steps(size_t bytes, uint64_t seq, size_t* offset);
  Status device_stream(void* user_stream, const char* name, Stream* out);
  // p2p: the kernel reads the point-to-point FIFOs' table (Note [Point-to-point FIFOs]).
  Status launch_schedule(const char* name, const Schedule& sched, dev::DevLaunch* launch, Stream us,
                         void* user_stream, bool direct = false, bool p2p = false);
  // Note [Waiting FIFOs] (fifo_wait.cpp): `sched` (the point-to-point table's with p2p) as
  // kernels that never wait inside, the stream waiting between them.
  Status launch_fifo_waiting(const char* name, const Schedule& sched, const dev::DevLaunch& launch, Stream us,
                             void* user_stream, bool p2p);
  Status fifo_wait(Stream us, uint32_t* word, uint32_t value, int peer);
  // Note [Copy-engine messages]: the least a send or receive through a FIFO in host memory
  // that a copy engine moves (ACCORD_P2P_COPY_MIN_BYTES; SIZE_MAX: none).
  size_t copy_min_bytes() const {
    return settings_.p2p_copy_min_bytes < 0 ? SIZE_MAX : static_cast<size_t>(settings_.p2p_copy_min_bytes);
  }
  Status copy_messages(Schedule* part, Stream us);
  Status queued_in_part(const std::string& what, const Status& failed);  // fifo_wait.cpp
  // The watchdog, after it set DevCtl::abort: ends every stream wait of this rank (the direct
  // engine's and the FIFOs'), so that no stream waits for a peer that will never write.
  void release_waits();
  void start_watchdog();
  void stop_watchdog();
  void watchdog_loop();
  // Note [Device watchdog]: the failure a kernel recorded in DevCtl, as a Status (success:
  // none).
  Status kernel_error();
  unsigned kernel_blocks_limit() const;  // engine.cpp, Note [Blocks]
  uint32_t call_blocks(const Schedule& sched) const;
  std::string dead_peer_note() const;  // engine.cpp
  void let_go_of_peer_memory();  // Note [Freeing memory peers map] (engine.cpp)
  // Note [User buffers mapped into peers]: the registrations (created at the first), and one
  // exchange of their records over the host all-gather.
  dev::UserBuffers* user_buffers();
  Status exchange_user_records(const dev::UserBufferRecord& mine, const char* what,
                               std::vector<dev::UserBufferRecord>* all);
  // Until every kernel this rank queued has ended (ACCORD_TIMEOUT_MS at most).
  Status wait_for_kernels(const char* what);
  Status join_fifo_hold(StoreClient* store, Deadline deadline);

  bool released_ = false;
  // The GPU data sockets to the ranks over TCP (Note [Device data over TCP]): null unless some
  // rank of the job may run on a GPU. Its pumps, and whether they are to stop.
  std::unique_ptr<TcpTransport> tcp_dev_;
  std::vector<std::unique_ptr<TcpPump>> pumps_;
  std::atomic<int> pumps_stop_{0};  // 1: drain what the kernels wrote, then stop; 2: stop now
  std::atomic<bool> pumps_abort_{false};  // the TCP waits' abort flag
  std::atomic<int> send_pumps_running_{0};
  // The process's runtime, this rank's GPU (-1: host only), every rank's GPU.
  DeviceRuntime* rt_ = nullptr;
  DeviceRuntime* probe_rt_ = nullptr;  // host-only communicator, CUDA present: refuses device buffers
  int device_ = -1;
  std::vector<int> device_of_;      // every rank's GPU ordinal, in its own process's numbering
  std::vector<GpuFacts> gpus_;      // Note [GPU identity]; empty with one rank
  bool numberings_differ_ = false;  // some GPU has two ordinals, or one ordinal two GPUs
  void* grid_dev_ = nullptr;        // DevCall::grid, inside counts_dev_
  unsigned max_blocks_ = 1;         // Note [Blocks]
  std::string gpu_sharers_;         // ranks of this process on this GPU ("0 and 1"), empty if alone
  mutable std::string job_key_;     // job_key(), once built
  std::vector<int> ring_, pos_of_;  // Note [Ring order]: position -> rank, rank -> position; empty: rank order
  Stream stream_;            // the engine's own (non-blocking) stream: init-time copies
  void* dev_scratch_ = nullptr;  // kReduceAll with 3+ ranks: one slot's bytes
  std::vector<void*> registered_;  // host memory given to register_host
  // Note [Device FIFOs]: the route to each peer (DeviceRoute, -1: none), this rank's FIFOs in
  // GPU memory, the peers' it opened from IPC handles, the DevPeer table and the counts.
  std::vector<int> dev_route_of_;
  std::vector<void*> dev_fifo_mem_;
  // Note [Waiting FIFOs] (fifo_wait.cpp): per FIFO pair with a peer, what the stream waits on
  // and writes, all as the GPU addresses them; [0, n) the collectives' FIFOs, [n, 2n) the
  // point-to-point ones (nslots 0 where the pair has none: wait_end gives the collectives').
  struct WaitEnd {
    uint8_t* headers = nullptr;    // the slot headers of the FIFO from the peer (this rank's memory)
    uint32_t* released = nullptr;  // how many of this rank's messages the peer released (this rank's memory)
    uint32_t* tell = nullptr;      // where this rank says how many of the peer's it released (null: TCP)
    uint32_t nslots = 0;
    uint32_t sent = 0, recvd = 0;  // messages queued so far, as the kernels count them
    // Note [Copy-engine messages]: the slots of the FIFOs to and from the peer where they are
    // host memory (host-staged, TCP), as the host addresses them; null: GPU memory.
    uint8_t* send_slots = nullptr;
    uint8_t* recv_slots = nullptr;
    uint64_t slot_stride = 0;
  };
  std::atomic<uint64_t> copied_messages_{0};  // Note [Copy-engine messages]: sends and receives so moved
  WaitEnd& wait_end(int peer, bool p2p);
  std::vector<WaitEnd> wait_ends_;
  bool hand_offs_wait_ = false;  // the job's FIFO kernels never wait inside (Note [Waiting FIFOs])
  Stream rescue_;                // release_waits' own stream for the FIFOs' waits
  std::mutex fifo_waits_mu_;     // guards fifo_waits_ (the watchdog reads it)
  std::map<uint32_t*, uint32_t> fifo_waits_;  // every word a FIFO wait was queued on: the last value
  // Note [Point-to-point FIFOs]: per peer, the bytes of a message of a send to it or a receive
  // from it (its point-to-point FIFO's slot, or the collectives' FIFO's); the DevPeer table of
  // sends and receives (inside peers_dev_, after the collectives'); the plan's line.
  std::vector<size_t> p2p_piece_;
  void* p2p_peers_dev_ = nullptr;
  std::string p2p_plan_;
  std::vector<void*> ipc_opened_;
  // Note [Freeing memory peers map]: where dev_fifo_mem_ goes at destroy when no direct engine
  // holds it: this process's ranks of the job free their FIFOs together, the last of them.
  std::shared_ptr<dev::ProcessHold> fifo_hold_;
  std::unique_ptr<dev::DirectEngine> direct_;  // Note [Direct protocol]; null: FIFOs for every call
  std::string direct_plan_;                     // the plan's "device protocol" line
  std::unique_ptr<dev::UserBuffers> users_;     // Note [User buffers mapped into peers]
  uint64_t user_seq_ = 0;                       // registration exchanges so far (the next handle - 1)
  std::mutex users_mu_;                         // register/deregister from several threads
  std::atomic<size_t> pointer_calls_{0};        // Note [Inputs read where they lie]: calls so described
  void* peers_dev_ = nullptr;
  void* counts_dev_ = nullptr;
  // Note [Kernels on the caller's stream]: the kernels' control block (pinned; host and device
  // addresses), the step ring (Note [Step ring]), calls launched, the stream of the last one
  // and the event recorded after every launch, which a switch of streams waits for (Note
  // [Kernel order]).
  void* ctl_host_ = nullptr;
  void* ctl_dev_ = nullptr;
  void* ring_host_ = nullptr;
  void* ring_dev_ = nullptr;
  size_t ring_pos_ = 0;
  struct RingRecord {
    uint64_t seq;
    size_t start;
  };
  std::deque<RingRecord> ring_records_;
  uint64_t dev_seq_ = 0;
  Stream last_stream_;
  Event order_event_;
  // The caller's streams, wrapped once. An entry is only used while the caller passes that
  // handle again (so it is alive); a destroyed stream's entry is never touched (Note [Kernel
  // order]), and a new stream that gets the same handle value is the same wrapped value.
  std::map<void*, Stream> user_streams_;
  // Note [Device watchdog]: the calls in flight (seq, name), guarded by watch_mu_.
  struct InFlight {
    uint64_t seq = 0;
    const char* name = "";
  };
  std::thread watchdog_;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  std::deque<InFlight> inflight_;
  std::deque<InFlight> recent_;  // the last 64 calls launched, to name a failed one
  bool watch_stop_ = false;
};

}  // namespace accord
