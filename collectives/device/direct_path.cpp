// The communicator's side of the direct protocol (Note [Direct protocol], direct_call.hpp):
// whether the job uses it, and the direct part of a collective's launch.
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "collectives/communicator.hpp"
#include "collectives/device/direct.hpp"
#include "collectives/device/direct_call.hpp"
#include "core/log.hpp"

namespace accord {

// The plan's "GPU hand-offs" line (Note [Shared GPU sync]): `covered`, the kernels a wait
// covers; `why`, the choice's reason.
static std::string hand_offs_line(bool wait, const char* covered, const std::string& why) {
  return format("GPU hand-offs: %s (%s)\n",
                wait ? format("wait: kernels never wait on a peer, the stream waits between them (%s)", covered).c_str()
                     : "spin: the kernel polls its peers' flags",
                why.c_str());
}

// Each line of the plan's `text` into the log, at info.
static void log_plan(int rank, const std::string& text) {
  for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
    LOG_INFO(kGpu, "rank %d: %s", rank, text.substr(at, nl - at).c_str());
}

// Note [Direct or FIFO]: a job uses the direct protocol only where every pair of its ranks can
// load and store the other's GPU memory (one GPU, or GPUs that peer: device_route p2p or ipc),
// all ranks on one host with a GPU each; a job on one host with a host-staged pair stages its
// collectives through host memory instead (Note [Staged protocol], direct_staged.cpp) and
// keeps the FIFOs for sends and receives; ranks on other hosts keep the FIFO schedule for
// every call. Every rank decides from the same inputs
// (device_of_, pid_of_, the topology, ACCORD_DEVICE_PROTO, which init compares across ranks),
// so every rank makes the same choice without another round; and each call's choice depends
// only on the call (direct.cpp, DirectEngine::choose), so the ranks agree on it too.
Status DeviceEngine::setup_direct(StoreClient* store, Deadline deadline) {
  direct_plan_.clear();
  dev::ProtoMode mode = dev::ProtoMode::kAuto;
  (void)dev::parse_proto_mode(settings_.device_proto, &mode);  // checked in configure()
  std::string why_not;
  if (nranks_ < 2 || device_of_.size() != static_cast<size_t>(nranks_)) return Status::success();
  if (std::any_of(device_of_.begin(), device_of_.end(), [](int d) { return d < 0; }))
    return Status::success();  // some rank has no GPU: no device path at all
  if (mode == dev::ProtoMode::kFifo) why_not = "ACCORD_DEVICE_PROTO=fifo";
  if (why_not.empty() && static_cast<int>(local_ranks_.size()) != nranks_)
    why_not = "some ranks are on another host or /dev/shm";
  for (int a = 0; a < nranks_ && why_not.empty(); ++a)
    for (int b = a + 1; b < nranks_ && why_not.empty(); ++b) {
      std::string why;
      if (device_route(a, b, &why) == DeviceRoute::kHostStaged)
        why_not = format("pair %d-%d is host-staged (%s)", a, b, why.c_str());
    }
  // Note [Staged protocol] (device/direct_staged.cpp): a job on one host with a host-staged
  // pair (or ACCORD_DEVICE_PROTO=staged) stages its collectives through the ranks' staging
  // areas, which every segment has when the job may use GPUs.
  const bool on_one_host = mode != dev::ProtoMode::kFifo && static_cast<int>(local_ranks_.size()) == nranks_;
  const bool want_staged = on_one_host && (mode == dev::ProtoMode::kStaged ||
                                           (mode == dev::ProtoMode::kAuto && !why_not.empty()));
  std::vector<uint8_t*> staging;
  for (int r = 0; want_staged && shm_ != nullptr && r < nranks_; ++r)
    if (shm_->staging(r) != nullptr) staging.push_back(shm_->staging(r));
  if (want_staged && static_cast<int>(staging.size()) == nranks_ && nranks_ <= dev::kStagedMaxRanks)
    return setup_engine(store, deadline, mode, staging,
                        why_not.empty() ? std::string("ACCORD_DEVICE_PROTO=staged") : why_not);
  if (want_staged && why_not.empty())
    why_not = format("ACCORD_DEVICE_PROTO=staged, but %s",
                     nranks_ > dev::kStagedMaxRanks ? "the staged protocol takes at most 64 ranks"
                                                    : "some rank has no staging area in shared memory");
  if (!why_not.empty()) {
    // Note [Waiting FIFOs] (fifo_wait.cpp): the FIFO kernels hand off through the stream where
    // a GPU of the job is time-sliced (or ACCORD_SHARED_GPU_SYNC=wait).
    bool wait = false;
    std::string sync_why;
    ACCORD_TRY(choose_gpu_sync(store, deadline, &wait, &sync_why));
    ACCORD_TRY(hand_offs(wait));
    direct_plan_ = format("device protocol: fifo for every collective (%s)\n", why_not.c_str());
    direct_plan_ += hand_offs_line(wait, "a kernel per FIFO hand-off: collectives, sends and receives", sync_why);
    if (mode == dev::ProtoMode::kDirect || mode == dev::ProtoMode::kOneShot || mode == dev::ProtoMode::kTwoShot ||
        mode == dev::ProtoMode::kStaged) {
      if (rank_ == 0)
        LOG_WARN(kGpu, "rank 0: ACCORD_DEVICE_PROTO=%s, but the job cannot use the %s protocol: %s; every "
                 "collective uses the FIFOs", settings_.device_proto.c_str(),
                 mode == dev::ProtoMode::kStaged ? "staged" : "direct", why_not.c_str());
    }
    log_plan(rank_, direct_plan_);
    return Status::success();
  }
  return setup_engine(store, deadline, mode, {}, "");
}

// Note [Waiting FIFOs]: whether the job's FIFO kernels hand off through the stream, and the
// stream that ends those waits when a peer never comes.
Status DeviceEngine::hand_offs(bool wait) {
  hand_offs_wait_ = wait;
  if (!wait || rescue_.id != 0) return Status::success();
  return rt_->create_stream(device_, &rescue_).prefix(format("rank %d: the stream that ends FIFO waits: ", rank_));
}

// The direct engine, or with `staging` (every rank's area) its staged form, and the plan's lines.
Status DeviceEngine::setup_engine(StoreClient* store, Deadline deadline, dev::ProtoMode mode,
                                  const std::vector<uint8_t*>& staging, const std::string& staged_why) {
  dev::DirectSetup s;
  s.rt = rt_;
  s.device = device_;
  s.rank = rank_;
  s.nranks = nranks_;
  s.stream = stream_;
  s.ipc.assign(static_cast<size_t>(nranks_), false);
  for (int r = 0; r < nranks_; ++r) {
    s.ipc[static_cast<size_t>(r)] = pid_of_[static_cast<size_t>(r)] != pid_of_[static_cast<size_t>(rank_)];
    s.one_gpu = s.one_gpu && same_gpu(rank_, r);
  }
  s.scratch_bytes = settings_.direct_scratch_bytes > 0 ? static_cast<size_t>(settings_.direct_scratch_bytes)
                                                       : dev::kDefaultDirectScratchBytes;
  s.mode = mode;
  s.store = store;
  s.deadline = deadline;
  s.staged = !staging.empty();
  if (s.staged) {
    s.staged_why = staged_why;
    s.staging = staging;
    s.staged_bytes = dev::staged_bytes(settings_.staged_bytes);
    s.hold = fifo_hold_;
  }
  ACCORD_TRY(choose_gpu_sync(store, deadline, &s.wait, &s.sync_why));  // Note [Shared GPU sync]
  ACCORD_TRY(dev::DirectEngine::create(s, &direct_));
  ACCORD_TRY(hand_offs(s.wait || s.staged));  // Note [Waiting FIFOs]: sends and receives too
  direct_plan_ = direct_->describe();
  // (one line of the plan each, so the log below prints both)
  direct_plan_ += s.staged ? std::string("GPU hand-offs: staged: the collectives' kernels never wait on a peer, the "
                                         "stream copies and waits between them; sends and receives on the FIFOs wait "
                                         "at stream level too\n")
                           : hand_offs_line(s.wait, "collectives, and sends and receives on the FIFOs", s.sync_why);
  log_plan(rank_, direct_plan_);
  // Note [User buffers mapped into peers]: the plan's line, with nothing registered yet.
  const std::string users = user_buffers()->describe();
  LOG_INFO(kGpu, "rank %d: %s", rank_, users.substr(0, users.size() - 1).c_str());
  return Status::success();
}

// Note [Inputs read where they lie]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Ranks that are threads of one process on one GPU address each other's pointers, whatever
// allocated them, so a peer may read a rank's input where it lies with no registration: its
// descriptor (Note [Registered inputs], direct_call.hpp) names slot kDirectPointerSlot and the
// input's address. Every rank of such a job describes its inputs from the first call
// (DirectEngine::pointer_inputs: the same on every rank); each rank then chooses per call
// whether to describe its own, where that pays: every two-shot all-reduce (its flag 1 is
// already the end-of-round exchange, so the copy into the scratch is saved for nothing), and
// the one-shot all-reduce and the other collectives from ACCORD_DIRECT_POINTER_MIN_BYTES (4 MiB)
// of input, as they end the call with one exchange more. 4 MiB is arithmetic, not a
// measurement: the copy saved reads and writes the input (8 MiB, about 3 us at an H200's 3
// TB/s), an exchange costs a few microseconds; gpu-check's `threads` step (the default against
// =-1, with bench's --share-gpus) is the A/B to set it.
// Threads on GPUs that peer keep the scratch: peer access covers cudaMalloc's memory, but memory
// of cuMemCreate (PyTorch's expandable segments) is readable from another GPU only where its
// owner granted it (cuMemSetAccess), which a pointer does not say. Processes need a
// registration (Note [User buffers mapped into peers]): a buffer mapped into the peers without
// one would stay mapped after the user frees it (CUDA's IPC gives the owner no say over the
// peers' mappings, and the simulation makes such a free an error: Note [Simulated IPC
// importers]), so there is no cache of unregistered buffers between processes.

// Note [Registered inputs] (direct_call.hpp): whether this rank's input of call `a` may be read
// by the peers where it lies: a spinning direct job that describes inputs (launch.user), the
// input used at all (a broadcast's only at its root), not a pre-multiplied sum (its scaling
// is done as A copies the input into the scratch). An all-reduce in place only two-shot
// (one-shot's output would overwrite the input while the peers read it); a reduce-scatter or
// reduce whose output is its input only where this rank's own input is folded in the first
// pass (Note [Folding in one pass]: later passes read the output back).
bool DeviceEngine::reads_input_in_place(const CollArgs& a, uint32_t proto, size_t bytes,
                                        const dev::DevDirect& launch) const {
  if (launch.user == nullptr || direct_->staged() || bytes == 0 || a.send == nullptr) return false;
  const bool reduces = a.coll != Collective::kAllGather && a.coll != Collective::kBroadcast;
  if (reduces && a.op >= ACCORD_NUM_OPS) return false;
  const auto* in = static_cast<const uint8_t*>(a.send);
  const auto* out = static_cast<const uint8_t*>(a.recv);
  switch (a.coll) {
    case Collective::kAllReduce:
      return proto == dev::kProtoTwoShot || (proto == dev::kProtoOneShot && a.send != a.recv);
    case Collective::kBroadcast:
      return a.root == rank_;
    case Collective::kAllGather:  // in place, its own segment is not copied
      return true;
    case Collective::kReduceScatter:
    case Collective::kReduce: {
      const size_t in_bytes = a.coll == Collective::kReduceScatter ? bytes * static_cast<size_t>(nranks_) : bytes;
      const bool overlaps = out != nullptr && out < in + in_bytes && in < out + bytes &&
                            (a.coll == Collective::kReduceScatter || a.root == rank_);
      return !overlaps || rank_ < 2 + static_cast<int>(dev::kMoveMoreSources);
    }
    default:
      return false;
  }
}

bool DeviceEngine::prepare_direct(const CollArgs& a, size_t elem_bytes, dev::DevLaunch* launch) {
  if (direct_ == nullptr) return false;
  const size_t bytes = a.count * elem_bytes;
  std::string why;
  const uint32_t proto = direct_->choose(a.coll, bytes, &why);
  direct_->log_choice(a.coll, bytes, proto, why);
  if (proto == dev::kProtoFifo) return false;
  direct_->prepare(a.coll, a.root, proto, a.count, elem_bytes, max_blocks_, &launch->direct, &launch->call.nblocks);
  // Note [Registered inputs]: an input that lies in a buffer this rank registered is read by
  // the peers where it lies, and so (Note [Inputs read where they lie]) is any input of a job
  // whose ranks are threads of one process, where the form pays for it.
  int slot = -1;
  uint64_t offset = 0;
  if (reads_input_in_place(a, proto, bytes, launch->direct)) {
    const size_t in_bytes = a.coll == Collective::kReduceScatter ? bytes * static_cast<size_t>(nranks_) : bytes;
    if (users_ != nullptr && users_->find_mine(a.send, in_bytes, &slot, &offset)) {
      launch->direct.my_slot = slot;
      launch->direct.my_offset = offset;
    } else if (direct_->pointer_inputs() && settings_.direct_pointer_min_bytes >= 0 &&
               ((a.coll == Collective::kAllReduce && proto == dev::kProtoTwoShot) ||
                in_bytes >= static_cast<uint64_t>(settings_.direct_pointer_min_bytes))) {
      launch->direct.my_slot = dev::kDirectPointerSlot;
      launch->direct.my_offset = reinterpret_cast<uintptr_t>(a.send);
      ++pointer_calls_;
    }
  }
  launch->call.nsteps = 0;
  launch->call.steps = nullptr;
  return true;
}

// Note [User buffers mapped into peers] (device/user_buffers.cpp): the communicator's side.
dev::UserBuffers* DeviceEngine::user_buffers() {
  if (users_ != nullptr) return users_.get();
  std::vector<bool> ipc(static_cast<size_t>(nranks_), false);
  std::vector<std::string> owner(static_cast<size_t>(nranks_));
  for (int r = 0; r < nranks_; ++r) {
    const auto i = static_cast<size_t>(r);
    owner[i] = i < proc_of_.size() ? proc_of_[i] : i < pid_of_.size() ? std::to_string(pid_of_[i]) : "";
    // Only the direct protocol's jobs map peers' memory (every pair addresses the other's GPU);
    // a staged job's pairs may not (Note [Staged protocol]).
    ipc[i] = direct_ != nullptr && !direct_->staged() && r != rank_ && !same_process(rank_, r);
  }
  users_ = std::make_unique<dev::UserBuffers>(rt_, device_, rank_, std::move(ipc), std::move(owner));
  users_->set_direct_reads(direct_ != nullptr && !direct_->waiting() && !direct_->staged());
  return users_.get();
}

Status DeviceEngine::exchange_user_records(const dev::UserBufferRecord& mine, const char* what,
                                           std::vector<dev::UserBufferRecord>* all) {
  all->assign(static_cast<size_t>(nranks_), dev::UserBufferRecord{});
  CollArgs a{Collective::kAllGather, &mine, all->data(), sizeof mine, ACCORD_UINT8, ACCORD_SUM, 0};
  // Behind the device calls already queued on the worker, as any host call (api/accord.cpp).
  Status st = device_ >= 0 ? comm_.run_async({a}).get() : comm_.run(a);
  ACCORD_TRY(st.prefix(format("rank %d: %s (collective on Accord: every rank registers and deregisters at the same "
                              "point of its calls; Note [User buffers mapped into peers]): ",
                              rank_, what)));
  Status agreed = users_->check(*all, mine, what);
  // Ranks at different calls: the channels are out of step (a failed collective's state).
  if (agreed.code() == ACCORD_ERR_INVALID_USAGE) comm_.set_sticky(agreed);
  return agreed;
}

Status DeviceEngine::register_buffer(void* ptr, size_t bytes, uint64_t* handle) {
  *handle = 0;
  std::lock_guard<std::mutex> lock(users_mu_);
  dev::UserBuffers* u = user_buffers();
  const uint64_t seq = ++user_seq_;
  dev::UserBufferRecord me;
  Status mine = u->mine(ptr, bytes, seq, &me);
  std::vector<dev::UserBufferRecord> all(static_cast<size_t>(nranks_));
  if (u->exchanges()) {
    if (!mine.ok()) {  // the peers must not wait for this rank: they learn it failed
      me = u->closing(dev::UserBufferRecord::kFailed, seq, 0);
      (void)exchange_user_records(me, "registering a buffer", &all);
      return mine;
    }
    ACCORD_TRY(exchange_user_records(me, "registering a buffer", &all));
  } else {
    ACCORD_TRY(mine);
    all[static_cast<size_t>(rank_)] = me;
  }
  Status opened = u->open(all, handle);
  if (!opened.ok()) {  // the peers registered it: this rank's slots no longer match theirs
    if (u->exchanges()) comm_.set_sticky(opened);
    return opened;
  }
  std::vector<const uint8_t*> buffers;
  const int slot = u->slot_of(*handle, &buffers);
  if (direct_ != nullptr && slot >= 0) {  // Note [Registered inputs]: no kernel reads a free slot
    Status st = direct_->set_user_slot(slot, buffers, stream_);
    if (!st.ok()) {
      comm_.set_sticky(st);  // the peers count on this rank's table
      return st;
    }
  }
  const dev::UserBuffers::Counts c = u->counts();
  LOG_DEBUG(kGpu, "rank %d: registered %p (%zu bytes) as %llu: %zu registered, %zu peer allocations opened, %zu "
            "found open", rank_, ptr, bytes, static_cast<unsigned long long>(*handle), c.live, c.opened, c.reused);
  return Status::success();
}

Status DeviceEngine::deregister_buffer(uint64_t handle) {
  std::lock_guard<std::mutex> lock(users_mu_);
  if (users_ == nullptr || !users_->known(handle))
    return error(ACCORD_ERR_INVALID_ARGUMENT,
                 "rank %d: deregistering %llu: not a registration of this communicator (deregistered already?)", rank_,
                 static_cast<unsigned long long>(handle));
  if (!users_->exchanges()) return users_->close(handle);
  // Note [Registered inputs]: this rank's kernels may read the peers' buffers (and the peers'
  // its own): every rank waits for its own queued kernels before the first exchange, so after
  // it no kernel of any rank reads the buffers, and the slot is free.
  ACCORD_TRY(wait_for_kernels("deregistering a buffer"));
  std::vector<dev::UserBufferRecord> all;
  ACCORD_TRY(exchange_user_records(users_->closing(dev::UserBufferRecord::kDeregister, ++user_seq_, handle),
                                   "deregistering a buffer", &all));
  Status closed = users_->close(handle);
  // Every rank has closed its mappings when this returns: the owner may free its buffer.
  ACCORD_TRY(exchange_user_records(users_->closing(dev::UserBufferRecord::kClosed, ++user_seq_, handle),
                                   "deregistering a buffer", &all));
  return closed;
}

Status DeviceEngine::wait_for_kernels(const char* what) {
  auto* ctl = static_cast<dev::DevCtl*>(ctl_host_);
  if (ctl == nullptr || dev_seq_ == 0) return Status::success();
  const uint64_t want = dev_seq_;
  const Deadline deadline = Deadline::after_ms(settings_.timeout_ms);
  while (__atomic_load_n(&ctl->done, __ATOMIC_ACQUIRE) < want) {
    if (comm_.sticky_error() != ACCORD_SUCCESS) return comm_.sticky_status().prefix(format("rank %d: %s: ", rank_, what));
    if (abort_.load(std::memory_order_acquire))
      return error(ACCORD_ERR_ABORTED, "rank %d: %s: the communicator was aborted", rank_, what);
    if (deadline.expired())
      return error(ACCORD_ERR_TIMEOUT, "rank %d: %s: collective seq %llu has not ended after ACCORD_TIMEOUT_MS (%lld ms)",
                   rank_, what, static_cast<unsigned long long>(want), static_cast<long long>(settings_.timeout_ms));
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return Status::success();
}

}  // namespace accord
