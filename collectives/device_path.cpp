// The device path of a communicator: which GPU it runs on, the memory space of each call,
// the per-pair device transport, and NCCL-style asynchronous collectives on the caller's stream.
//
// Note [Stream gate]: a collective on device buffers returns once enqueued. The call records
// an event on the caller's stream (its inputs are ready when the event completes), makes the
// caller's stream wait until this communicator's `done` counter reaches the call's ticket
// (DeviceRuntime::stream_wait_flag), and hands the call to the communicator's worker thread.
// The worker waits for the event, runs the schedule with a DeviceMover (every copy and
// reduction a kernel on the internal stream, synchronized before the slot is posted or
// released), and then, whatever happened, stores the ticket: the caller's stream goes on. A
// failure becomes the communicator's sticky error (accord_comm_get_async_error). The worker
// never needs a host callback to make progress, so several communicators of one process
// cannot deadlock on CUDA's single callback thread by waiting for each other.
//
// Transports (Communicator::device_route): GPU pairs on one host that can peer use device
// FIFOs (Note [Device FIFOs]): "p2p" within one process, "ipc" across processes. The others
// are host-staged: the shared-memory FIFO slots are registered with the device runtime
// (register_host), and the kernels of both GPUs read and write them in place. Pairs on
// different hosts use TCP, through the same kind of slots.
#include "accord_config.h"

#include <dlfcn.h>

#include <algorithm>
#include <mutex>

#include "collectives/communicator.hpp"
#include "core/crypto.hpp"
#include "core/log.hpp"
#include "topology/search.hpp"
#include "topology/system.hpp"
#include "transport/device/sim_runtime.hpp"

namespace accord {
namespace {

// Runs copies and reductions as kernels on the communicator's internal stream and waits for
// each, so that the executor's post/release follows the data.
class DeviceMover final : public DataMover {
 public:
  DeviceMover(DeviceRuntime* rt, Stream stream) : rt_(rt), stream_(stream) {}
  void set_call(accord_datatype_t dtype, accord_red_op_t op) override {
    dtype_ = dtype;
    op_ = op;
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    kernels::ReduceArgs k;
    k.dst0 = dst;
    k.a = src;
    k.count = bytes;
    ACCORD_TRY(rt_->reduce_async(k, ACCORD_UINT8, ACCORD_SUM, stream_));
    return rt_->synchronize_stream(stream_);
  }
  Status reduce(const kernels::ReduceArgs& args) override {
    ACCORD_TRY(rt_->reduce_async(args, dtype_, op_, stream_));
    return rt_->synchronize_stream(stream_);
  }

