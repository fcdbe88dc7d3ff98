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
// Transports: today every GPU pair on one host is host-staged: the shared-memory FIFO slots
// are registered with the device runtime (register_host), and the kernels of both GPUs read
// and write them in place. Pairs on different hosts use TCP, through the same kind of slots.
#include <algorithm>
#include <deque>
#include <mutex>

#include "collectives/communicator.hpp"
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

// A communicator's completion flag outlives it: a caller's stream may still hold a wait on it
// (stream_wait_flag) when the communicator is destroyed. The flags therefore live in one
// process-wide list that is never freed (8 bytes per GPU communicator ever created); they stay
// reachable, and their addresses never move (std::deque keeps elements in place).
std::atomic<uint64_t>* new_done_flag() {
  static std::mutex mutex;
  static auto* flags = new std::deque<std::atomic<uint64_t>>();
  std::lock_guard<std::mutex> lock(mutex);
  return &flags->emplace_back(0);
}

}  // namespace

Status Communicator::setup_device(int requested) {
  device_of_.assign(static_cast<size_t>(nranks_), -1);
  const bool wanted = requested >= 0 || settings_.device >= 0 || !settings_.sim_topo.empty();
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
                                  : local_rank % count;
  if (d >= count)
    return error(ACCORD_ERR_INVALID_ARGUMENT,
                 "rank %d: GPU %d does not exist: the %s runtime has %d GPUs (0..%d)", rank_, d,
                 rt_->kind(), count, count - 1);
  ACCORD_TRY(rt_->create_stream(d, &stream_).prefix(format("rank %d: ", rank_)));
  device_ = d;
  device_of_[static_cast<size_t>(rank_)] = d;
  mover_ = std::make_unique<DeviceMover>(rt_, stream_);
  done_ = new_done_flag();
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

std::string Communicator::device_pair(int a, int b) const {
  const int da = device_of_[static_cast<size_t>(a)], db = device_of_[static_cast<size_t>(b)];
  if (da == db)
    return format("host-staged (GPU %d shared by both ranks, staged through shared memory)", da);
  if (settings_.p2p_disable)
    return format("host-staged (GPU %d and GPU %d: ACCORD_P2P_DISABLE=1)", da, db);
  std::string path;
  bool peer = false;
  if (auto* sim = dynamic_cast<const SimulatedRuntime*>(rt_)) {
    const topo::System& sys = sim->system();
    peer = sys.p2p(da, db) && sys.p2p(db, da);
    path = sys.path(da, db) == topo::PathClass::kUnknown
               ? std::string("an unknown path")
               : "path " + topo::path_class_name(sys.path(da, db), sys.pair(da, db).nvlinks);
    const std::string& reason =
        sys.p2p_reason(da, db).empty() ? sys.p2p_reason(db, da) : sys.p2p_reason(da, db);
    if (!peer)
      return format("host-staged (GPU %d and GPU %d cannot peer: %s)", da, db,
                    reason.empty() ? path.c_str() : reason.c_str());
  } else {
    bool ab = false, ba = false;
    (void)rt_->can_access_peer(da, db, &ab);
    (void)rt_->can_access_peer(db, da, &ba);
    peer = ab && ba;
    if (!peer)
      return format("host-staged (GPU %d and GPU %d cannot peer: the driver says no)", da, db);
    path = "peer-capable";
  }
  return format(
      "host-staged (GPU %d and GPU %d could peer over %s; the p2p/ipc device FIFOs are not built "
      "yet, "
      "so the pair stages through pinned shared memory)",
      da, db, path.c_str());
}

Status Communicator::classify(const CollArgs& a, bool* on_device) const {
  *on_device = false;
  if (rt_ == nullptr || a.count == 0 || a.coll == Collective::kBarrier) return Status::success();
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
