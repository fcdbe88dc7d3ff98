// The device path of a communicator (DeviceEngine, engine.hpp; Note [Device engine]): which
// GPU it runs on, the memory space of each call, the per-pair device transport, and NCCL-style
// asynchronous collectives on the caller's stream.
//
// Note [Kernels on the caller's stream]: a collective on device buffers is one kernel launch
// on the caller's stream (collectives/device/dev_call.hpp, Note [One protocol, two executors]):
// the call checks its arguments, plans the schedule as the host path does, and launches; it
// returns at once and waits for nothing on the device. The kernel moves the data through FIFOs
// in device-visible memory and waits on flags it polls itself, so no host thread takes part in
// any step, and nothing in this path makes a CUDA call that waits for the device or the
// context (kernels are loaded and launched once when the communicator is created, Note
// [Warm-up launch]; memory is allocated then too).
// A watchdog thread per communicator only reads the kernels' control block (DevCtl, pinned):
// a timeout, a dead peer or accord_comm_abort makes it set DevCtl::abort, the kernel gives up
// at its next wait, the stream goes on, and accord_comm_get_async_error says what happened.
//
// Transports (DeviceEngine::device_route): ranks on one GPU, or on GPUs that peer, keep their
// FIFOs in the receiver's GPU memory: "p2p" within one process (a pointer), "ipc" across
// processes (a CUDA IPC handle through the bootstrap store). The other pairs are host-staged:
// the FIFO is in the receiver's shared-memory segment, registered with the device runtime and
// written and read by the kernels directly. Pairs over TCP (other hosts, ACCORD_SHM_DISABLE=1)
// are tcp-staged: pinned FIFOs of this rank that pump threads connect to the peer's over sockets
// (Note [Device data over TCP], engine_tcp.cpp).
#include <dlfcn.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "accord_config.h"
#include "collectives/communicator.hpp"
#include "collectives/device/dev_call.hpp"
#include "collectives/device/dev_kernels.hpp"
#include "core/crypto.hpp"
#include "core/log.hpp"
#include "topology/search.hpp"
#include "topology/system.hpp"
#include "transport/device/sim_runtime.hpp"

