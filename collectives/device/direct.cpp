// The direct protocol's host side (direct.hpp; Note [Direct protocol] in direct_call.hpp).
#include "collectives/device/direct.hpp"

#include <strings.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "collectives/device/direct_call.hpp"
#include "collectives/device/process_hold.hpp"
#include "core/crypto.hpp"
#include "core/log.hpp"

namespace accord::dev {

namespace {
struct ModeName {
  ProtoMode mode;
  const char* name;
};
constexpr ModeName kModes[] = {{ProtoMode::kAuto, "auto"},
                               {ProtoMode::kFifo, "fifo"},
                               {ProtoMode::kDirect, "direct"},
                               {ProtoMode::kOneShot, "oneshot"},
                               {ProtoMode::kTwoShot, "twoshot"},
                               {ProtoMode::kStaged, "staged"}};

// Note [Direct or FIFO]: one-shot reads every rank's round (nranks reads of each byte, one
// synchronization), two-shot reads and stores 2 (nranks - 1) / nranks of it (two). Two ranks
// take one-shot at every size (the same traffic, one synchronization fewer); more take it up
// to vLLM's measured switch points (512 KiB up to 4 ranks, 256 KiB up to 8; research note
// gpu-direct-collectives.md §1.2). Not yet measured on Accord's own kernels.
uint32_t one_or_two_shot(int nranks, size_t bytes) {
  if (nranks <= 2) return kProtoOneShot;
  const size_t limit = nranks <= 4 ? size_t{512} << 10 : size_t{256} << 10;
  return bytes <= limit ? kProtoOneShot : kProtoTwoShot;
}
}  // namespace

bool parse_proto_mode(const std::string& text, ProtoMode* out) {
  if (text.empty()) {
    *out = ProtoMode::kAuto;
    return true;
  }
  for (const ModeName& m : kModes)
    if (strcasecmp(text.c_str(), m.name) == 0) {
      *out = m.mode;
      return true;
    }
  return false;
}

const char* proto_mode_name(ProtoMode m) {
  for (const ModeName& n : kModes)
    if (n.mode == m) return n.name;
  return "?";
}

const char* proto_name(uint32_t proto) {
  return proto == kProtoOneShot ? "direct one-shot" : proto == kProtoTwoShot ? "direct two-shot" : "fifo";
}

Status DirectEngine::create(const DirectSetup& s, std::unique_ptr<DirectEngine>* out) {
  std::unique_ptr<DirectEngine> e(new DirectEngine());
  ACCORD_TRY(e->open(s).prefix(format("rank %d (GPU %d): direct protocol scratch: ", s.rank, s.device)));
  *out = std::move(e);
  return Status::success();
}

Status DirectEngine::open(const DirectSetup& s) {
  rt_ = s.rt;
  rank_ = s.rank;
  nranks_ = s.nranks;
  mode_ = s.mode;
  wait_ = s.wait;
  sync_why_ = s.sync_why;
  if (s.staged) return open_staged(s);
  half_bytes_ = direct_half_bytes(s.scratch_bytes);
  flag_bytes_ = direct_flag_bytes(nranks_);
  const size_t bytes = flag_bytes_ + 2 * half_bytes_;
  ACCORD_TRY(rt_->alloc_device(s.device, bytes, &mine_));
  ACCORD_TRY(rt_->memset_async(mine_, 0, bytes, s.stream));
  // Zero (every flag at round 0) before a peer can learn where it is.
  ACCORD_TRY(rt_->synchronize_stream(s.stream));
  bool any_ipc = false;
  for (int r = 0; r < nranks_; ++r) any_ipc = any_ipc || (r != rank_ && s.ipc[static_cast<size_t>(r)]);
  const uintptr_t at = reinterpret_cast<uintptr_t>(mine_);
  std::string value = to_hex(&at, sizeof at);
  if (any_ipc) {
    IpcHandle h;
    ACCORD_TRY(rt_->ipc_get_handle(mine_, &h).prefix("exporting it: "));
    value += " " + to_hex(&h, sizeof h);
  }
  std::vector<std::string> all;
  ACCORD_TRY(s.store->all_gather("dscratch", rank_, nranks_, value, &all, s.deadline));
  std::vector<uint8_t*> table(static_cast<size_t>(nranks_), nullptr);
  table[static_cast<size_t>(rank_)] = static_cast<uint8_t*>(mine_);
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    const std::string& v = all[static_cast<size_t>(r)];
    if (!s.ipc[static_cast<size_t>(r)]) {
      uintptr_t p = 0;
      if (!from_hex(v.substr(0, v.find(' ')), &p, sizeof p))
        return error(ACCORD_ERR_INTERNAL, "rank %d published a malformed pointer", r);
      table[static_cast<size_t>(r)] = reinterpret_cast<uint8_t*>(p);
      continue;
    }
    IpcHandle h;
    const size_t sp = v.find(' ');
    if (sp == std::string::npos || !from_hex(v.substr(sp + 1), &h, sizeof h))
      return error(ACCORD_ERR_INTERNAL, "rank %d published no IPC handle", r);
    void* p = nullptr;
    ACCORD_TRY(rt_->ipc_open_handle(s.device, h, &p)
                   .prefix(format("opening rank %d's IPC handle (ACCORD_DEVICE_PROTO=fifo avoids it): ", r)));
    opened_.push_back(p);
    table[static_cast<size_t>(r)] = static_cast<uint8_t*>(p);
  }
  scratch_ = table;
  if (wait_) ACCORD_TRY(rt_->create_stream(s.device, &rescue_).prefix("release_waits' stream: "));
  // No rank frees its scratch (destroy, exit) before every peer has opened it.
  std::vector<std::string> unused;
  ACCORD_TRY(s.store->all_gather("dscratch_opened", rank_, nranks_, "1", &unused, s.deadline));
  // Note [Freeing memory peers map]: join this process's ranks of the job.
  int lowest = rank_, here = 0;
  for (int r = 0; r < nranks_; ++r)
    if (r == rank_ || !s.ipc[static_cast<size_t>(r)]) {
      lowest = std::min(lowest, r);
      ++here;
    }
  // Named by the address of the scratch of the job's lowest rank in this process: unique
  // while that scratch lives, which is until the last of them lets go.
  held_ = ProcessHold::join(format("direct %p", static_cast<void*>(table[static_cast<size_t>(lowest)])), here, rt_);
  return upload_table(table, s);
}

