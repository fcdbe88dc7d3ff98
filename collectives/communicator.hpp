// The communicator: one rank's view of a job. It owns the transports to every peer, checks
// the arguments of each collective, picks an algorithm, builds (or reuses) the schedule and
// runs it. After a failure inside a collective (timeout, dead peer) the channels' sequence
// numbers no longer agree between ranks, so the communicator keeps that error and returns it
// from every later call: destroy it and create a new one.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "collectives/device/engine.hpp"
#include "collectives/executor.hpp"
#include "collectives/schedule.hpp"
#include "collectives/single_copy.hpp"
#include "collectives/tuner.hpp"
#include "core/fault.hpp"
#include "core/settings.hpp"
#include "core/status.hpp"
#include "transport/bootstrap/store.hpp"
#include "transport/device/device_runtime.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace accord {

struct InitSpec {
  int rank = 0;
  int nranks = 1;
  StoreEndpoint endpoint;
  Settings settings;
  // The rank's GPU: >= 0 from accord_comm_init_all's devlist; -1: ACCORD_DEVICE, else local
  // rank modulo the GPUs when ACCORD_SIM_TOPO or ACCORD_DEVICE asks for GPUs, else host only.
  int device = -1;
  // A bad setting that load_settings found (the rest of `settings` holds what it could parse):
  // init fails with it, but first tells the other ranks (Note [A rank that fails alone at init]).
  Status settings_error = Status::success();
};

// One collective call, as the API received it.
struct CollArgs {
  Collective coll = Collective::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // as the API defines it for this collective
  // Plain ints: callers may pass any value, and loading an out-of-range enum is undefined
  // behaviour in C++. Checked by check_args before use.
  int dtype = ACCORD_FLOAT32;
  int op = ACCORD_SUM;
  int root = 0;  // the peer for kSend and kRecv
};

// Note [Shared memory domain] (communicator.cpp): a rank's domain under ACCORD_SHM_DISABLE=1.
inline bool shm_domain_off(const std::string& domain) { return domain.rfind("off:", 0) == 0; }

inline bool is_point_to_point(Collective c) {
  return c == Collective::kSend || c == Collective::kRecv;
}

// Whether MPS runs for this process's CUDA clients: its control pipe exists (device/engine.cpp,
// Note [Shared GPU warnings]).
bool mps_running();