namespace accord {

// Steps of schedules longer than DevLaunch's inline ones go through this ring of pinned memory
// (Note [Step ring]).
constexpr size_t kStepRingBytes = size_t{8} << 20;
// Scratch beyond one slot: each of up to 1024 blocks rounds its part up to 16 bytes (Note [Blocks]).
constexpr size_t kScratchBlockSlack = 16 * 1024;

DeviceEngine::DeviceEngine(Communicator& comm)
    : comm_(comm),
      rank_(comm.rank_),
      nranks_(comm.nranks_),
      settings_(comm.settings_),
      shape_(comm.shape_),
      p2p_shape_(comm.p2p_shape_),
      endpoint_(comm.endpoint_),
      shm_(comm.shm_),
      links_(comm.links_),
      local_ranks_(comm.local_ranks_),
      remote_ranks_(comm.remote_ranks_),
      hosts_(comm.hosts_),
      shm_domains_(comm.shm_domains_),
      pid_of_(comm.pid_of_),
      proc_of_(comm.proc_of_),
      pidns_of_(comm.pidns_of_),
      nhosts_(comm.nhosts_),
      abort_(comm.abort_) {}

bool DeviceEngine::same_process(int a, int b) const { return comm_.same_process(a, b); }

bool DeviceEngine::job_has_gpus() const {
  return std::any_of(device_of_.begin(), device_of_.end(), [](int d) { return d >= 0; });
}

std::string DeviceEngine::plan_lines() const {
  std::string out = direct_plan_ + p2p_plan_;
  // Note [Copy-engine messages] (fifo_wait.cpp): where hand-offs wait, and some FIFO is host memory.
  const size_t least = copy_min_bytes();
  const bool host_fifos =
      std::any_of(wait_ends_.begin(), wait_ends_.end(), [](const WaitEnd& w) { return w.send_slots != nullptr; });
  if (hand_offs_wait_ && host_fifos)
    out += least == SIZE_MAX ? std::string("sends and receives through FIFOs in host memory: by the kernel's loads and "
                                           "stores (ACCORD_P2P_COPY_MIN_BYTES=-1)\n")
                             : format("sends and receives through FIFOs in host memory: messages of %s or more moved "
                                      "by copy engines (%llu so far)\n",
                                      least % 1024 == 0 ? format("%zu KiB", least >> 10).c_str()
                                                        : format("%zu bytes", least).c_str(),
                                      static_cast<unsigned long long>(copied_messages_.load()));
  // Note [User buffers mapped into peers]: what registration has mapped so far.
  if (direct_ != nullptr && users_ != nullptr) out += users_->describe();
  if (direct_ != nullptr && direct_->pointer_inputs())  // Note [Inputs read where they lie]
    out += settings_.direct_pointer_min_bytes < 0
               ? std::string("inputs read where they lie: none (ACCORD_DIRECT_POINTER_MIN_BYTES=-1)\n")
               : format("inputs read where they lie: ranks of one process, every two-shot all-reduce and the other "
                        "direct forms from %lld bytes of input (%zu calls so far)\n",
                        static_cast<long long>(settings_.direct_pointer_min_bytes),
                        pointer_calls_.load(std::memory_order_relaxed));
  return out;
}

// GPU buffers move through the shared-memory slots (registered with the device runtime) or the
// device FIFOs; to ranks over TCP through pinned FIFOs and pump threads (Note [Device data over
// TCP]). A remote rank without them (it has no GPU) cannot take part: refused at once.
Status DeviceEngine::check_device_peers(const CollArgs& a) const {
  int missing = 0, peer = -1;
  for (int r : remote_ranks_) {
    if (static_cast<size_t>(r) < dev_route_of_.size() &&
        dev_route_of_[static_cast<size_t>(r)] == static_cast<int>(DeviceRoute::kTcpStaged))
      continue;
    if (peer < 0) peer = r;
    ++missing;
  }
  if (missing == 0) return Status::success();
  const std::string& domain = shm_domains_.at(static_cast<size_t>(peer));
  const char* why = hosts_.at(static_cast<size_t>(peer)) != hosts_.at(static_cast<size_t>(rank_))
                        ? "another host"
                    : shm_domain_off(domain) || shm_domain_off(shm_domains_.at(static_cast<size_t>(rank_)))
                        ? "ACCORD_SHM_DISABLE=1"
                        : "another /dev/shm";
  return error(ACCORD_ERR_UNSUPPORTED,
               "rank %d: %s on GPU buffers: rank %d (and %d more) is reached over TCP (%s) and "
               "runs on no GPU, so it cannot take GPU buffers; give every rank a GPU, or pass host "
               "buffers (stream NULL)",
               rank_, collective_name(a.coll), peer, missing - 1, why);
}

Status DeviceEngine::setup_device(int requested) {
  device_of_.assign(static_cast<size_t>(nranks_), -1);
  bool wanted = requested >= 0 || settings_.device >= 0 || !settings_.sim_topo.empty();
  int current = -1;
#if ACCORD_HAVE_CUDA
  if (!wanted) {
    // As NCCL: a thread that made a GPU current (cudaSetDevice) gets a communicator on it.
    // Otherwise the communicator is host only, and keeps the runtime to refuse device buffers.
    // A process that never used CUDA has not loaded the driver (libcuda): then nothing here
    // touches CUDA, so host-only programs pay no CUDA initialization.
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (driver != nullptr) dlclose(driver);
    if (DeviceRuntime* rt = driver != nullptr ? process_device_runtime(settings_) : nullptr) {
      (void)rt->current_device(&current);
      wanted = current >= 0;
      if (!wanted) probe_rt_ = rt;
    }
  }
#endif
  if (!wanted) return Status::success();
  std::string why;
  rt_ = process_device_runtime(settings_, &why);
  if (rt_ == nullptr) {
    if (requested < 0 && settings_.device < 0) return Status::success();  // host only
    return error(ACCORD_ERR_UNSUPPORTED,
                 "rank %d: GPU %d was asked for (%s), but there is no GPU: %s", rank_,
                 requested >= 0 ? requested : static_cast<int>(settings_.device),
                 requested >= 0 ? "accord_comm_init_all devlist" : "ACCORD_DEVICE", why.c_str());
  }
  const int local_rank = static_cast<int>(
      std::find(local_ranks_.begin(), local_ranks_.end(), rank_) - local_ranks_.begin());
  const int count = rt_->device_count();
  int d = requested >= 0          ? requested
          : settings_.device >= 0 ? static_cast<int>(settings_.device)
          : current >= 0          ? current
                                  : local_rank % count;
  if (d >= count)
    return error(ACCORD_ERR_INVALID_ARGUMENT,
                 "rank %d: GPU %d does not exist: the %s runtime has %d GPUs (0..%d)", rank_, d,
                 rt_->kind(), count, count - 1);
  ACCORD_TRY(rt_->create_stream(d, &stream_).prefix(format("rank %d: ", rank_)));
  device_ = d;
  device_of_[static_cast<size_t>(rank_)] = d;
  const std::string where = format("rank %d (GPU %d): ", rank_, d);
  // Note [Kernels on the caller's stream]: loaded now, never lazily behind a held stream.
  ACCORD_TRY(rt_->load_kernel(d, dev::collective_kernel()).prefix(where));
  ACCORD_TRY(rt_->alloc_host_pinned(sizeof(dev::DevCtl), &ctl_host_).prefix(where + "kernel control block: "));
  std::memset(ctl_host_, 0, sizeof(dev::DevCtl));
  static_cast<dev::DevCtl*>(ctl_host_)->waiting_peer = -1;
  ACCORD_TRY(rt_->device_address(ctl_host_, &ctl_dev_).prefix(where));
  ACCORD_TRY(warm_up_kernel().prefix(where));
  ACCORD_TRY(rt_->alloc_host_pinned(kStepRingBytes, &ring_host_).prefix(where + "step ring: "));
  ACCORD_TRY(rt_->device_address(ring_host_, &ring_dev_).prefix(where));
  ACCORD_TRY(rt_->create_event(d, &order_event_).prefix(where));
  if (nranks_ >= 3)
    ACCORD_TRY(rt_->alloc_device(d, shape_.slot_bytes + kScratchBlockSlack, &dev_scratch_).prefix(where + "scratch: "));
  ACCORD_TRY(register_slots());
  LOG_INFO(kGpu, "rank %d: GPU %d of %s", rank_, d, rt_->description().c_str());
  return Status::success();
}

// Note [Warm-up launch]: the collective kernel is launched once at init, with no steps, on the
// communicator's own stream, and waited for. Whatever CUDA does at a kernel's first launch
// (loading its module, if cudaFuncGetAttributes did not; sizing the per-thread stack and local
// memory, which waits for the device to go idle; launch resources) happens then, before the
// init barrier (Note [Device init barrier]), when no kernel of this job can be spinning on
// the device. Otherwise it would happen at the first collective, behind another rank's kernel
// that waits for this one. It also proves the kernel runs on this GPU: it writes
// DevCtl::started, which is set to a value no launch writes first. seq 0 leaves the
// counters as a communicator with no collective has them.
Status DeviceEngine::warm_up_kernel() {
  auto* ctl = static_cast<dev::DevCtl*>(ctl_host_);
  __atomic_store_n(&ctl->started, ~uint64_t{0}, __ATOMIC_RELEASE);
  dev::DevLaunch launch;
  std::memset(static_cast<void*>(&launch), 0, sizeof launch);
  launch.call.nsteps = 0;
  launch.call.nranks = nranks_;
  launch.call.rank = rank_;
  launch.call.ctl = static_cast<dev::DevCtl*>(ctl_dev_);
  launch.call.seq = 0;
  launch.call.nblocks = 1;
  ACCORD_TRY(rt_->launch_kernel(dev::collective_kernel(), &launch, sizeof launch, stream_)
                 .prefix("warm-up launch of the collective kernel: "));
  ACCORD_TRY(rt_->synchronize_stream(stream_).prefix("warm-up launch of the collective kernel: "));
  if (__atomic_load_n(&ctl->started, __ATOMIC_ACQUIRE) != 0)
    return error(ACCORD_ERR_CUDA,
                 "the warm-up launch of the collective kernel (%s) returned without error but the "
                 "kernel did not write its control block (pinned host memory mapped for the GPU); "
                 "the GPU cannot run Accord's collectives: report it with the output of "
                 "ACCORD_LOG=debug and nvidia-smi",
                 dev::collective_kernel().name);
  return Status::success();
}

Status DeviceEngine::register_slots() {
  if (shm_ == nullptr) return Status::success();
  for (const ShmTransport::Mapping& m : shm_->mappings()) {
    ACCORD_TRY(
        rt_->register_host(m.addr, m.bytes)
            .prefix(format("rank %d: pinning shared-memory slots for GPU %d: ", rank_, device_)));
    registered_.push_back(m.addr);
  }
  return Status::success();
}

void DeviceEngine::release() {
  if (released_ || rt_ == nullptr) return;
  released_ = true;
  forget_stream_uses();
  stop_watchdog();
  auto* ctl = static_cast<dev::DevCtl*>(ctl_host_);
  if (ctl != nullptr && dev_seq_ > 0) {
    // Kernels still queued or running use this communicator's memory: let them end first. One
    // that waits for a peer which will never come is told to give up after the timeout
    // (at once after accord_comm_abort).
    auto done = [&] { return __atomic_load_n(&ctl->done, __ATOMIC_ACQUIRE) >= dev_seq_; };
    Deadline deadline = Deadline::after_ms(settings_.timeout_ms);
    // accord_comm_abort: the watchdog (stopped above) may not have passed the abort on yet.
    bool aborted = abort_.load(std::memory_order_acquire);
    // A call queued after the watchdog ended the waits (Note [Waiting protocol]) waits again.
    if (__atomic_load_n(&ctl->abort, __ATOMIC_ACQUIRE) != 0) release_waits();
    if (aborted) {
      __atomic_store_n(&ctl->abort, 1u, __ATOMIC_RELEASE);
      release_waits();
      deadline = Deadline::after_ms(1000);
    }
    while (!done()) {
      // A kernel that faulted (a dead peer's IPC memory, say) never writes done, and the
      // context's error shows at once on the order event (recorded after every launch).
      bool idle = false;
      if (order_event_.id != 0 && !rt_->query_event(order_event_, &idle).ok()) {
        LOG_WARN(kGpu, "rank %d: GPU %d failed while collective seq %llu was in flight; not waiting for it",
                 rank_, device_, static_cast<unsigned long long>(dev_seq_));
        break;
      }
      if (deadline.expired()) {
        if (aborted) break;
        LOG_WARN(kGpu, "rank %d: destroying the communicator while its collective (seq %llu) still runs on "
                 "GPU %d; telling it to give up", rank_, static_cast<unsigned long long>(dev_seq_), device_);
        __atomic_store_n(&ctl->abort, 1u, __ATOMIC_RELEASE);
        release_waits();
        aborted = true;
        deadline = Deadline::after_ms(1000);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  // Its writes are into this rank's FIFO memory: done before that memory goes.
  if (rescue_.id != 0) {
    (void)rt_->synchronize_stream(rescue_);
    (void)rt_->destroy_stream(rescue_);
  }
  let_go_of_peer_memory();
  stop_tcp_pumps();  // after the kernels: Note [Device data over TCP]
  if (stream_.id != 0) (void)rt_->destroy_stream(stream_);
  if (order_event_.id != 0) (void)rt_->destroy_event(order_event_);
  (void)rt_->free_device(dev_scratch_);
  (void)rt_->free_device(peers_dev_);
  (void)rt_->free_device(counts_dev_);
  for (void* p : registered_) (void)rt_->unregister_host(p);
  registered_.clear();
  (void)rt_->free_host_pinned(ring_host_);
  // ctl_host_ stays: a kernel queued behind work that never ran would still write it.
}

// The hold of this process's ranks of the job that have a GPU (Note [Freeing memory peers
// map]): its name is 128 random bits that the lowest of them puts in the job's store.
Status DeviceEngine::join_fifo_hold(StoreClient* store, Deadline deadline) {
  int lowest = rank_, here = 0;
  for (int r = 0; r < nranks_; ++r)
    if (same_process(rank_, r) && device_of_[static_cast<size_t>(r)] >= 0) {
      lowest = std::min(lowest, r);
      ++here;
    }
  std::string key;
  if (lowest == rank_) {
    uint8_t bits[16];
    ACCORD_TRY(random_bytes(bits, sizeof bits));
    key = to_hex(bits, sizeof bits);
    if (here > 1) ACCORD_TRY(store->set(format("dhold/%d", rank_), key));
  } else {
    ACCORD_TRY(store->get(format("dhold/%d", lowest), &key, deadline, format("rank %d", lowest)));
  }
  fifo_hold_ = dev::ProcessHold::join("fifo " + key, here, rt_);
  return Status::success();
}

// Note [Freeing memory peers map]: a peer's kernel may still read this rank's direct scratch
// (or write its device FIFOs) after this rank's own last kernel is done: in a one-shot round a
// rank folds the peers' inputs after its own flag went out, so the rank that finishes first
// would free memory the other is about to read (on a GPU: cudaErrorIllegalAddress in the
// peer, or a read of memory given to someone else). So destroy, once this rank's kernels are
// done, (1) closes its mappings of the peers' memory, (2) says so in its shared-memory page
// (ShmTransport::release_device_memory), (3) waits until every rank of another process that
// maps its memory has said the same, has exited (its pidfd), or ACCORD_TIMEOUT_MS passed (1 s
// after accord_comm_abort), and (4) frees. Ranks that are threads of this process address the
// memory by plain pointers: the direct engine hands it to the last of them to let go
// (dev::ProcessHold, through DirectEngine::let_go, or fifo_hold_ for the device FIFOs of a
// job without the direct engine), which waits for the other processes on behalf of all
// (waiting in each would deadlock two processes that each destroy their communicators one
// after the other: each would wait, in its first destroy, for a rank the other destroys
// later). A rank that gives up waiting leaves its memory allocated, with a warning, rather
// than fault a peer. The simulation makes a free while another process has the
// memory open an error (Note [Simulated IPC importers], transport/device/sim_memory.hpp).
// The rank publishes its departure before it waits, so that a peer stuck in a call this rank
// never makes fails at once and can destroy its own communicator.
void DeviceEngine::let_go_of_peer_memory() {
  auto maps_mine = [&](int peer) {  // a rank of another process that may map this rank's memory
    return peer != rank_ && static_cast<size_t>(peer) < device_of_.size() && !same_process(rank_, peer) &&
           device_of_[static_cast<size_t>(peer)] >= 0;
  };
  const bool exported = std::any_of(local_ranks_.begin(), local_ranks_.end(), maps_mine);
  // Note [User buffers mapped into peers]: the peers' registered buffers close with their
  // scratch, before this rank says it let go.
  if (users_ != nullptr) users_->close_all();
  std::vector<void*> mine = dev_fifo_mem_;
  dev_fifo_mem_.clear();
  bool last = !mine.empty();  // whether this rank frees memory that peers map
  std::shared_ptr<dev::ProcessHold> fifo_hold = std::move(fifo_hold_);
  if (direct_ != nullptr && direct_->grouped()) {
    last = direct_->let_go(mine);
    mine.clear();
    // its memory went with the scratch (a staged engine's hold is fifo_hold itself)
    if (fifo_hold != nullptr && !direct_->staged()) (void)fifo_hold->let_go({});
    fifo_hold.reset();
  } else if (fifo_hold != nullptr) {
    last = fifo_hold->let_go(mine);
    mine.clear();
  }
  for (void* p : ipc_opened_) (void)rt_->ipc_close_handle(p);
  ipc_opened_.clear();
  if (shm_ != nullptr) shm_->release_device_memory(rank_);
  bool safe = true;
  if (last && exported && shm_ != nullptr) {
    // A peer that waits in a call this rank never makes must learn now that it left, not
    // after this wait (Note [Departures]); publishing twice is harmless.
    comm_.publish_departure();
    const bool aborted = abort_.load(std::memory_order_acquire);
    const Deadline deadline = Deadline::after_ms(aborted ? 1000 : settings_.timeout_ms);
    for (int peer : local_ranks_) {
      if (!maps_mine(peer)) continue;
      const int fd = links_.pidfd[static_cast<size_t>(peer)];
      auto gone = [fd] {
        pollfd p{fd, POLLIN, 0};
        return fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
      };
      while (!shm_->device_memory_released(peer) && !gone() && !deadline.expired())
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (!shm_->device_memory_released(peer) && !gone()) {
        LOG_WARN(kGpu, "rank %d: destroying the communicator: rank %d has not let go of this rank's GPU memory "
                 "(its kernels still run, or it has not destroyed its communicator) after %lld ms; leaving the "
                 "memory allocated so that its kernels cannot fault (Note [Freeing memory peers map])",
                 rank_, peer, static_cast<long long>(aborted ? 1000 : settings_.timeout_ms));
        safe = false;
        break;
      }
    }
  }
  if (direct_ != nullptr) {
    if (last && safe) direct_->free_held();
    direct_.reset();
  }
  if (fifo_hold != nullptr && last && safe) fifo_hold->free_all();
  if (safe)
    for (void* p : mine) (void)rt_->free_device(p);
}

// Note [Ring order]: the all-reduce ring and the broadcast/reduce chains of a job on GPUs run
// in the order of the topology's best ring over the ranks' GPUs (topo::best_ring: highest
// bottleneck, then fewest hops at it), so the slow hops (pairs that cannot peer, SYS paths)
// are used as few times as possible. The schedule is built for ring positions and its peers
// are mapped to the ranks at those positions; outputs do not depend on the order. Every rank
// computes the same order from the same inputs. Reduce-scatter and all-gather keep rank order
// (their output layout is by rank). Only with the simulated runtime for now (the System is
// its own); with CUDA the order stays by rank until the detected topology is wired in.
void DeviceEngine::compute_ring() {
  ring_.clear();
  pos_of_.clear();
  auto* sim = dynamic_cast<const SimulatedRuntime*>(rt_);
  if (device_ < 0 || sim == nullptr || nhosts_ != 1 || nranks_ < 3) return;
  // The topology file's indices, found by bus id (Note [GPU identity]): ordinals differ
  // between processes with different CUDA_VISIBLE_DEVICES.
  std::vector<int> physical;
  for (const GpuFacts& g : gpus_) {
    physical.push_back(g.ordinal < 0 ? -1 : sim->physical_of_bus(g.bus));
    if (physical.back() < 0) return;
  }
  const topo::System& sys = sim->system();
  const int n = nranks_;
  std::vector<double> bw(static_cast<size_t>(n * n), 0.0);
  // Path classes break ties between rings of equal bandwidth (fewer and nearer bridges).
  std::vector<topo::PathClass> paths(static_cast<size_t>(n * n), topo::PathClass::kSelf);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      const int di = physical[static_cast<size_t>(i)], dj = physical[static_cast<size_t>(j)];
      if (i == j) continue;
      bw[static_cast<size_t>(i * n + j)] = di == dj ? 1e6 : sys.bandwidth_gbs(di, dj);
      if (di != dj) paths[static_cast<size_t>(i * n + j)] = sys.path(di, dj);
    }
  std::vector<int> ring = topo::best_ring(bw, n, paths);
  bool identity = true;
  for (int i = 0; i < n; ++i) identity = identity && ring[static_cast<size_t>(i)] == i;
  if (identity) return;
  ring_ = ring;
  pos_of_.assign(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) pos_of_[static_cast<size_t>(ring_[static_cast<size_t>(i)])] = i;
  std::string order;
  for (int r : ring_) order += format(" %d", r);
  LOG_INFO(kGpu, "rank %d: ring order of ranks (topology's best ring over their GPUs):%s", rank_,
           order.c_str());
}

// Ranks for a message: "0 and 1", "0, 1 and 3".
static std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i)
    out += format("%s%d", i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ", ranks[i]);
  return out;
}

// The ranks of this process on this rank's GPU (Note [One stream per rank]), as rank_list
// gives them; empty when this rank is alone on it.
void DeviceEngine::find_gpu_sharers() {
  gpu_sharers_.clear();
  if (device_ < 0) return;
  std::vector<int> on_gpu;
  for (int r : local_ranks_)
    if (same_gpu(r, rank_) && same_process(r, rank_)) on_gpu.push_back(r);
  if (on_gpu.size() > 1) gpu_sharers_ = rank_list(on_gpu);
}

// Note [Shared GPU warnings]: two configurations work but hold traps that Accord cannot
// guard, so init says so once per communicator, from the lowest rank on the GPU (WARN, the
// default level):
//  - ranks that are threads of one process on one GPU (NCCL refuses this: "Duplicate GPU
//    detected"): a rank's kernel spins until the other rank's kernel comes; if that rank's
//    thread first makes a CUDA call that waits for the device (cudaMalloc, cudaFree,
//    cudaHostRegister, a synchronous cudaMemcpy, work on the legacy stream, or the first
//    launch of any kernel under lazy loading, CUDA's default), both wait for ever (until
//    ACCORD_TIMEOUT_MS);
//  - ranks of different processes on one GPU: without MPS the GPU runs one process's kernels
//    at a time, in time slices, so every hop of a collective waits for a slice (only where
//    gpu_time_sliced() says so: a simulated GPU is sliced only under ACCORD_SIM_TIMESLICE_US,
//    Note [Shared GPU sync]; and not where the job waits at stream level).
// GPUs and processes are compared by identity (Note [GPU identity], Note [Process identity]).
bool mps_running() {
  const char* dir = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string control =
      std::string(dir != nullptr && *dir ? dir : "/tmp/nvidia-mps") + "/control";
  return access(control.c_str(), F_OK) == 0;
}

void DeviceEngine::warn_shared_gpu() const {
  if (device_ < 0 || settings_.p2p_disable) return;  // ACCORD_P2P_DISABLE: every pair host-staged
  std::vector<int> here, others;  // ranks on this GPU: of this process, of other processes
  for (int r : local_ranks_)
    if (same_gpu(r, rank_)) (same_process(r, rank_) ? here : others).push_back(r);
  if (here.size() > 1 && here.front() == rank_)
    LOG_WARN(
        kGpu,
        "rank %d: ranks %s are threads of one process on GPU %s: while a collective is in "
        "flight, no thread of the process may make a CUDA call that waits for the device "
        "(cudaMalloc, cudaFree, cudaHostRegister, a synchronous cudaMemcpy, work on the legacy "
        "default stream, or the first launch of a kernel, which CUDA loads lazily by default): "
        "it would wait for a collective kernel that waits for that thread's rank, for ever "
        "(until ACCORD_TIMEOUT_MS). Set CUDA_MODULE_LOADING=EAGER, allocate before the first "
        "collective, or run one process per rank",
        rank_, rank_list(here).c_str(), gpu_label(rank_).substr(4).c_str());
  // Where the job's calls hand off through the stream (Note [Shared GPU sync], Note [Waiting
  // FIFOs]) slices cost them nothing: no warning, a line at info.
  const bool waiting = hand_offs_wait_;
  if (!others.empty() && std::min(here.front(), others.front()) == rank_ && waiting)
    LOG_INFO(kGpu, "rank %d: GPU %s is shared with other processes: the collectives hand off through the stream "
             "(ACCORD_SHARED_GPU_SYNC), which needs no time slice, and so do sends and receives",
             rank_, gpu_label(rank_).substr(4).c_str());
  if (!others.empty() && std::min(here.front(), others.front()) == rank_ && gpu_time_sliced() && !waiting) {
    std::vector<int> all = here;
    all.insert(all.end(), others.begin(), others.end());
    std::sort(all.begin(), all.end());
    std::vector<std::string> seen;  // one pid per process, in rank order
    std::string pids;
    // Containers with pid namespaces of their own may all say pid 1: then each pid gets its
    // namespace (Note [Process identity]).
    const bool namespaces = std::any_of(all.begin(), all.end(), [&](int r) {
      return pidns_of_[static_cast<size_t>(r)] != pidns_of_[static_cast<size_t>(all.front())];
    });
    for (int r : all) {
      const size_t i = static_cast<size_t>(r);
      if (std::find(seen.begin(), seen.end(), proc_of_[i]) != seen.end()) continue;
      seen.push_back(proc_of_[i]);
      pids += format("%s %ld", pids.empty() ? "" : ",", pid_of_[i]);
      if (namespaces) pids += format(" in pid namespace %s", pidns_of_[i].c_str());
    }
    // A simulated GPU is sliced only under ACCORD_SIM_TIMESLICE_US; else it runs every
    // process's kernels at once, as under MPS, and there is nothing to warn about.
    const std::string sliced = std::string(rt_->kind()) == "simulated"
                                   ? format("is time-sliced as a GPU without MPS is (simulated: ACCORD_SIM_TIMESLICE_US=%lld)",
                                            static_cast<long long>(settings_.sim_timeslice_us))
                                   : std::string("MPS does not run");
    LOG_WARN(kGpu,
             "rank %d: GPU %s is shared by ranks %s in different processes (pids%s) and %s: the GPU runs one "
             "process's kernels at a time, in time slices, so each hop "
             "of a collective waits for a slice (expect low bandwidth; a long collective may reach "
             "ACCORD_TIMEOUT_MS). Start MPS before the job (nvidia-cuda-mps-control -d), or give "
             "each rank its own GPU",
             rank_, gpu_label(rank_).substr(4).c_str(), rank_list(all).c_str(), pids.c_str(), sliced.c_str());
  }
}

// Note [GPU identity]: a GPU is its UUID (and PCI bus id), never its ordinal: under Slurm's
// --gpus-per-task=1 or any per-rank CUDA_VISIBLE_DEVICES every rank may call its GPU "GPU 0",
// and ranks on different GPUs looked like ranks sharing one (routed to FIFOs in "their" GPU's
// memory), while two ends whose visible sets differ could choose different routes and wait
// for each other until the init timeout. So every rank publishes, at init, its GPU's ordinal,
// UUID, bus id and the bus ids of the GPUs it can peer with both ways (peer_bus_ids: the GPUs
// its process sees; the simulation knows the whole machine), and every rank decides every
// pair's route from those same facts, so both ends of a pair always agree:
//  - one GPU (same UUID): p2p within one process, ipc between processes;
//  - GPUs that peer (either end lists the other's bus id): p2p within one process (which sees
//    both GPUs), ipc between processes (CUDA 10.1 and later map IPC memory of a GPU the
//    process does not see; the device is found by bus id, cudaDeviceGetByPCIBusId);
//  - else host-staged, and so are processes in different pid namespaces (Note [Process
//    identity]: containers; CUDA IPC between them is not relied on until tried on hardware).
// ACCORD_P2P_DISABLE=1 makes every pair host-staged.
bool DeviceEngine::same_gpu(int a, int b) const {
  if (gpus_.empty()) return device_of_[static_cast<size_t>(a)] == device_of_[static_cast<size_t>(b)];
  const GpuFacts &ga = gpus_[static_cast<size_t>(a)], &gb = gpus_[static_cast<size_t>(b)];
  return ga.ordinal >= 0 && gb.ordinal >= 0 && ga.uuid == gb.uuid;
}

std::string DeviceEngine::gpu_label(int r) const {
  const int ordinal = device_of_[static_cast<size_t>(r)];
  if (!numberings_differ_ || gpus_.empty()) return format("GPU %d", ordinal);
  return format("GPU %d of rank %d (%s)", ordinal, r, gpus_[static_cast<size_t>(r)].bus.c_str());
}

Status DeviceEngine::gather_gpus(StoreClient* store, Deadline deadline) {
  std::string mine = "-1";
  if (device_ >= 0) {
    DeviceInfo info;
    std::vector<std::string> peers;
    ACCORD_TRY(rt_->device_info(device_, &info).prefix(format("rank %d: ", rank_)));
    ACCORD_TRY(rt_->peer_bus_ids(device_, &peers).prefix(format("rank %d: ", rank_)));
    const std::string bus = canonical_bus_id(info.pci_bus_id);
    mine = format("%d %s %s ", device_, info.uuid.empty() ? bus.c_str() : info.uuid.c_str(), bus.c_str());
    for (size_t i = 0; i < peers.size(); ++i) mine += (i ? "," : "") + peers[i];
  }
  std::vector<std::string> all;
  ACCORD_TRY(store->all_gather("device", rank_, nranks_, mine, &all, deadline));
  gpus_.assign(static_cast<size_t>(nranks_), GpuFacts());
  for (size_t r = 0; r < all.size(); ++r) {
    GpuFacts& g = gpus_[r];
    const std::string& v = all[r];
    g.ordinal = std::atoi(v.c_str());
    device_of_[r] = g.ordinal;
    if (g.ordinal < 0) continue;
    const size_t u = v.find(' ') + 1, b = v.find(' ', u) + 1, p = v.find(' ', b) + 1;
    g.uuid = v.substr(u, b - 1 - u);
    g.bus = v.substr(b, p - 1 - b);
    for (size_t at = p; at < v.size();) {
      const size_t comma = std::min(v.find(',', at), v.size());
      g.peers.push_back(v.substr(at, comma - at));
      at = comma + 1;
    }
  }
  numberings_differ_ = false;
  for (int a = 0; a < nranks_; ++a)
    for (int b = a + 1; b < nranks_; ++b)
      if (gpus_[static_cast<size_t>(a)].ordinal >= 0 && gpus_[static_cast<size_t>(b)].ordinal >= 0 &&
          same_gpu(a, b) != (device_of_[static_cast<size_t>(a)] == device_of_[static_cast<size_t>(b)]))
        numberings_differ_ = true;
  return Status::success();
}

DeviceEngine::DeviceRoute DeviceEngine::device_route(int a, int b, std::string* why) const {
  const GpuFacts &ga = gpus_[static_cast<size_t>(a)], &gb = gpus_[static_cast<size_t>(b)];
  const std::string la = gpu_label(a), lb = gpu_label(b);
  const long pa = pid_of_[static_cast<size_t>(a)], pb = pid_of_[static_cast<size_t>(b)];
  const bool one_process = same_process(a, b);
  const bool one_pidns = pidns_of_[static_cast<size_t>(a)] == pidns_of_[static_cast<size_t>(b)];
  const std::string apart =
      format("processes %ld and %ld in different pid namespaces (containers?): staged through the "
             "shared memory they see, CUDA IPC between them is not relied on",
             pa, pb);
  if (same_gpu(a, b) && !settings_.p2p_disable) {
    if (one_process) {
      *why = format("%s shared by both ranks: FIFOs in its memory", la.c_str());
      return DeviceRoute::kP2p;
    }
    if (!one_pidns) {
      *why = format("%s shared by both ranks, %s", la.c_str(), apart.c_str());
      return DeviceRoute::kHostStaged;
    }
    *why = format("%s shared by both ranks, processes %ld and %ld: FIFOs in its memory through IPC "
                  "handles (their kernels share the GPU by time slices unless MPS runs)",
                  la.c_str(), pa, pb);
    return DeviceRoute::kIpc;
  }
  if (settings_.p2p_disable) {
    *why = format("%s and %s: ACCORD_P2P_DISABLE=1", la.c_str(), lb.c_str());
    return DeviceRoute::kHostStaged;
  }
  auto lists = [](const GpuFacts& g, const std::string& bus) {
    return std::find(g.peers.begin(), g.peers.end(), bus) != g.peers.end();
  };
  const bool peer = lists(ga, gb.bus) || lists(gb, ga.bus);
  std::string over;  // " over path NV2", when the topology names the path
  if (auto* sim = dynamic_cast<const SimulatedRuntime*>(rt_)) {
    const topo::System& sys = sim->system();
    const int da = sim->physical_of_bus(ga.bus), db = sim->physical_of_bus(gb.bus);
    if (da >= 0 && db >= 0) {
      const std::string path =
          sys.path(da, db) == topo::PathClass::kUnknown
              ? std::string("an unknown path")
              : "path " + topo::path_class_name(sys.path(da, db), sys.pair(da, db).nvlinks);
      if (sys.path(da, db) != topo::PathClass::kUnknown) over = " over " + path;
      if (!peer) {
        const std::string& reason =
            sys.p2p_reason(da, db).empty() ? sys.p2p_reason(db, da) : sys.p2p_reason(da, db);
        *why = format("%s and %s cannot peer: %s", la.c_str(), lb.c_str(),
                      reason.empty() ? path.c_str() : reason.c_str());
        return DeviceRoute::kHostStaged;
      }
    }
  }
  if (!peer) {
    *why = format("%s and %s cannot peer: the driver says no (cudaDeviceCanAccessPeer, asked by "
                  "each rank whose process sees both GPUs; CUDA_VISIBLE_DEVICES may hide them)",
                  la.c_str(), lb.c_str());
    return DeviceRoute::kHostStaged;
  }
  if (one_process) {
    *why = format("%s and %s peer%s, one process: kernels write into the receiver's "
                  "GPU memory",
                  la.c_str(), lb.c_str(), over.c_str());
    return DeviceRoute::kP2p;
  }
  if (!one_pidns) {
    *why = format("%s and %s peer%s, but %s", la.c_str(), lb.c_str(), over.c_str(), apart.c_str());
    return DeviceRoute::kHostStaged;
  }
  *why = format("%s and %s peer%s, processes %ld and %ld: GPU memory mapped through "
                "IPC handles exchanged at init",
                la.c_str(), lb.c_str(), over.c_str(), pa, pb);
  return DeviceRoute::kIpc;
}

std::string DeviceEngine::device_pair(int a, int b) const {
  std::string why;
  const DeviceRoute route = device_route(a, b, &why);
  const char* name = route == DeviceRoute::kP2p ? "p2p" : route == DeviceRoute::kIpc ? "ipc" : "host-staged";
  return format("%s (%s)", name, why.c_str());
}

// Note [Blocks] (dev_call.hpp): how many blocks a collective kernel of this communicator may
// have. Every block of every rank's kernel must be resident at once (a block waits for
// messages that need all of a peer's blocks), so the ranks on one GPU (MPS, or threads) share
// its multiprocessors: at most half of them, split between those ranks. ACCORD_GPU_BLOCKS caps
// it (1: the one-block kernel); the runtime may cap it lower (the simulation runs a block per
// host thread); the dynamic shared memory of the counts (8 bytes a rank) must fit CUDA's 48 KiB.
unsigned DeviceEngine::kernel_blocks_limit() const {
  if (settings_.gpu_blocks <= 1 || nranks_ > 4096) return 1;
  unsigned limit = static_cast<unsigned>(std::min<int64_t>(settings_.gpu_blocks, 1024));
  limit = std::min(limit, rt_->max_kernel_blocks());
  DeviceInfo info;
  if (rt_->device_info(device_, &info).ok() && info.multiprocessors > 0) {
    int sharing = 0;
    for (int r : local_ranks_) sharing += same_gpu(r, rank_) ? 1 : 0;
    limit = std::min(limit, static_cast<unsigned>(std::max(1, info.multiprocessors / (2 * std::max(1, sharing)))));
  }
  return std::max(1u, limit);
}

// A call's blocks: one per kBytesPerBlock of its largest step, within the limit above. A call
// that uses a host-staged FIFO keeps one block: every block's leader polls the flags over the
// bus, and 16 blocks halved the bandwidth of 2 ranks on one H200 (16 MiB: 1.95 GB/s against
// 4.07 with one block, bench/NOTES-2026-11.md).
constexpr uint64_t kBytesPerBlock = 16 << 10;
uint32_t DeviceEngine::call_blocks(const Schedule& sched) const {
  const unsigned limit = max_blocks_;
  if (limit <= 1) return 1;
  auto staged = [&](int peer) {
    return peer >= 0 && static_cast<size_t>(peer) < dev_route_of_.size() &&
           (dev_route_of_[static_cast<size_t>(peer)] == static_cast<int>(DeviceRoute::kHostStaged) ||
            dev_route_of_[static_cast<size_t>(peer)] == static_cast<int>(DeviceRoute::kTcpStaged));
  };
  uint64_t largest = 0;
  for (const Step& st : sched.steps) {
    if (staged(st.send_peer) || staged(st.recv_peer)) return 1;
    largest = std::max<uint64_t>(largest, st.bytes);
  }
  const uint64_t want = (largest + kBytesPerBlock - 1) / kBytesPerBlock;
  return static_cast<uint32_t>(std::max<uint64_t>(1, std::min<uint64_t>(want, limit)));
}

// Note [Device FIFOs] (transport/shm/fifo.hpp): for every local peer with a GPU, the FIFO from
// that peer to this rank is this rank's: in its GPU memory for p2p and ipc pairs (allocated,
// zeroed and published as a pointer or an IPC handle), in its shared-memory segment for
// host-staged ones. It opens each peer's FIFO toward it in turn. Every rank decides each pair's
// route from the same inputs (device_route), so both ends agree without another round. The
// result is the DevPeer table the kernels read (dev_call.hpp), copied to GPU memory once.
// Note [Point-to-point FIFOs] (point_to_point.cpp): each p2p or ipc pair's memory holds a second
// FIFO, of larger slots, for sends and receives only; their table follows the collectives'.
Status DeviceEngine::connect_device_fifos(StoreClient* store, Deadline deadline) {
  if (device_ < 0) return Status::success();
  ACCORD_TRY(join_fifo_hold(store, deadline));
  dev_route_of_.assign(static_cast<size_t>(nranks_), -1);
  wait_ends_.assign(2 * static_cast<size_t>(nranks_), WaitEnd{});
  p2p_piece_.assign(static_cast<size_t>(nranks_), shape_.slot_bytes);
  // [0, n): the collectives' table; [n, 2n): the sends and receives' (Note [Point-to-point
  // FIFOs]), the same FIFO where a pair has no point-to-point FIFO.
  const size_t n = static_cast<size_t>(nranks_);
  std::vector<dev::DevPeer> peers(2 * n);
  // This rank's own counts (DevFifo::count): two per peer; then the blocks' arrival counters
  // (DevFifo::arrive), nslots per count; then DevCall::grid's two words; then the same counts
  // and counters of the point-to-point FIFOs. All zero.
  const size_t p2p_words = 2 * n + 2 * n * p2p_shape_.nslots;
  const size_t words = 2 * n + 2 * n * shape_.nslots + 2 + p2p_words;
  ACCORD_TRY(rt_->alloc_device(device_, sizeof(uint32_t) * words, &counts_dev_));
  ACCORD_TRY(rt_->memset_async(counts_dev_, 0, sizeof(uint32_t) * words, stream_));
  auto* counts = static_cast<uint32_t*>(counts_dev_);
  grid_dev_ = counts + words - p2p_words - 2;
  uint32_t* p2p_counts = counts + words - p2p_words;
  max_blocks_ = kernel_blocks_limit();
  const size_t fifo_bytes = shape_.header_bytes() + shape_.data_bytes();
  const size_t p2p_fifo_bytes = p2p_shape_.header_bytes() + p2p_shape_.data_bytes();
  // `count` is one of the counts at `first` (counts or p2p_counts), whose arrival counters follow.
  auto describe = [&](uint8_t* base, uint8_t* data, uint32_t* count, const FifoShape& shape, uint32_t* first) {
    FifoView v(base, shape, nullptr, data);
    dev::DevFifo f;
    f.head = reinterpret_cast<uint32_t*>(&v.ctrl->head);
    f.headers = reinterpret_cast<uint8_t*>(v.headers);
    f.data = v.data;
    f.count = count;
    f.arrive = first + 2 * n + (count - first) * shape.nslots;
    f.slot_stride = shape.slot_stride();
    f.nslots = static_cast<uint32_t>(shape.nslots);
    f.slot_bytes = static_cast<uint32_t>(shape.slot_bytes);
    return f;
  };
  // Note [Waiting FIFOs]: what a stream waits on and writes for the FIFOs `from` the peer
  // (this rank's memory) and `to` it; `to` null: the peer is over TCP, and this rank waits on
  // its own "out" FIFO's head, which the send pump writes.
  auto wait_end_of = [](WaitEnd* w, const dev::DevFifo& from, const dev::DevFifo* to, uint32_t* released) {
    auto reverse_head = [](uint32_t* head) {
      return reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(head) - dev::kHeadOffset + dev::kReverseHeadOffset);
    };
    w->headers = from.headers;
    w->released = released != nullptr ? released : reverse_head(from.head);
    if (to != nullptr) w->tell = reverse_head(to->head);
    w->nslots = from.nslots;
  };
  // Note [Copy-engine messages]: the slots of a pair's FIFOs in host memory, at `to` and `from`.
  auto host_slots = [&](WaitEnd* w, void* to, void* from) {
    w->send_slots = static_cast<uint8_t*>(to) + shape_.header_bytes();
    w->recv_slots = static_cast<uint8_t*>(from) + shape_.header_bytes();
    w->slot_stride = shape_.slot_stride();
  };
  // The device address of host-staged FIFO memory (this or a peer's segment, registered).
  auto host_fifo = [&](void* host, uint32_t* count, dev::DevFifo* out) -> Status {
    void* at = nullptr;
    ACCORD_TRY(rt_->device_address(host, &at));
    *out = describe(static_cast<uint8_t*>(at), nullptr, count, shape_, counts);
    return Status::success();
  };
  std::vector<std::pair<int, DeviceRoute>> direct;
  for (int peer : local_ranks_) {
    if (peer == rank_ || device_of_[static_cast<size_t>(peer)] < 0) continue;
    std::string why;
    const DeviceRoute route = device_route(rank_, peer, &why);
    dev_route_of_[static_cast<size_t>(peer)] = static_cast<int>(route);
    dev::DevPeer& p = peers[static_cast<size_t>(peer)];
    uint32_t* send_count = counts + 2 * peer;
    uint32_t* recv_count = counts + 2 * peer + 1;
    if (route == DeviceRoute::kHostStaged) {
      if (shm_ == nullptr) continue;
      ACCORD_TRY(host_fifo(shm_->device_ctrl_recv(peer), recv_count, &p.recv));
      ACCORD_TRY(host_fifo(shm_->device_ctrl_send(peer), send_count, &p.send));
      wait_end_of(&wait_ends_[static_cast<size_t>(peer)], p.recv, &p.send, nullptr);
      host_slots(&wait_ends_[static_cast<size_t>(peer)], shm_->device_ctrl_send(peer), shm_->device_ctrl_recv(peer));
      continue;
    }
    const int pd = device_of_[static_cast<size_t>(peer)];
    void* mem = nullptr;
    ACCORD_TRY(rt_->alloc_device(device_, fifo_bytes + p2p_fifo_bytes, &mem)
                   .prefix(format("rank %d: device FIFOs from rank %d (GPU %d) to GPU %d (%zu bytes; "
                                  "ACCORD_DEVICE_P2P_BYTES sets the larger part): ",
                                  rank_, peer, pd, device_, fifo_bytes + p2p_fifo_bytes)));
    dev_fifo_mem_.push_back(mem);
    auto* base = static_cast<uint8_t*>(mem);
    // Zero is an empty FIFO: the collectives' FIFO whole, the point-to-point one's headers
    // (its slots are written before they are read).
    ACCORD_TRY(rt_->memset_async(mem, 0, fifo_bytes + p2p_shape_.header_bytes(), stream_));
    p.recv = describe(base, base + shape_.header_bytes(), recv_count, shape_, counts);
    uint8_t* pbase = base + fifo_bytes;
    dev::DevPeer& q = peers[n + static_cast<size_t>(peer)];
    q.recv = describe(pbase, pbase + p2p_shape_.header_bytes(), p2p_counts + 2 * peer + 1, p2p_shape_, p2p_counts);
    p2p_piece_[static_cast<size_t>(peer)] = p2p_shape_.slot_bytes;
    direct.emplace_back(peer, route);
  }
  // Every FIFO is zero (an empty FIFO) before a peer can learn where it is.
  ACCORD_TRY(rt_->synchronize_stream(stream_).prefix(format("rank %d: zeroing device FIFOs: ", rank_)));
  for (size_t i = 0; i < direct.size(); ++i) {
    const auto [peer, route] = direct[i];
    void* mem = dev_fifo_mem_[i];
    std::string value;
    if (route == DeviceRoute::kP2p) {
      const uintptr_t at = reinterpret_cast<uintptr_t>(mem);
      value = to_hex(&at, sizeof at);
    } else {
      IpcHandle h;
      ACCORD_TRY(rt_->ipc_get_handle(mem, &h).prefix(
          format("rank %d: exporting the device FIFO for rank %d: ", rank_, peer)));
      value = to_hex(&h, sizeof h);
    }
    ACCORD_TRY(store->set(format("dfifo/%d/%d", peer, rank_), value));
  }
  for (const auto& [peer, route] : direct) {
    const int pd = device_of_[static_cast<size_t>(peer)];
    const std::string where = format("rank %d (GPU %d) to rank %d (GPU %d)", rank_, device_, peer, pd);
    std::string value;
    ACCORD_TRY(store->get(format("dfifo/%d/%d", rank_, peer), &value, deadline, format("rank %d", peer)));
    void* data = nullptr;
    if (route == DeviceRoute::kP2p) {
      uintptr_t at = 0;
      if (!from_hex(value, &at, sizeof at))
        return error(ACCORD_ERR_INTERNAL, "device FIFO %s: rank %d published a malformed pointer",
                     where.c_str(), peer);
      // One process: it sees the peer's GPU, under its own ordinal (Note [GPU identity]).
      int local = pd;
      ACCORD_TRY(rt_->device_by_bus_id(gpus_[static_cast<size_t>(peer)].bus, &local));
      if (local < 0) local = pd;
      if (!same_gpu(rank_, peer))
        ACCORD_TRY(rt_->enable_peer(device_, local).prefix(format(
            "device FIFO %s: peer access was expected (the topology says the pair peers); set "
            "ACCORD_P2P_DISABLE=1 to stage through host memory: ",
            where.c_str())));
      data = reinterpret_cast<void*>(at);
    } else {
      IpcHandle h;
      if (!from_hex(value, &h, sizeof h))
        return error(ACCORD_ERR_INTERNAL, "device FIFO %s: rank %d published a malformed IPC handle",
                     where.c_str(), peer);
      ACCORD_TRY(rt_->ipc_open_handle(device_, h, &data).prefix(format(
          "device FIFO %s: opening rank %d's IPC handle (set ACCORD_P2P_DISABLE=1 to stage "
          "through host memory instead): ",
          where.c_str(), peer)));
      ipc_opened_.push_back(data);
    }
    auto* base = static_cast<uint8_t*>(data);
    peers[static_cast<size_t>(peer)].send =
        describe(base, base + shape_.header_bytes(), counts + 2 * peer, shape_, counts);
    uint8_t* pbase = base + fifo_bytes;
    peers[n + static_cast<size_t>(peer)].send =
        describe(pbase, pbase + p2p_shape_.header_bytes(), p2p_counts + 2 * peer, p2p_shape_, p2p_counts);
    for (size_t t : {size_t{0}, n})
      wait_end_of(&wait_ends_[t + static_cast<size_t>(peer)], peers[t + static_cast<size_t>(peer)].recv,
                  &peers[t + static_cast<size_t>(peer)].send, nullptr);
  }
  // Note [Device data over TCP]: two pinned FIFOs of this rank per TCP peer with a GPU.
  for (int peer : remote_ranks_) {
    if (tcp_dev_ == nullptr || device_of_[static_cast<size_t>(peer)] < 0) continue;
    void *out = nullptr, *in = nullptr;
    ACCORD_TRY(add_tcp_pump(peer, fifo_bytes, &out, &in));
    dev_route_of_[static_cast<size_t>(peer)] = static_cast<int>(DeviceRoute::kTcpStaged);
    dev::DevPeer& p = peers[static_cast<size_t>(peer)];
    ACCORD_TRY(host_fifo(out, counts + 2 * peer, &p.send));
    ACCORD_TRY(host_fifo(in, counts + 2 * peer + 1, &p.recv));
    wait_end_of(&wait_ends_[static_cast<size_t>(peer)], p.recv, nullptr, p.send.head);
    host_slots(&wait_ends_[static_cast<size_t>(peer)], out, in);
  }
  // A rank may not free its FIFOs (destroy, exit) while a peer still has to open them: wait
  // until every direct peer has opened ours (as the shm segments' "mapped" round).
  if (!direct.empty()) {
    ACCORD_TRY(store->set(format("dfifo_opened/%d", rank_), "1"));
    for (const auto& [peer, route] : direct) {
      std::string unused;
      ACCORD_TRY(store->get(format("dfifo_opened/%d", peer), &unused, deadline, format("rank %d", peer)));
    }
  }
  // Pairs without a point-to-point FIFO send and receive on the collectives' FIFOs.
  for (size_t r = 0; r < n; ++r) {
    if (peers[n + r].recv.headers == nullptr) peers[n + r].recv = peers[r].recv;
    if (peers[n + r].send.headers == nullptr) peers[n + r].send = peers[r].send;
  }
  ACCORD_TRY(upload_peers(peers));
  p2p_peers_dev_ = static_cast<dev::DevPeer*>(peers_dev_) + n;
  start_tcp_pumps();
  const size_t others = static_cast<size_t>(
      std::count_if(dev_route_of_.begin(), dev_route_of_.end(), [](int r) { return r >= 0; })) - direct.size();
  p2p_plan_ = format("sends and receives of GPU buffers: %zu peer%s on FIFOs of %zu x %zu KiB in GPU memory "
                     "(ACCORD_DEVICE_P2P_BYTES)%s\n",
                     direct.size(), direct.size() == 1 ? "" : "s", p2p_shape_.nslots, p2p_shape_.slot_bytes >> 10,
                     others == 0 ? ""
                                 : format(", %zu on the collectives' FIFOs of %zu x %zu KiB (host-staged or TCP)",
                                          others, shape_.nslots, shape_.slot_bytes >> 10)
                                       .c_str());
  if (direct.size() + others == 0) p2p_plan_.clear();  // no peer on a GPU route
  LOG_INFO(kGpu, "rank %d: device FIFOs with %zu peer%s in GPU memory (%zu slots x %zu KiB of GPU %d memory each, "
           "and for sends and receives %zu x %zu KiB); kernels of up to %u blocks",
           rank_, direct.size(), direct.size() == 1 ? "" : "s", shape_.nslots, shape_.slot_bytes >> 10, device_,
           p2p_shape_.nslots, p2p_shape_.slot_bytes >> 10, max_blocks_);
  return Status::success();
}

Status p2p_fifo_shape(int64_t setting, FifoShape* out) {
  const size_t bytes = setting > 0 ? static_cast<size_t>(setting) : kDefaultP2pFifoBytes;
  out->nslots = kP2pFifoSlots;
  out->slot_bytes = bytes / kP2pFifoSlots & ~size_t{4095};
  if (out->slot_bytes < 4096 || out->slot_bytes > kMaxSlotBytes)
    return error(ACCORD_ERR_INVALID_ARGUMENT,
                 "ACCORD_DEVICE_P2P_BYTES=%zu gives point-to-point FIFO slots of %zu bytes (a quarter, in 4 KiB "
                 "multiples); use %zu to %zu bytes, or 0 for the built-in %zu",
                 bytes, out->slot_bytes, kP2pFifoSlots * 4096, kP2pFifoSlots * (kMaxSlotBytes & ~size_t{4095}),
                 kDefaultP2pFifoBytes);
  return Status::success();
}

// The DevPeer table into GPU memory, through the communicator's own (non-blocking) stream: a
// synchronous copy would run on the legacy default stream and wait for the users' streams.
Status DeviceEngine::upload_peers(const std::vector<dev::DevPeer>& peers) {
  const size_t bytes = sizeof(dev::DevPeer) * peers.size();
  if (bytes == 0) return Status::success();
  void* staging = nullptr;
  ACCORD_TRY(rt_->alloc_host_pinned(bytes, &staging));
  std::memcpy(staging, peers.data(), bytes);
  Status s = rt_->alloc_device(device_, bytes, &peers_dev_);
  if (s.ok()) s = rt_->copy_async(CopyKind::kHostToDevice, peers_dev_, staging, bytes, stream_);
  if (s.ok()) s = rt_->synchronize_stream(stream_);
  (void)rt_->free_host_pinned(staging);
  return s.prefix(format("rank %d: device FIFO table: ", rank_));
}

const char* DeviceEngine::device_channel(int peer) const {
  if (peer < 0 || static_cast<size_t>(peer) >= dev_route_of_.size()) return nullptr;
  switch (dev_route_of_[static_cast<size_t>(peer)]) {
    case static_cast<int>(DeviceRoute::kP2p):
      return "p2p";
    case static_cast<int>(DeviceRoute::kIpc):
      return "ipc";
    case static_cast<int>(DeviceRoute::kHostStaged):
      return "host-staged";
    case static_cast<int>(DeviceRoute::kTcpStaged):
      return "tcp-staged";
    default:
      return nullptr;
  }
}

// A host-only communicator in a process with GPUs: a device buffer would be read by the host
// path (a crash on real GPUs), so it is refused with what to do instead.
Status DeviceEngine::refuse_device_buffers(const CollArgs& a) const {
  if (probe_rt_ == nullptr) return Status::success();
  for (const void* p : {a.send, static_cast<const void*>(a.recv)}) {
    PointerInfo info;
    if (p == nullptr || !probe_rt_->pointer_info(p, &info).ok() || info.kind != MemoryKind::kDevice)
      continue;
    return error(ACCORD_ERR_INVALID_ARGUMENT,
                 "rank %d: %s: buffer %p is memory of GPU %d, but this communicator has no GPU "
                 "(it was created on a thread with no current CUDA device, and neither "
                 "ACCORD_DEVICE nor accord_comm_init_all named one); call cudaSetDevice(%d) "
                 "before creating it, or set ACCORD_DEVICE",
                 rank_, collective_name(a.coll), p, info.device, info.device);
  }
  return Status::success();
}

Status DeviceEngine::classify_buffers(const CollArgs& a, bool* on_device) const {
  *on_device = false;
  if (a.count == 0 || a.coll == Collective::kBarrier) return Status::success();
  if (rt_ == nullptr) return refuse_device_buffers(a);
  const bool is_root = a.root == rank_;
  const bool need_send = a.coll != Collective::kBroadcast || is_root;
  const bool need_recv = a.coll != Collective::kReduce || is_root;
  int devices = 0, hosts = 0;
  const char* name = collective_name(a.coll);
  for (int i = 0; i < 2; ++i) {
    const void* p = i == 0 ? a.send : static_cast<const void*>(a.recv);
    if ((i == 0 && !need_send) || (i == 1 && !need_recv) || p == nullptr) continue;
    PointerInfo info;
    ACCORD_TRY(rt_->pointer_info(p, &info));
    if (info.kind != MemoryKind::kDevice) {
      ++hosts;
      continue;
    }
    if (info.device != device_)
      return error(ACCORD_ERR_INVALID_ARGUMENT,
                   "rank %d: %s: %s %p is memory of GPU %d, but this communicator runs "
                   "on GPU %d; pass buffers of GPU %d",
                   rank_, name, i == 0 ? "sendbuf" : "recvbuf", p, info.device, device_, device_);
    ++devices;
  }
  if (devices > 0 && hosts > 0)
    return error(ACCORD_ERR_INVALID_ARGUMENT,
                 "rank %d: %s: one buffer is memory of GPU %d and the other host "
                 "memory; pass both on GPU %d (asynchronous on a stream) or both on the host",
                 rank_, name, device_, device_);
  *on_device = devices > 0;
  return Status::success();
}

// Note [Step ring]: a schedule of more than kInlineSteps steps goes to the kernel through this
// communicator's ring of pinned host memory (the kernel reads it over the bus, a step at a
// time, which only long schedules of large messages need). Records are written in call order;
// a record's space is reused once DevCtl::done shows its kernel ended. The wait for space is
// on the host and reads only pinned memory: it can only be long when many collectives queue
// behind one that cannot progress, and then it ends at the timeout with an error.
Status DeviceEngine::reserve_steps(size_t bytes, uint64_t seq, size_t* offset) {
  bytes = (bytes + 63) & ~size_t{63};
  if (bytes > kStepRingBytes)
    return error(ACCORD_ERR_UNSUPPORTED, "rank %d: a collective of %zu schedule steps on GPU %d is more than "
                 "the step ring holds (%zu bytes); split the call, or raise ACCORD_SHM_SLOT_BYTES so that "
                 "each step moves more", rank_, bytes / sizeof(dev::DevStep), device_, kStepRingBytes);
  auto* ctl = static_cast<dev::DevCtl*>(ctl_host_);
  const Deadline deadline = Deadline::after_ms(settings_.timeout_ms);
  for (;;) {
    const uint64_t done = __atomic_load_n(&ctl->done, __ATOMIC_ACQUIRE);
    while (!ring_records_.empty() && ring_records_.front().seq <= done) ring_records_.pop_front();
    size_t at = ring_pos_;
    bool fits;
    if (ring_records_.empty()) {
      if (at + bytes > kStepRingBytes) at = 0;
      fits = true;
    } else {
      const size_t tail = ring_records_.front().start;  // the oldest record still in use
      if (at >= tail) {
        if (at + bytes <= kStepRingBytes) {
          fits = true;
        } else {
          at = 0;
          fits = bytes <= tail;
        }
      } else {
        fits = at + bytes <= tail;
      }
    }
    if (fits) {
      ring_records_.push_back({seq, at});
      ring_pos_ = at + bytes;
      *offset = at;
      return Status::success();
    }
    if (deadline.expired())
      return error(ACCORD_ERR_TIMEOUT, "rank %d: GPU %d: no room for collective seq %llu's steps: the "
                   "collective seq %llu has not ended in %lld ms; is a peer stuck, or the stream held?",
                   rank_, device_, static_cast<unsigned long long>(seq),
                   static_cast<unsigned long long>(ring_records_.front().seq),
                   static_cast<long long>(settings_.timeout_ms));
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Note [One stream per rank]: the kernel of one rank waits for the kernels of the others. Two
// ranks of one communicator that put their collectives on one stream therefore wait for each
// other for ever: the second kernel is queued behind the first, and the first waits for it
// (until ACCORD_TIMEOUT_MS). Ranks of one process can do that (one thread driving "towers"
// on one GPU with one stream), so every launch is noted in a process-wide table of streams,
// and a collective is refused when its stream is the stream of a collective of another rank
// of the same communicator that has not ended (DevCtl::done). A stream whose collective has
// ended may be used by another rank: a destroyed stream's handle value comes back for new
// streams. CUDA's cudaStreamLegacy (0x1) and cudaStreamPerThread (0x2) are refused outright
// where ranks of this process share a GPU: all such ranks would share the one legacy stream,
// or one thread's per-thread stream.
namespace {
constexpr uintptr_t kCudaStreamLegacy = 0x1;     // cudaStreamLegacy
constexpr uintptr_t kCudaStreamPerThread = 0x2;  // cudaStreamPerThread
struct StreamUse {
  const void* comm = nullptr;  // the DeviceEngine (one per communicator)
  std::string job;             // the communicator's job (store endpoint and secret)
  int rank = 0;
  const dev::DevCtl* ctl = nullptr;  // pinned, never freed (release_device)
  uint64_t seq = 0;                  // the last collective of `rank` on the stream
};
std::mutex g_stream_uses_mu;
std::multimap<void*, StreamUse>& stream_uses() {
  static auto* uses = new std::multimap<void*, StreamUse>;  // never destroyed: used at exit
  return *uses;
}
bool in_flight(const StreamUse& u) {
  return __atomic_load_n(&u.ctl->done, __ATOMIC_ACQUIRE) < u.seq;
}
}  // namespace

// Every device collective compares it (check_stream_owner, note_stream_use): built at the first
// one, when the endpoint is long set, instead of formatting the secret in hex at every call.
const std::string& DeviceEngine::job_key() const {
  if (job_key_.empty())
    job_key_ =
        endpoint_.addr.to_string() + "/" + to_hex(endpoint_.secret.data(), endpoint_.secret.size());
  return job_key_;
}

Status DeviceEngine::check_stream_owner(void* user_stream, const char* name) const {
  const auto handle = reinterpret_cast<uintptr_t>(user_stream);
  if ((handle == kCudaStreamLegacy || handle == kCudaStreamPerThread) && !gpu_sharers_.empty())
    return error(
        ACCORD_ERR_INVALID_USAGE,
        "rank %d: %s on %s: ranks %s of this communicator share GPU %d in this process, and "
        "a collective of one rank waits for the others': on one %s stream they would queue "
        "behind each other and wait for ever; give each rank a stream of its own "
        "(accord_stream_create, or cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking))",
        rank_, name, handle == kCudaStreamLegacy ? "cudaStreamLegacy" : "cudaStreamPerThread",
        gpu_sharers_.c_str(), device_, handle == kCudaStreamLegacy ? "legacy" : "per-thread");
  const std::string& job = job_key();
  std::lock_guard<std::mutex> lock(g_stream_uses_mu);
  auto [first, last] = stream_uses().equal_range(user_stream);
  for (auto it = first; it != last; ++it) {
    const StreamUse& u = it->second;
    if (u.comm == this || u.rank == rank_ || u.job != job || !in_flight(u)) continue;
    return error(
        ACCORD_ERR_INVALID_USAGE,
        "rank %d: %s: stream %p carries rank %d's collective (seq %llu) of this communicator, "
        "which has not ended: it waits for this rank's, which would queue behind it on the "
        "same stream, for ever; give each rank a stream of its own (accord_stream_create, or "
        "cudaStreamCreateWithFlags). Rank %d's collective now ends only at ACCORD_TIMEOUT_MS "
        "or accord_comm_abort",
        rank_, name, user_stream, u.rank, static_cast<unsigned long long>(u.seq), u.rank);
  }
  return Status::success();
}

void DeviceEngine::note_stream_use(void* user_stream, uint64_t seq) {
  std::lock_guard<std::mutex> lock(g_stream_uses_mu);
  auto& uses = stream_uses();
  for (auto it = uses.begin(); it != uses.end();) {  // only collectives in flight matter
    if ((it->second.comm == this && it->first == user_stream) || !in_flight(it->second))
      it = uses.erase(it);
    else
      ++it;
  }
  uses.emplace(user_stream,
               StreamUse{this, job_key(), rank_, static_cast<const dev::DevCtl*>(ctl_host_), seq});
}

void DeviceEngine::forget_stream_uses() {
  std::lock_guard<std::mutex> lock(g_stream_uses_mu);
  auto& uses = stream_uses();
  for (auto it = uses.begin(); it != uses.end();)
    it = it->second.comm == this ? uses.erase(it) : std::next(it);
}

// After a CUDA error at a launch: whether a peer died (seen on its pidfd). Seen on an H200
// (2026-11-26): kill -9 of a rank whose GPU memory a kernel reads through CUDA IPC makes that
// kernel fault (cudaErrorIllegalAddress), and the fault leaves the survivor's CUDA context
// unusable. The fault comes while the dead process is still being torn down (its memory is
// freed before its pidfd signals), so the survivor's next call saw the CUDA error alone: this
// waits up to 2 s for a peer's death to show. Only ever on a failure path.
std::string DeviceEngine::dead_peer_note() const {
  std::vector<pollfd> fds;
  std::vector<int> ranks;
  for (int r = 0; r < nranks_ && static_cast<size_t>(r) < links_.pidfd.size(); ++r) {
    const int fd = links_.pidfd[static_cast<size_t>(r)];
    if (fd < 0 || r == rank_) continue;
    fds.push_back(pollfd{fd, POLLIN, 0});
    ranks.push_back(r);
  }
  if (fds.empty() || poll(fds.data(), fds.size(), 2000) <= 0) return std::string();
  for (size_t i = 0; i < fds.size(); ++i)
    if (fds[i].revents & POLLIN)
      return format(". Rank %d has died: a kernel that reads a dead process's GPU memory (CUDA IPC) "
                    "faults, and the fault leaves this process's CUDA context unusable; end this "
                    "process and look at rank %d's output for why it exited",
                    ranks[i], ranks[i]);
  return std::string();
}

// The runtime's stream for a caller's stream handle, wrapped once.
Status DeviceEngine::wrap_stream(void* user_stream, Stream* out) {
  auto it = user_streams_.find(user_stream);
  if (it != user_streams_.end()) {
    *out = it->second;
    return Status::success();
  }
  ACCORD_TRY(rt_->wrap_user_stream(device_, user_stream, out));
  user_streams_.emplace(user_stream, *out);
  return Status::success();
}

// What every device call checks first: the communicator is usable and there is a stream.
Status DeviceEngine::check_device_call(void* user_stream, const char* name) {
  const accord_status_t sticky = comm_.sticky_error();
  if (sticky != ACCORD_SUCCESS)
    return error(sticky,
                 "rank %d: %s refused: this communicator failed earlier and cannot be used again "
                 "(destroy it and create a new one). The earlier error: %s",
                 rank_, name, comm_.sticky_status().message().c_str());
  if (user_stream == nullptr)
    return error(ACCORD_ERR_INVALID_ARGUMENT,
                 "rank %d: %s: device buffers need a stream of GPU %d (a cudaStream_t, "
                 "or accord_stream_create)",
                 rank_, name, device_);
  return Status::success();
}

// The caller's stream of a device call, wrapped, after the checks every device call makes.
Status DeviceEngine::device_stream(void* user_stream, const char* name, Stream* out) {
  ACCORD_TRY(check_device_call(user_stream, name));
  ACCORD_TRY(check_stream_owner(user_stream, name));
  Stream us;
  ACCORD_TRY(wrap_stream(user_stream, &us).prefix(format("rank %d: %s: ", rank_, name)));
  // A capture would bake this call's seq and step-ring offset into the graph; a replay would
  // read recycled steps and hang or give wrong results.
  bool capturing = false;
  ACCORD_TRY(rt_->stream_capturing(us, &capturing).prefix(format("rank %d: %s: ", rank_, name)));
  if (capturing)
    return error(
        ACCORD_ERR_UNSUPPORTED,
        "rank %d: %s on GPU %d: stream %p is capturing a CUDA graph, and Accord's collectives "
        "cannot be captured yet (each launch carries per-call state that a replay would "
        "reuse); make the call outside the capture (before cudaStreamBeginCapture or after "
        "cudaStreamEndCapture)",
        rank_, name, device_, user_stream);
  *out = us;
  return Status::success();
}

Status DeviceEngine::enqueue_device(const CollArgs& call, void* user_stream) {
  RankScope scope(rank_, nranks_);
  const char* name = collective_name(call.coll);
  // Note [Pre-multiplied sum]: planned as the sum it is; the kernel scales as it reads.
  CollArgs a = call;
  Communicator::PreMul pm;
  const bool premul = reduces(a.coll) && a.op >= ACCORD_NUM_OPS;
  // One rank: every collective is a copy of its input into its output, or nothing in place.
  // The copy engine moves it at the GPU's memory bandwidth; there is no peer to wait for, so no
  // kernel, no schedule, no stream-owner table (its lock) and no capture query (a captured copy
  // is replayed right). A pre-multiplied sum still scales, in the kernel.
  if (nranks_ == 1 && !premul) {
    ACCORD_TRY(check_device_call(user_stream, name));
    size_t in_bytes = 0, out_bytes = 0;
    ACCORD_TRY(comm_.check_args(a, &in_bytes, &out_bytes));
    if (out_bytes == 0 || a.send == a.recv) return Status::success();
    Stream one;
    ACCORD_TRY(wrap_stream(user_stream, &one).prefix(format("rank %d: %s: ", rank_, name)));
    return rt_->copy_async(CopyKind::kDeviceToDevice, a.recv, a.send, out_bytes, one)
        .prefix(format("rank %d: %s: ", rank_, name));
  }
  Stream us;
  ACCORD_TRY(device_stream(user_stream, name, &us));
  if (premul) {
    size_t in_bytes = 0, out_bytes = 0;
    ACCORD_TRY(comm_.check_args(a, &in_bytes, &out_bytes));
    if (!comm_.premul_of(a.op, &pm))
      return error(ACCORD_ERR_INVALID_ARGUMENT, "rank %d: %s: op %d was destroyed", rank_, name, a.op);
    a.op = ACCORD_SUM;
  }
  Communicator::CallPlan plan;
  ACCORD_TRY(comm_.plan_call(a, true, &plan));
  if (plan.schedule == nullptr) return Status::success();  // nothing to move
  const Schedule& sched = *plan.schedule;
  if (sched.scratch_bytes > 0 && sched.scratch_bytes > (dev_scratch_ != nullptr ? shape_.slot_bytes : 0))
    return error(ACCORD_ERR_INTERNAL, "rank %d: %s needs %zu bytes of GPU scratch, more than the %zu allocated "
                 "at init", rank_, name, sched.scratch_bytes, dev_scratch_ != nullptr ? shape_.slot_bytes : 0);
  const bool reducing = reduces(a.coll);
  dev::DevLaunch launch;
  std::memset(static_cast<void*>(&launch), 0, sizeof launch);
  dev::DevCall& c = launch.call;
  c.dtype = reducing ? a.dtype : ACCORD_UINT8;
  c.op = reducing ? a.op : ACCORD_SUM;
  c.divisor = reducing && a.op == ACCORD_AVG ? nranks_ : 0;
  c.elem_bytes = static_cast<uint32_t>(plan.elem_bytes);
  c.tag = plan.tag;
  c.input = a.send;
  c.output = a.recv;
  if (premul) {
    c.premul = pm.immediate ? 1 : 2;
    c.scalar = pm.value;
    c.scalar_ptr = pm.ptr;
  }
  // Note [Direct or FIFO] (device/direct_path.cpp): no steps then, and no FIFO. A pre-multiplied
  // sum scales in phase A of the direct protocol (Note [Pre-multiplied sum]).
  const bool direct = prepare_direct(a, plan.elem_bytes, &launch);
  if (!direct && hand_offs_wait_) return launch_fifo_waiting(name, sched, launch, us, user_stream, /*p2p=*/false);
  return launch_schedule(name, sched, &launch, us, user_stream, direct);
}

// Launches `sched` as one collective kernel on `us` (the caller's `user_stream`); `launch`
// holds the call's own fields (dtype, op, divisor, element size, tag, buffers), the rest is
// filled here.
Status DeviceEngine::launch_schedule(const char* name, const Schedule& sched, dev::DevLaunch* launch,
                                     Stream us, void* user_stream, bool direct, bool p2p) {
  const uint64_t seq = dev_seq_ + 1;
  dev::DevCall& c = launch->call;
  // A direct call (prepare_direct) has chosen its blocks and carries no steps.
  c.nsteps = direct ? 0 : static_cast<uint32_t>(sched.steps.size());
  c.nranks = nranks_;
  c.rank = rank_;
  c.scratch = dev_scratch_;
  c.peers = static_cast<const dev::DevPeer*>(p2p ? p2p_peers_dev_ : peers_dev_);
  c.ctl = static_cast<dev::DevCtl*>(ctl_dev_);
  c.seq = seq;
  if (!direct) c.nblocks = call_blocks(sched);
  // Note [Blocks]: block b's part of scratch, at most a 16-byte multiple of slot / nblocks.
  c.scratch_stride = ((shape_.slot_bytes + c.nblocks - 1) / c.nblocks + 15) & ~uint64_t{15};
  c.grid = static_cast<uint32_t*>(grid_dev_);
  dev::DevStep* steps = launch->steps;
  if (!direct && c.nsteps > dev::kInlineSteps) {
    size_t at = 0;
    ACCORD_TRY(reserve_steps(sizeof(dev::DevStep) * c.nsteps, seq, &at));
    steps = reinterpret_cast<dev::DevStep*>(static_cast<uint8_t*>(ring_host_) + at);
    c.steps = reinterpret_cast<const dev::DevStep*>(static_cast<uint8_t*>(ring_dev_) + at);
  }
  // (A schedule in ring order has its peers mapped back to ranks already: Note [Ring order].)
  for (size_t i = 0; !direct && i < sched.steps.size(); ++i) {
    const Step& from = sched.steps[i];
    dev::DevStep& to = steps[i];
    to.kind = static_cast<uint8_t>(from.kind);
    to.src = static_cast<uint8_t>(from.src);
    to.dst = static_cast<uint8_t>(from.dst);
    to.postop = from.postop ? 1 : 0;
    to.message_right = from.message_right ? 1 : 0;
    to.copied = from.copied ? 1 : 0;
    to.send_peer = from.send_peer;
    to.recv_peer = from.recv_peer;
    to.src_off = from.src_off;
    to.dst_off = from.dst_off;
    to.bytes = from.bytes;
    to.tag = from.tag;
  }
  // Note [Kernel order]: kernels of one communicator must run one after another (each FIFO
  // count has one writer). On one stream they do. Every launch records order_event_ on its
  // stream right after the kernel, while the caller's stream is known to be alive; when the
  // caller switches streams, the new stream only waits for that event. Nothing is ever
  // enqueued on the previous stream at a later call: the caller may have destroyed it
  // (allreduce(s1); cudaStreamSynchronize(s1); cudaStreamDestroy(s1); allreduce(s2)), and a
  // destroyed handle is undefined behaviour in CUDA (the simulation fails the call).
  if (last_stream_.id != 0 && last_stream_.id != us.id)
    ACCORD_TRY(rt_->stream_wait_event(us, order_event_)
                   .prefix(format("rank %d: %s: ordering after the previous collective's stream: ",
                                  rank_, name)));
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    inflight_.push_back({seq, name});
    recent_.push_back(inflight_.back());
    if (recent_.size() > 64) recent_.pop_front();
  }
  // Note [Waiting protocol] (device/direct_call.hpp): a kernel per phase, the stream waits
  // between them.
  bool partial = false;
  Status s = direct && direct_->staged() ? direct_->launch_staged(*launch, us, &partial)  // Note [Staged protocol]
             : direct && direct_->waiting()
                 ? direct_->launch_waiting(*launch, us, &partial)
                 : rt_->launch_kernel(dev::collective_kernel(), launch, sizeof *launch, us, c.nblocks,
                                      c.nblocks > 1 && !direct ? sizeof(uint32_t) * 2 * static_cast<size_t>(nranks_) : 0);
  if (!s.ok() && partial)
    s = queued_in_part(format("%s (seq %llu)", name, static_cast<unsigned long long>(seq)), s);
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(watch_mu_);
    inflight_.pop_back();
    recent_.pop_back();
    if (c.steps != nullptr) ring_records_.pop_back();
    return Status(s.code(), format("rank %d: %s: %s%s", rank_, name, s.message().c_str(), dead_peer_note().c_str()));
  }
  if (direct) direct_->commit(launch->direct);
  dev_seq_ = seq;
  last_stream_ = us;
  note_stream_use(user_stream, seq);
  start_watchdog();
  watch_cv_.notify_one();
  s = rt_->record_event(order_event_, us);
  if (!s.ok()) {
    // The kernel is queued, but a later call on another stream could not wait for it: the
    // communicator can no longer order its kernels, so it fails as a whole.
    s = Status(
        s.code(),
        format("rank %d: %s (seq %llu) on GPU %d: launched, but recording the kernel-order "
               "event on its stream failed: %s; the communicator cannot order its next "
               "collective after this one: destroy it and create a new one%s",
               rank_, name, static_cast<unsigned long long>(seq), device_, s.message().c_str(),
               dead_peer_note().c_str()));
    comm_.set_sticky(s);
    return s;
  }
  return Status::success();
}

// Note [Device watchdog]: the one host thread of a GPU communicator, asleep while no
// collective is in flight. While one is, it looks every millisecond at what the kernels wrote
// (DevCtl) and at the peers (their process, their death notes); a kernel that failed, a peer
// that died, a kernel that has run for ACCORD_TIMEOUT_MS, or accord_comm_abort makes it set
// DevCtl::abort (every kernel of the communicator then gives up and ends), and the first such
// failure becomes the communicator's error, named with the rank, the peer and the call.
void DeviceEngine::start_watchdog() {
  if (watchdog_.joinable()) return;
  watchdog_ = std::thread([this] { watchdog_loop(); });
}

void DeviceEngine::stop_watchdog() {
  if (!watchdog_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    watch_stop_ = true;
  }
  watch_cv_.notify_all();
  watchdog_.join();
}

Status DeviceEngine::kernel_error() {
  auto* ctl = static_cast<dev::DevCtl*>(ctl_host_);
  const uint64_t err_seq = __atomic_load_n(&ctl->err_seq, __ATOMIC_ACQUIRE);
  if (err_seq == 0) return Status::success();
  const char* name = "collective";
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    for (const InFlight& c : recent_)
      if (c.seq == err_seq) name = c.name;
  }
  const int code = ctl->err_code;
  const bool p2p = std::strncmp(name, "send", 4) == 0 || std::strcmp(name, "recv") == 0;
  const char* what = code == dev::kDevBadTag && p2p
                         ? "a message of another send (or of a collective): a receive needs a send of the same count "
                           "and dtype from its peer, and a pair of ranks the same sends and receives in the same order"
                     : code == dev::kDevBadTag ? "a message of another call: every rank must make the same calls "
                                               "(collective, count, dtype, op, root) in the same order"
                     : code == dev::kDevBadSize ? "a message of another size: the ranks called it with different "
                                                  "counts or dtypes"
                     : code == dev::kDevNoChannel ? "a step toward a rank this GPU has no FIFO with"
                                                  : "an abort";
  return error(code == dev::kDevAborted ? ACCORD_ERR_ABORTED : ACCORD_ERR_MISMATCH,
               "rank %d: %s (seq %llu) on GPU %d, step %lld, peer rank %d: the kernel met %s (expected %llu, got "
               "%llu)%s",
               rank_, name, static_cast<unsigned long long>(err_seq), device_, static_cast<long long>(ctl->err_step),
               ctl->err_peer, what, static_cast<unsigned long long>(ctl->err_want),
               static_cast<unsigned long long>(ctl->err_got),
               p2p ? "" : "; run with ACCORD_CHECK=1 to name the difference");
}