// The table into GPU memory through the communicator's own stream (a synchronous copy would
// run on the legacy stream and wait for the users' streams).
Status DirectEngine::upload_table(const std::vector<uint8_t*>& table, const DirectSetup& s) {
  const size_t tbytes = sizeof(uint8_t*) * table.size();
  void* staging = nullptr;
  ACCORD_TRY(rt_->alloc_host_pinned(tbytes, &staging));
  std::memcpy(staging, table.data(), tbytes);
  Status st = rt_->alloc_device(s.device, tbytes, &table_);
  if (st.ok()) st = rt_->copy_async(CopyKind::kHostToDevice, table_, staging, tbytes, s.stream);
  // Note [Registered inputs]: the slots' table, empty (the waiting protocol has none).
  const size_t ubytes = sizeof(uint8_t*) * static_cast<size_t>(kDirectUserSlots) * table.size();
  if (st.ok() && !wait_ && !staged_) st = rt_->alloc_device(s.device, ubytes, &user_table_);
  if (st.ok() && !wait_ && !staged_) st = rt_->memset_async(user_table_, 0, ubytes, s.stream);
  // Note [Inputs read where they lie]: ranks that are threads of one process on one GPU describe
  // their inputs from the first call (every rank of the job alike).
  pointer_inputs_ = user_table_ != nullptr && s.one_gpu &&
                    std::none_of(s.ipc.begin(), s.ipc.end(), [](bool b) { return b; });
  if (st.ok()) st = rt_->synchronize_stream(s.stream);
  (void)rt_->free_host_pinned(staging);
  return st.prefix("peer table: ");
}