class Communicator {
 public:
  static Status create(const InitSpec& spec, std::unique_ptr<Communicator>* out);
  ~Communicator();

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }

  Status run(const CollArgs& args);
  // Sends and receives (kSend, kRecv on host buffers) that progress together, as NCCL's
  // inside one group: Note [Point-to-point progress] (collectives/point_to_point.cpp).
  Status run_point_to_point(const std::vector<CollArgs>& ops);

  // ---- the device path: the engine (collectives/device/engine.hpp, Note [Device engine]) ----
  int device() const { return engine_.device(); }
  // Whether the call's buffers are device memory of this communicator's GPU (true) or host
  // memory (false); a buffer of another GPU, or a mix, is ACCORD_ERR_INVALID_ARGUMENT.
  Status classify(const CollArgs& args, bool* on_device) const { return engine_.classify(args, on_device); }
  // NCCL semantics: checks the call and launches it as one kernel on the caller's stream;
  // returns once enqueued (Note [Kernels on the caller's stream], device/engine.cpp).
  Status enqueue_device(const CollArgs& args, void* user_stream) { return engine_.enqueue_device(args, user_stream); }
  // Sends and receives on device buffers (one call, or a group's for this communicator) as
  // one kernel on the caller's stream: Note [Point-to-point schedules] (point_to_point.cpp).
  Status enqueue_device_p2p(const std::vector<CollArgs>& ops, void* user_stream) {
    return engine_.enqueue_device_p2p(ops, user_stream);
  }
  // Note [User buffers mapped into peers] (device/user_buffers.cpp): registers the caller's
  // device buffer [ptr, ptr + bytes): every peer maps the allocation holding it. Collective
  // where the job has the direct protocol and ranks in several processes (every rank
  // registers, and deregisters, at the same point of its calls); a record otherwise. The
  // handle is never 0.
  Status register_buffer(void* ptr, size_t bytes, uint64_t* handle) { return engine_.register_buffer(ptr, bytes, handle); }
  Status deregister_buffer(uint64_t handle) { return engine_.deregister_buffer(handle); }
  // Rank r's buffer of a registration as this rank addresses it (its IPC mapping, or its
  // pointer); null: none (not mapped, unknown). For tests.
  const void* registered_buffer(uint64_t handle, int r) { return engine_.registered_buffer(handle, r); }
  // The device transport to `peer`: "p2p", "ipc", "host-staged", "tcp-staged", or null (none).
  const char* device_channel(int peer) const { return engine_.device_channel(peer); }

  // "pair A-B: TRANSPORT (reason)" for every pair of ranks (same on every rank).
  std::string plan() const;

  // The host channel to every peer (null entries: this rank, or no such peer).
  const PeerLinks& links() const { return links_; }

  // Note [Pre-multiplied sum] (collectives/device/dev_call.hpp): the ops of
  // accord_red_op_create_pre_mul_sum (collectives/premul.cpp), ACCORD_NUM_OPS + index.
  Status create_premul(int dtype, const void* scalar, bool immediate, int* op);
  Status destroy_premul(int op);

  // Argument checks alone (for calls queued in a group).
  Status validate(const CollArgs& args) const;

  // Runs `ops` in order on this communicator's worker thread (started on first use); the
  // future holds the first failure. Used by accord_group_end.
  std::future<Status> run_async(std::vector<CollArgs> ops);
  void post_job(std::function<void()> job);

  // Abort: wakes every wait of this communicator with ACCORD_ERR_ABORTED. Safe from any thread.
  void abort() { abort_.store(true, std::memory_order_release); }

  // The error that broke the communicator (ACCORD_SUCCESS if none). Any thread. A failure a
  // kernel recorded (Note [Device watchdog]) counts as soon as its stream has passed it.
  accord_status_t sticky_error() {
    const accord_status_t code = sticky_code_.load(std::memory_order_acquire);
    if (code != ACCORD_SUCCESS || !engine_.has_kernels()) return code;
    engine_.adopt_kernel_error();
    return sticky_code_.load(std::memory_order_acquire);
  }
  // Its message (written once, before sticky_error turns non-zero). Any thread.
  Status sticky_status() {
    return sticky_error() == ACCORD_SUCCESS ? Status::success() : sticky_;
  }

 private:
  Communicator() = default;
  Status init(const InitSpec& spec);
  Status run_on(const CollArgs& args, bool on_device);
  struct PreMul {
    bool live = false;
    int dtype = 0;
    bool immediate = true;   // value holds the scalar; else ptr (read at each call)
    uint64_t value = 0;
    const void* ptr = nullptr;
  };
  static constexpr size_t kMaxPreMulOps = 1 << 20;
  bool premul_of(int op, PreMul* out) const;
  Status premul_scalar(const PreMul& pm, uint64_t* bits);
  Status run_premul_host(const CollArgs& args);
  // The communicator's error (first failure wins), from any thread: the caller's, the device
  // engine's watchdog (Note [Device engine]).
  void set_sticky(const Status& s);
  Status configure();  // this rank's own settings, checked alone
  Status agree_on_settings(StoreClient* store, Deadline deadline);  // Note [Settings every rank shares]
  Status connect_transports(StoreClient* store, Deadline deadline);
  void group_by_host(const std::vector<std::string>& infos, std::vector<long>* local_pids);
  Status connect_remote(StoreClient* store, Deadline deadline);
  int tcp_nsocks() const { return tcp_ ? tcp_->nsocks() : 0; }
  void leave_death_note(const Status& s);
  // Note [Departures] (wait.hpp): at a clean destroy, tells the local peers which calls this
  // rank completed, so that its exit is not taken for a death.
  void publish_departure();
  Status check_args(const CollArgs& a, size_t* in_bytes, size_t* out_bytes) const;
  // ACCORD_CHECK=1: all ranks exchange what they were asked to do and fail alike on a difference.
  Status check_consistency(const CollArgs& a);
  Algo choose_algo(const CollArgs& a, size_t bytes, bool on_device, size_t* chunk);
  size_t call_chunk(bool on_device, size_t bytes, Collective coll) const;  // Note [Host chunk]
  const Schedule* schedule_for(const ScheduleRequest& req, bool mapped = false);
  // What run_on decides about a call before moving data (Note [Repeated calls]).
  struct CallPlan {
    const Schedule* schedule = nullptr;  // nullptr: nothing to move (count 0)
    size_t elem_bytes = 0;
    size_t out_bytes = 0;
    kernels::ReduceFn reduce = nullptr;
    uint32_t tag = 0;
    bool board = false;  // Note [Board]: direct all-reduce on the shm transport's board
    bool single_copy = false;  // Note [Single copy] (single_copy.cpp)
    bool single_copy_if_in_place = false;  // above its window: if every rank is in place
    size_t stage_bytes = 0;  // its largest reduce-and-send step (ExecArgs::stage)
  };
  Status plan_call(const CollArgs& a, bool on_device, CallPlan* plan);
  Status run_on_board(const CollArgs& a, const CallPlan& plan);
  // *declined (in-place-only plans): not every rank was in place, the FIFOs must run the call.
  Status run_single_copy(const CollArgs& a, const CallPlan& plan, bool* declined);
  // Note [Single copy]: whether this all-reduce takes it (every rank decides alike), and the
  // probe at init that decides whether the job can.
  bool takes_single_copy(const CollArgs& a, size_t bytes, bool on_device) const;
  Status decide_single_copy(StoreClient* store, Deadline deadline);
  // ACCORD_FAULT's plan if it strikes the collective numbered seq_, else nullptr.
  const FaultPlan* armed_fault() const;
  // A failure inside a collective breaks the communicator: kept, logged, returned.
  Status finish_call(Status s);
  // Note [Store mode probe] (store_probe.cpp): the probe at init, and its log line.
  Status decide_stores(StoreClient* store, Deadline deadline);
  void log_store_mode(const std::string& why) const;

  int rank_ = 0;
  int nranks_ = 1;
  Settings settings_;
  FaultPlan fault_;  // ACCORD_FAULT, for the reliability tests
  FifoShape shape_;
  FifoShape p2p_shape_;  // the device engine's point-to-point FIFOs (Note [Point-to-point FIFOs])
  WaitPolicy policy_;
  StoreEndpoint endpoint_;  // the job's bootstrap address and secret (TCP authenticates with it)
  std::unique_ptr<ShmTransport> shm_;
  std::unique_ptr<TcpTransport> tcp_;  // ranks on other hosts (remote_ranks_); null if none
  bool job_may_use_gpu_ = false;  // some rank's info carries " g" (set by connect_transports)
  PeerLinks links_;
  std::vector<int> local_ranks_;    // on this host and /dev/shm, including this rank: shared memory
  std::vector<int> remote_ranks_;   // on other hosts, or another /dev/shm of this one: TCP
  std::vector<std::string> hosts_;  // host identity of every rank (from init)
  std::vector<std::string> shm_domains_;  // /dev/shm each rank sees (Note [Shared memory domain])
  std::vector<long> pid_of_;        // pid of every rank (meaningful only in its pid namespace)
  // Note [Process identity] (communicator.cpp): every rank's process ("PID NS TOKEN": equal
  // only for ranks of one process) and pid namespace.
  std::vector<std::string> proc_of_;
  std::vector<std::string> pidns_of_;
  bool same_process(int a, int b) const {
    return proc_of_.empty() ? a == b : proc_of_[static_cast<size_t>(a)] == proc_of_[static_cast<size_t>(b)];
  }
  std::vector<int> host_of_;        // host and /dev/shm as small ints (ScheduleRequest::host_of)
  int nhosts_ = 1;
  bool hosts_even_ = true;          // as many ranks on every host (hierarchical needs it)
  HostLayout host_layout_;          // the same, for the tuner (Note [Tuner across hosts])
  std::atomic<bool> abort_{false};
  Status sticky_;  // first failure inside a collective
  std::atomic<accord_status_t> sticky_code_{ACCORD_SUCCESS};
  std::mutex sticky_mu_;  // the device path's writers of sticky_ (watchdog, adopt_kernel_error)
  uint64_t seq_ = 0;
  uint64_t p2p_seq_ = 0;  // point-to-point batches run (for messages; not in step with other ranks)
  uint32_t board_seq_ = 0;  // board calls made (Note [Board])
  // Note [Single copy]: on when every rank of the job (all on this host) can reach every
  // other's memory; the window of sizes every rank agreed on; how to reach each rank; room
  // for two chunks of peers' operands.
  bool single_copy_ = false;
  size_t single_copy_min_ = 0, single_copy_max_ = 0;
  std::vector<SingleCopyPeer> single_copy_peers_;
  std::vector<uint8_t> single_copy_tmp_;
  WaitContext board_ctx_;   // their wait context (set with the transports), but for seq, deadline and peer
  std::vector<uint8_t> scratch_;
  std::vector<uint8_t> stage_;  // ExecArgs::stage
  size_t chunk_bytes_ = 0;
  size_t nt_threshold_ = 0;
  bool nt_fixed_ = false;  // ACCORD_NT_THRESHOLD set, else Note [Store mode probe]
  using ScheduleKey = std::tuple<int, int, size_t, size_t, size_t, int, bool>;
  std::map<ScheduleKey, Schedule> schedules_;  // map nodes do not move: pointers stay valid
  ScheduleKey last_key_;
  const Schedule* last_schedule_ = nullptr;
  // Note [Repeated calls]: the last call's arguments and plan; valid only while its schedule
  // is in schedules_.
  bool memo_valid_ = false;
  CollArgs memo_args_;
  bool memo_on_device_ = false;
  CallPlan memo_plan_;
  bool has_forced_algo_ = false;  // ACCORD_ALGO, parsed once
  Algo forced_algo_ = Algo::kRing;
  bool new_plan_to_log(Collective coll, size_t bytes, int code);  // Note [Tuner model]'s log, once per plan
  std::map<std::pair<int, int>, int> logged_choices_;  // (collective, log2 size) -> algo and chunk, for info logs
  Tuner tuner_;
  mutable std::mutex premul_mu_;  // premul_: created on the caller's thread, read on the worker too
  std::vector<PreMul> premul_;
  std::unordered_map<size_t, std::pair<Algo, size_t>> tune_cache_;  // all-reduce bytes * 2 + on_device -> algorithm, chunk
  bool oversubscribed_ = false;  // more ranks on this host than CPUs to run them (the tuner's model)
  bool may_use_gpu_ = false;  // init: this rank may get a GPU (reserve device FIFOs in its segment)
  // Group worker (accord_group_end) and device worker.
  std::thread worker_;
  std::mutex worker_mutex_;
  std::condition_variable worker_cv_;
  std::deque<std::function<void()>> worker_jobs_;
  bool worker_stop_ = false;
  // Note [Device engine]: declared last, so that every member it refers to is built before it
  // and destroyed after it.
  friend class DeviceEngine;
  DeviceEngine engine_{*this};
};

}  // namespace accord