void DeviceEngine::adopt_kernel_error() {
  Status s = kernel_error();
  if (!s.ok()) comm_.set_sticky(s);
}

uint64_t DeviceEngine::device_done() const {
  const auto* ctl = static_cast<const dev::DevCtl*>(ctl_host_);
  return ctl != nullptr ? __atomic_load_n(&ctl->done, __ATOMIC_ACQUIRE) : 0;
}

void DeviceEngine::watchdog_loop() {
  auto* ctl = static_cast<dev::DevCtl*>(ctl_host_);
  uint64_t started_seen = 0;
  Deadline deadline = Deadline::after_ms(settings_.timeout_ms);
  for (;;) {
    InFlight call;
    {
      std::unique_lock<std::mutex> lock(watch_mu_);
      const uint64_t done = __atomic_load_n(&ctl->done, __ATOMIC_ACQUIRE);
      while (!inflight_.empty() && inflight_.front().seq <= done) inflight_.pop_front();
      if (inflight_.empty()) {
        watch_cv_.wait(lock, [&] { return watch_stop_ || !inflight_.empty(); });
        if (watch_stop_) return;
        continue;
      }
      if (watch_stop_) return;
      call = inflight_.front();
    }
    Status failure = kernel_error();
    if (failure.ok()) {
      const uint64_t started = __atomic_load_n(&ctl->started, __ATOMIC_ACQUIRE);
      if (started != started_seen) {  // a new kernel runs: its own deadline
        started_seen = started;
        deadline = Deadline::after_ms(settings_.timeout_ms);
      }
      WaitContext ctx;
      ctx.abort_flag = &abort_;
      ctx.self_rank = rank_;
      ctx.peer_rank = __atomic_load_n(&ctl->waiting_peer, __ATOMIC_ACQUIRE);
      ctx.peer_pidfd = -1;
      ctx.pidfds = links_.pidfd.data();
      ctx.nranks = nranks_;
      ctx.death_notes = links_.death_notes;
      ctx.departures = links_.departures;
      ctx.seq_clock = SeqClock::kDevice;
      ctx.operation = call.name;
      ctx.seq = call.seq;
      ctx.deadline = started >= call.seq ? deadline : Deadline::after_ms(settings_.timeout_ms);
      failure = check_wait(ctx, "its part of the collective on the GPU");
      if (failure.ok() && ctx.peer_rank >= 0) failure = pump_failure(ctx.peer_rank);
    }
    if (!failure.ok()) {
      // The error first, then the abort: a caller whose stream passes the aborted kernel finds
      // the error already there.
      comm_.set_sticky(failure);
      __atomic_store_n(&ctl->abort, 1u, __ATOMIC_RELEASE);
      release_waits();  // Note [Waiting protocol]: no stream waits on
    }
    std::unique_lock<std::mutex> lock(watch_mu_);
    watch_cv_.wait_for(lock, std::chrono::milliseconds(1), [&] { return watch_stop_; });
    if (watch_stop_) return;
  }
}

}  // namespace accord