Status DirectEngine::set_user_slot(int slot, const std::vector<const uint8_t*>& buffers, Stream stream) {
  if (user_table_ == nullptr || slot < 0 || slot >= kDirectUserSlots || buffers.size() != static_cast<size_t>(nranks_))
    return Status::success();
  const size_t bytes = sizeof(uint8_t*) * buffers.size();
  void* staging = nullptr;
  ACCORD_TRY(rt_->alloc_host_pinned(bytes, &staging));
  std::memcpy(staging, buffers.data(), bytes);
  void* at = static_cast<uint8_t**>(user_table_) + static_cast<size_t>(slot) * buffers.size();
  Status st = rt_->copy_async(CopyKind::kHostToDevice, at, staging, bytes, stream);
  if (st.ok()) st = rt_->synchronize_stream(stream);
  (void)rt_->free_host_pinned(staging);
  if (st.ok()) any_user_slot_ = true;
  return st.prefix(format("rank %d: the registered buffers' table (slot %d): ", rank_, slot));
}

// release_waits' stream, and the staged pipeline's stream and events (Note [Staged pipeline]),
// once the kernels are done.
void DirectEngine::destroy_streams() {
  for (Stream* st : {&rescue_, &side_}) {
    if (st->id != 0) (void)rt_->destroy_stream(*st);
    *st = Stream{};
  }
  for (Event* e : {&a_done_, &out_done_[0], &out_done_[1]}) {
    if (e->id != 0) (void)rt_->destroy_event(*e);
    *e = Event{};
  }
}

DirectEngine::~DirectEngine() {
  if (rt_ == nullptr) return;
  destroy_streams();
  if (held_ == nullptr) {  // init failed before the peers could address it
    for (void* p : opened_) (void)rt_->ipc_close_handle(p);
    (void)rt_->free_device(table_);
    (void)rt_->free_device(user_table_);
    (void)rt_->free_device(mine_);
    return;
  }
  if (!let_go_) (void)let_go({});  // the communicator did not: keep the memory (a peer may read it)
}

bool DirectEngine::let_go(const std::vector<void*>& more) {
  if (let_go_ || held_ == nullptr) return false;
  let_go_ = true;
  // release_waits' stream writes into the peers' scratch: done before the mappings close.
  destroy_streams();
  for (void* p : opened_) (void)rt_->ipc_close_handle(p);
  opened_.clear();
  std::vector<void*> memory = {table_, mine_};
  if (user_table_ != nullptr) memory.push_back(user_table_);
  memory.insert(memory.end(), more.begin(), more.end());
  table_ = mine_ = user_table_ = nullptr;
  return held_->let_go(memory);
}

void DirectEngine::free_held() {
  if (held_ != nullptr) held_->free_all();
}

uint32_t DirectEngine::choose(Collective coll, size_t bytes, std::string* why) const {
  if (mode_ == ProtoMode::kFifo) {
    *why = "ACCORD_DEVICE_PROTO=fifo";
    return kProtoFifo;
  }
  if (coll != Collective::kAllReduce && coll != Collective::kReduceScatter && coll != Collective::kAllGather &&
      coll != Collective::kBroadcast && coll != Collective::kReduce) {
    *why = staged_ ? "no staged form" : "no direct form";
    return kProtoFifo;
  }
  if (staged_) {  // Note [Staged protocol]: one-shot rounds, every collective
    *why = staged_why_;
    return kProtoOneShot;
  }
  if (coll != Collective::kAllReduce) {
    *why = "every pair addresses the other's GPU memory; one synchronization a round (Note [Direct collectives])";
    return kProtoOneShot;
  }
  switch (mode_) {
    case ProtoMode::kOneShot:
      *why = "ACCORD_DEVICE_PROTO=oneshot";
      return kProtoOneShot;
    case ProtoMode::kTwoShot:
      *why = "ACCORD_DEVICE_PROTO=twoshot";
      return kProtoTwoShot;
    default:
      break;
  }
  const uint32_t p = one_or_two_shot(nranks_, bytes);
  *why = nranks_ <= 2 ? "every pair addresses the other's GPU memory; 2 ranks: one-shot at every size"
         : p == kProtoOneShot
             ? format("every pair addresses the other's GPU memory; %zu bytes <= %s: one-shot", bytes,
                      nranks_ <= 4 ? "512 KiB" : "256 KiB")
             : format("every pair addresses the other's GPU memory; %zu bytes > %s: two-shot", bytes,
                      nranks_ <= 4 ? "512 KiB" : "256 KiB");
  return p;
}

