// The communicator's side of the direct protocol (Note [Direct protocol], direct_call.hpp):
// whether the job uses it, and the direct part of a collective's launch.
#include <algorithm>
#include <string>

#include "collectives/communicator.hpp"
#include "collectives/device/direct.hpp"
#include "core/log.hpp"

namespace accord {

// Note [Direct or FIFO]: a job uses the direct protocol only where every pair of its ranks can
// load and store the other's GPU memory (one GPU, or GPUs that peer: device_route p2p or ipc),
// all ranks on one host with a GPU each; a job on one host with a host-staged pair stages its
// all-reduces through host memory instead (Note [Staged protocol], direct_staged.cpp) and
// keeps the FIFOs for the rest; ranks on other hosts keep the FIFO schedule for every call. Every rank decides from the same inputs
// (device_of_, pid_of_, the topology, ACCORD_DEVICE_PROTO, which init compares across ranks),
// so every rank makes the same choice without another round; and each call's choice depends
// only on the call (direct.cpp, DirectEngine::choose), so the ranks agree on it too.
Status Communicator::setup_direct(StoreClient* store, Deadline deadline) {
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
  // pair (or ACCORD_DEVICE_PROTO=staged) stages its all-reduces through the ranks' staging
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
    direct_plan_ = format("device protocol: fifo for every collective (%s)\n", why_not.c_str());
    if (mode == dev::ProtoMode::kDirect || mode == dev::ProtoMode::kOneShot || mode == dev::ProtoMode::kTwoShot ||
        mode == dev::ProtoMode::kStaged) {
      if (rank_ == 0)
        LOG_WARN(kGpu, "rank 0: ACCORD_DEVICE_PROTO=%s, but the job cannot use the direct protocol: %s; every "
                 "collective uses the FIFOs", settings_.device_proto.c_str(), why_not.c_str());
    }
    LOG_INFO(kGpu, "rank %d: %s", rank_, direct_plan_.substr(0, direct_plan_.size() - 1).c_str());
    return Status::success();
  }
  return setup_engine(store, deadline, mode, {}, "");
}

// The direct engine, or with `staging` (every rank's area) its staged form, and the plan's lines.
Status Communicator::setup_engine(StoreClient* store, Deadline deadline, dev::ProtoMode mode,
                                  const std::vector<uint8_t*>& staging, const std::string& staged_why) {
  dev::DirectSetup s;
  s.rt = rt_;
  s.device = device_;
  s.rank = rank_;
  s.nranks = nranks_;
  s.stream = stream_;
  s.ipc.assign(static_cast<size_t>(nranks_), false);
  for (int r = 0; r < nranks_; ++r)
    s.ipc[static_cast<size_t>(r)] = pid_of_[static_cast<size_t>(r)] != pid_of_[static_cast<size_t>(rank_)];
  s.scratch_bytes = settings_.direct_scratch_bytes > 0 ? static_cast<size_t>(settings_.direct_scratch_bytes)
                                                       : dev::kDefaultDirectScratchBytes;
  s.mode = mode;
  s.store = store;
  s.deadline = deadline;
  s.staged = !staging.empty();
  if (s.staged) {
    s.staged_why = staged_why;
    s.staging = staging;
    s.staged_bytes = settings_.staged_bytes > 0 ? static_cast<size_t>(settings_.staged_bytes) : dev::kDefaultStagedBytes;
    s.hold = fifo_hold_;
  }
  ACCORD_TRY(choose_gpu_sync(store, deadline, &s.wait, &s.sync_why));  // Note [Shared GPU sync]
  ACCORD_TRY(dev::DirectEngine::create(s, &direct_));
  direct_plan_ = direct_->describe();
  // (one line of the plan each, so the log below prints both)
  direct_plan_ += s.staged ? std::string("GPU hand-offs: staged: all_reduce's kernels never wait on a peer, the "
                                         "stream copies and waits between them; the FIFO kernels poll\n")
                           : format("GPU hand-offs: %s (%s)\n",
                                    s.wait ? "wait: kernels never wait on a peer, the stream waits between them"
                                           : "spin: the kernel polls its peers' flags",
                                    s.sync_why.c_str());
  for (size_t at = 0, nl; (nl = direct_plan_.find('\n', at)) != std::string::npos; at = nl + 1)
    LOG_INFO(kGpu, "rank %d: %s", rank_, direct_plan_.substr(at, nl - at).c_str());
  return Status::success();
}

bool Communicator::prepare_direct(const CollArgs& a, size_t elem_bytes, dev::DevLaunch* launch) {
  if (direct_ == nullptr) return false;
  const size_t bytes = a.count * elem_bytes;
  std::string why;
  const uint32_t proto = direct_->choose(a.coll, bytes, &why);
  direct_->log_choice(a.coll, bytes, proto, why);
  if (proto == dev::kProtoFifo) return false;
  direct_->prepare(a.coll, a.root, proto, a.count, elem_bytes, max_blocks_, &launch->direct, &launch->call.nblocks);
  launch->call.nsteps = 0;
  launch->call.steps = nullptr;
  return true;
}

}  // namespace accord