 private:
  DeviceRuntime* rt_;
  Stream stream_;
  accord_datatype_t dtype_ = ACCORD_UINT8;
  accord_red_op_t op_ = ACCORD_SUM;
};

}  // namespace

Status Communicator::setup_device(int requested) {
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
  mover_ = std::make_unique<DeviceMover>(rt_, stream_);
  done_ = rt_->new_flag();
  ACCORD_TRY(register_slots());
  LOG_INFO(kGpu, "rank %d: GPU %d of %s", rank_, d, rt_->description().c_str());
  return Status::success();
}

Status Communicator::register_slots() {
  if (shm_ == nullptr) return Status::success();
  for (const ShmTransport::Mapping& m : shm_->mappings()) {
    ACCORD_TRY(
        rt_->register_host(m.addr, m.bytes)
            .prefix(format("rank %d: pinning shared-memory slots for GPU %d: ", rank_, device_)));
    registered_.push_back(m.addr);
  }
  return Status::success();
}

void Communicator::release_device() {
  if (rt_ == nullptr) return;
  if (stream_.id != 0) (void)rt_->destroy_stream(stream_);
  (void)rt_->free_device(dev_scratch_);
  for (void* p : old_scratch_) (void)rt_->free_device(p);
  for (void* p : ipc_opened_) (void)rt_->ipc_close_handle(p);
  for (void* p : dev_fifo_mem_) (void)rt_->free_device(p);
  for (void* p : registered_) (void)rt_->unregister_host(p);
  registered_.clear();
}

// Note [Ring order]: the all-reduce ring and the broadcast/reduce chains of a job on GPUs run
// in the order of the topology's best ring over the ranks' GPUs (topo::best_ring: highest
// bottleneck, then fewest hops at it), so the slow hops (pairs that cannot peer, SYS paths)
// are used as few times as possible. The schedule is built for ring positions and its peers
// are mapped to the ranks at those positions; outputs do not depend on the order. Every rank
// computes the same order from the same inputs. Reduce-scatter and all-gather keep rank order
// (their output layout is by rank). Only with the simulated runtime for now (the System is
// its own); with CUDA the order stays by rank until the detected topology is wired in.
void Communicator::compute_ring() {
  ring_.clear();
  pos_of_.clear();
  auto* sim = dynamic_cast<const SimulatedRuntime*>(rt_);
  if (device_ < 0 || sim == nullptr || nhosts_ != 1 || nranks_ < 3) return;
  for (int d : device_of_)
    if (d < 0) return;
  const topo::System& sys = sim->system();
  const int n = nranks_;
  std::vector<double> bw(static_cast<size_t>(n * n), 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      const int di = device_of_[static_cast<size_t>(i)], dj = device_of_[static_cast<size_t>(j)];
      if (i != j) bw[static_cast<size_t>(i * n + j)] = di == dj ? 1e6 : sys.bandwidth_gbs(di, dj);
    }
  std::vector<int> ring = topo::best_ring(bw, n);
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

Communicator::DeviceRoute Communicator::device_route(int a, int b, std::string* why) const {
  const int da = device_of_[static_cast<size_t>(a)], db = device_of_[static_cast<size_t>(b)];
  if (da == db) {
    *why = format("GPU %d shared by both ranks, staged through shared memory", da);
    return DeviceRoute::kHostStaged;
  }
  if (settings_.p2p_disable) {
    *why = format("GPU %d and GPU %d: ACCORD_P2P_DISABLE=1", da, db);
    return DeviceRoute::kHostStaged;
  }
  std::string over;  // " over path NV2", when the topology names the path
  if (auto* sim = dynamic_cast<const SimulatedRuntime*>(rt_)) {
    const topo::System& sys = sim->system();
    const std::string path =
        sys.path(da, db) == topo::PathClass::kUnknown
            ? std::string("an unknown path")
            : "path " + topo::path_class_name(sys.path(da, db), sys.pair(da, db).nvlinks);
    if (sys.path(da, db) != topo::PathClass::kUnknown) over = " over " + path;
    if (!(sys.p2p(da, db) && sys.p2p(db, da))) {
      const std::string& reason =
          sys.p2p_reason(da, db).empty() ? sys.p2p_reason(db, da) : sys.p2p_reason(da, db);
      *why = format("GPU %d and GPU %d cannot peer: %s", da, db,
                    reason.empty() ? path.c_str() : reason.c_str());
      return DeviceRoute::kHostStaged;
    }
  } else {
    bool ab = false, ba = false;
    (void)rt_->can_access_peer(da, db, &ab);
    (void)rt_->can_access_peer(db, da, &ba);
    if (!(ab && ba)) {
      *why = format("GPU %d and GPU %d cannot peer: the driver says no (cudaDeviceCanAccessPeer)",
                    da, db);
      return DeviceRoute::kHostStaged;
    }
  }
  const long pa = pid_of_[static_cast<size_t>(a)], pb = pid_of_[static_cast<size_t>(b)];
  if (pa == pb) {
    *why = format("GPU %d and GPU %d peer%s, one process: kernels write into the receiver's "
                  "GPU memory",
                  da, db, over.c_str());
    return DeviceRoute::kP2p;
  }
  *why = format("GPU %d and GPU %d peer%s, processes %ld and %ld: GPU memory mapped through "
                "IPC handles exchanged at init",
                da, db, over.c_str(), pa, pb);
  return DeviceRoute::kIpc;
}

std::string Communicator::device_pair(int a, int b) const {
  std::string why;
  const DeviceRoute route = device_route(a, b, &why);
  const char* name = route == DeviceRoute::kP2p ? "p2p" : route == DeviceRoute::kIpc ? "ipc" : "host-staged";
  return format("%s (%s)", name, why.c_str());
}

// Note [Device FIFOs] (transport/shm/fifo.hpp): for every local peer whose GPU peers with
// ours, this rank allocates the slot data of the FIFO from that peer in its own GPU memory and
// publishes it (a pointer within one process, an IPC handle across processes); it opens the
// peer's in turn and builds both channels over the control areas the shared-memory segments
// reserve. Every rank decides each pair's route from the same inputs (device_route), so both
// ends of a pair agree without another round. dev_links_ is links_ with these channels in
// place; host calls keep links_ and the host FIFOs.
Status Communicator::connect_device_fifos(StoreClient* store, Deadline deadline) {
  if (device_ < 0 || shm_ == nullptr) return Status::success();
  std::vector<std::pair<int, DeviceRoute>> direct;
  for (int peer : local_ranks_) {
    std::string why;
    if (peer == rank_ || device_of_[static_cast<size_t>(peer)] < 0) continue;
    const DeviceRoute route = device_route(rank_, peer, &why);
    if (route != DeviceRoute::kHostStaged) direct.emplace_back(peer, route);
  }
  if (direct.empty()) return Status::success();
  dev_links_ = links_;
  const size_t data_bytes = shape_.data_bytes();
  for (const auto& [peer, route] : direct) {
    const int pd = device_of_[static_cast<size_t>(peer)];
    void* mem = nullptr;
    ACCORD_TRY(rt_->alloc_device(device_, data_bytes, &mem)
                   .prefix(format("rank %d: device FIFO from rank %d (GPU %d) to GPU %d: ", rank_,
                                  peer, pd, device_)));
    dev_fifo_mem_.push_back(mem);
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
    dev_receivers_.push_back(std::make_unique<FifoReceiver>(
        shm_->device_ctrl_recv(peer), shape_, &policy_, static_cast<uint8_t*>(mem)));
    dev_links_.recv[static_cast<size_t>(peer)] = dev_receivers_.back().get();
  }
  for (const auto& [peer, route] : direct) {
    const int pd = device_of_[static_cast<size_t>(peer)];
    const std::string where = format("rank %d (GPU %d) to rank %d (GPU %d)", rank_, device_, peer, pd);
    std::string value;
    ACCORD_TRY(store->get(format("dfifo/%d/%d", rank_, peer), &value, deadline,
                          format("rank %d", peer)));
    void* data = nullptr;
    if (route == DeviceRoute::kP2p) {
      uintptr_t at = 0;
      if (!from_hex(value, &at, sizeof at))
        return error(ACCORD_ERR_INTERNAL, "device FIFO %s: rank %d published a malformed pointer",
                     where.c_str(), peer);
      ACCORD_TRY(rt_->enable_peer(device_, pd).prefix(format(
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
    dev_senders_.push_back(std::make_unique<FifoSender>(shm_->device_ctrl_send(peer), shape_, &policy_,
                                                        static_cast<uint8_t*>(data),
                                                        route == DeviceRoute::kP2p ? "p2p" : "ipc"));
    dev_links_.send[static_cast<size_t>(peer)] = dev_senders_.back().get();
  }
  // A rank may not free its slots (destroy, exit) while a peer still has to open them: wait
  // until every direct peer has opened ours (as the shm segments' "mapped" round).
  ACCORD_TRY(store->set(format("dfifo_opened/%d", rank_), "1"));
  for (const auto& [peer, route] : direct) {
    std::string unused;
    ACCORD_TRY(store->get(format("dfifo_opened/%d", peer), &unused, deadline, format("rank %d", peer)));
  }
  LOG_INFO(kGpu, "rank %d: device FIFOs with %zu peer%s (%zu slots x %zu KiB of GPU %d memory each)",
           rank_, direct.size(), direct.size() == 1 ? "" : "s", shape_.nslots, shape_.slot_bytes >> 10, device_);
  return Status::success();
}

// A host-only communicator in a process with GPUs: a device buffer would be read by the host
// path (a crash on real GPUs), so it is refused with what to do instead.
Status Communicator::refuse_device_buffers(const CollArgs& a) const {
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

Status Communicator::classify_buffers(const CollArgs& a, bool* on_device) const {
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

Status Communicator::enqueue_device(const CollArgs& a, void* user_stream) {
  RankScope scope(rank_, nranks_);
  const char* name = collective_name(a.coll);
  const accord_status_t sticky = sticky_code_.load(std::memory_order_acquire);
  if (sticky != ACCORD_SUCCESS)
    return error(
        sticky,
        "rank %d: %s refused: this communicator failed earlier (accord_comm_get_async_error gives "
        "the code, accord_last_error the message); destroy it and create a new one",
        rank_, name);
  size_t in_bytes = 0, out_bytes = 0;
  ACCORD_TRY(check_args(a, &in_bytes, &out_bytes));
  if (user_stream == nullptr)
    return error(ACCORD_ERR_INVALID_ARGUMENT,
                 "rank %d: %s: device buffers need a stream of GPU %d (a cudaStream_t, "
                 "or accord_stream_create)",
                 rank_, name, device_);
  Stream us;
  auto it = user_streams_.find(user_stream);
  if (it != user_streams_.end()) {
    us = it->second;
  } else {
    ACCORD_TRY(rt_->wrap_user_stream(device_, user_stream, &us)
                   .prefix(format("rank %d: %s: ", rank_, name)));
    user_streams_.emplace(user_stream, us);
  }
  Event ready;
  ACCORD_TRY(rt_->create_event(device_, &ready));
  Status s = rt_->record_event(ready, us);
  const uint64_t ticket = issued_ + 1;
  if (s.ok()) s = rt_->stream_wait_flag(us, done_, ticket);
  if (!s.ok()) {
    (void)rt_->destroy_event(ready);
    return s.prefix(format("rank %d: %s: ", rank_, name));
  }
  issued_ = ticket;
  post_job([this, a, ready, ticket] {
    Status st = rt_->synchronize_event(ready);
    (void)rt_->destroy_event(ready);
    if (st.ok()) {
      st = run_on(a, true);  // records its own failures as sticky
    } else if (sticky_code_.load() == ACCORD_SUCCESS) {
      sticky_ = st;
      sticky_code_.store(st.code(), std::memory_order_release);
    }
    done_->store(ticket, std::memory_order_release);
  });
  return Status::success();
}

}  // namespace accord