void DirectEngine::prepare(Collective coll, int root, uint32_t proto, size_t count, size_t elem_bytes,
                           unsigned max_blocks, DevDirect* d, uint32_t* nblocks) const {
  // Two-shot keeps its input and its results in the two quarters of the round's half; a
  // reduce-scatter round holds every rank's segment.
  const uint64_t room = proto == kProtoTwoShot ? half_bytes_ / 2
                        : coll == Collective::kReduceScatter ? half_bytes_ / static_cast<uint64_t>(nranks_)
                                                             : half_bytes_;
  const uint64_t chunk = std::max<uint64_t>(1, room / elem_bytes);
  const uint64_t round_bytes = std::min<uint64_t>(count, chunk) * elem_bytes;
  d->coll = static_cast<uint32_t>(coll);
  d->root = root;
  const uint64_t slices = (round_bytes + kDirectSliceBytes - 1) / kDirectSliceBytes;
  d->scratch = static_cast<uint8_t* const*>(table_);
  d->count = count;
  d->chunk_elems = chunk;
  d->half_bytes = half_bytes_;
  d->data_offset = flag_bytes_;
  d->round = round_;
  d->proto = proto;
  d->nslices = static_cast<uint32_t>(std::clamp<uint64_t>(slices, 1, kDirectMaxSlices));
  // Note [Registered inputs]: every rank of a spinning job describes its all-reduce inputs
  // once some registration has had a slot (the caller says when this rank's lies in a
  // registered buffer); before that, no descriptor is written (registration is collective:
  // every rank agrees).
  d->user = any_user_slot_ || pointer_inputs_ ? static_cast<const uint8_t* const*>(user_table_) : nullptr;
  d->my_slot = -1;
  d->my_offset = 0;
  *nblocks = std::max(1u, std::min<uint32_t>(d->nslices, max_blocks));
}

void DirectEngine::commit(const DevDirect& d) {
  round_ += static_cast<uint32_t>(direct_rounds(d));
}

std::string DirectEngine::describe() const {
  if (mode_ == ProtoMode::kFifo) return "device protocol: fifo (ACCORD_DEVICE_PROTO=fifo)\n";
  if (staged_)
    return format("device protocol: all_reduce, reduce_scatter, all_gather, broadcast and reduce staged through "
                  "pinned host memory by copy engines (one-shot rounds of %zu KiB; each rank's %zu KiB staging area "
                  "in its shared memory, a copy of every rank's halves in its GPU: %zu KiB); point-to-point on the "
                  "FIFOs, waiting at stream level (%s)\n",
                  half_bytes_ >> 10, (2 * half_bytes_ + kStagedWordBytes) >> 10,
                  (2 * half_bytes_ * static_cast<size_t>(nranks_)) >> 10, staged_why_.c_str());
  const char* which = mode_ == ProtoMode::kOneShot   ? "direct one-shot at every size (ACCORD_DEVICE_PROTO=oneshot)"
                      : mode_ == ProtoMode::kTwoShot ? "direct two-shot at every size (ACCORD_DEVICE_PROTO=twoshot)"
                      : nranks_ <= 2                 ? "direct one-shot at every size (2 ranks)"
                      : nranks_ <= 4                 ? "direct one-shot up to 512 KiB, two-shot above"
                                                     : "direct one-shot up to 256 KiB, two-shot above";
  return format("device protocol: all_reduce %s; reduce_scatter, all_gather, broadcast and reduce direct, one "
                "synchronization a round; by loads and stores of each rank's %zu KiB scratch mapped into every peer "
                "(every pair addresses the other's GPU memory)\n",
                which, (2 * half_bytes_) >> 10);
}

void DirectEngine::log_choice(Collective coll, size_t bytes, uint32_t proto, const std::string& why) {
  int log2 = 0;
  while ((size_t{1} << (log2 + 1)) <= bytes && log2 < 62) ++log2;
  if (!logged_.insert({proto * 256 + static_cast<uint32_t>(coll), log2}).second) return;
  LOG_INFO(kGpu, "rank %d: %s of %zu bytes: %s (%s)", rank_, collective_name(coll), bytes,
           proto == kProtoFifo                ? proto_name(proto)
           : coll != Collective::kAllReduce ? (staged_ ? "staged" : "direct")
           : staged_                        ? "staged one-shot"
                                            : proto_name(proto),
           why.c_str());
}

}  // namespace accord::dev
