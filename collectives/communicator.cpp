// Communicator creation and the collective entry point (see communicator.hpp).
#include "collectives/communicator.hpp"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>

#include "collectives/store_probe.hpp"
#include "core/crypto.hpp"
#include "core/log.hpp"

namespace accord {
namespace {

constexpr size_t kDefaultSlotBytes = 256 << 10;  // measured best of 32K..512K at 16-256 MiB
constexpr size_t kDefaultSlots = 8;
constexpr size_t kHostChunkBytes = 64 << 10;  // Note [Host chunk]

std::string host_identity(const Settings& s) {
  if (!s.host_id.empty()) return s.host_id;
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  return std::string(host) + "/" + boot;
}

// Note [Shared memory domain]: ranks with one host identity share memory only if they see one
// /dev/shm. Containers that share the host's hostname (UTS namespace) and boot id but each
// mount a /dev/shm of their own cannot open each other's segments. So each rank also says
// which /dev/shm it sees, as the device and inode of the directory (every tmpfs mount has a
// device number of its own; a bind mount of one keeps it), and only ranks that agree on both
// are local (shared memory); the others, on this host or not, are remote (TCP). With
// ACCORD_SHM_DISABLE=1 the domain is the rank itself: every peer is remote.
std::string shm_domain(const Settings& s, int rank) {
  if (s.shm_disable) return format("off:%d", rank);
  struct stat st;
  if (stat("/dev/shm", &st) != 0) return "?";  // shm_open fails later and says why
  return format("%llx:%llx", static_cast<unsigned long long>(st.st_dev),
                static_cast<unsigned long long>(st.st_ino));
}

// Note [Process identity]: a rank's process is its pid, its pid namespace and a token, never
// the pid alone. Containers that share the host's name and /dev/shm but have pid namespaces
// of their own can all be pid 1: taken for one process, such ranks were routed as threads of
// one process (device pointers passed between them) and watched through each other's pidfds.
// The namespace is the inode of /proc/self/ns/pid (unique among the namespaces alive on one
// kernel; pid_namespace() in transport/shm); the token is 64 random bits made once per process
// (made again in a forked child, which has a pid of its own). Ranks are one process only if
// all three agree; a pidfd is only opened for a peer in this rank's pid namespace, where its
// pid means that process, and shared-memory segments name their creator's namespace.
std::string process_token() {
  static std::mutex mu;
  static pid_t made_in = 0;
  static std::string token;
  std::lock_guard<std::mutex> lock(mu);
  if (made_in != getpid()) {
    uint64_t rnd = 0;
    if (!random_bytes(&rnd, sizeof rnd).ok()) rnd = static_cast<uint64_t>(getpid()) * 0x9e3779b97f4a7c15ULL;
    token = to_hex(&rnd, sizeof rnd);
    made_in = getpid();
  }
  return token;
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  long fd = syscall(SYS_pidfd_open, pid, 0);
  return fd < 0 ? -1 : static_cast<int>(fd);
#else
  (void)pid;
  return -1;
#endif
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

bool parse_algo(const std::string& s, Algo* out) {
  if (s == "ring") return *out = Algo::kRing, true;
  if (s == "direct") return *out = Algo::kDirect, true;
  if (s == "chain") return *out = Algo::kChain, true;
  if (s == "tree") return *out = Algo::kTree, true;
  if (s == "rd") return *out = Algo::kRecursiveDoubling, true;
  if (s == "hier") return *out = Algo::kHierarchical, true;
  return false;
}

const char* dtype_label(accord_datatype_t d) {
  static const char* names[] = {"int8",    "uint8",   "int32",   "uint32", "int64",
                                "uint64",  "float16", "float32", "float64", "bfloat16"};
  return d >= 0 && d < ACCORD_NUM_DTYPES ? names[d] : "?";
}

const char* op_label(accord_red_op_t op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < ACCORD_NUM_OPS ? names[op] : "?";
}

// What ACCORD_CHECK compares between ranks.
struct CallDescriptor {
  int32_t coll;
  int32_t dtype;
  int32_t op;
  int32_t root;
  uint64_t count;
};


std::string describe(const CallDescriptor& d) {
  const Collective c = static_cast<Collective>(d.coll);
  std::string s = format("%s with %llu %s", collective_name(c), static_cast<unsigned long long>(d.count),
                         dtype_label(static_cast<accord_datatype_t>(d.dtype)));
  if (c == Collective::kBarrier) s = "barrier";
  if (reduces(c)) s += format(" (%s)", op_label(static_cast<accord_red_op_t>(d.op)));
  if (c == Collective::kBroadcast || c == Collective::kReduce) s += format(" (root %d)", d.root);
  return s;
}

// Note [Call signature]: a hash of what the call asks, equal on ranks that agree.
uint32_t call_tag(const CollArgs& a) {
  const bool rooted = a.coll == Collective::kBroadcast || a.coll == Collective::kReduce;
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ULL;
    }
  };
  mix(static_cast<uint64_t>(a.coll));
  mix(a.coll == Collective::kBarrier ? 0 : a.count);
  mix(a.coll == Collective::kBarrier ? 0 : static_cast<uint64_t>(a.dtype));
  mix(reduces(a.coll) ? static_cast<uint64_t>(a.op) : 0);
  mix(rooted ? static_cast<uint64_t>(a.root) : 0);
  return static_cast<uint32_t>(h ^ (h >> 32));
}


}  // namespace

Status Communicator::create(const InitSpec& spec, std::unique_ptr<Communicator>* out) {
  std::unique_ptr<Communicator> c(new Communicator());
  ACCORD_TRY(c->init(spec));
  *out = std::move(c);
  return Status::success();
}

// The settings this rank checks alone (Note [A rank that fails alone at init]: a failure here
// still reaches the other ranks through the store).
Status Communicator::configure() {
  ACCORD_TRY(parse_fault(settings_.fault, &fault_));
  if (!settings_.algo.empty()) {
    has_forced_algo_ = parse_algo(settings_.algo, &forced_algo_);
    if (!has_forced_algo_)
      return error(ACCORD_ERR_INVALID_ARGUMENT, "ACCORD_ALGO='%s' is not an algorithm; use ring, tree, direct, rd (recursive doubling), hier (hierarchical, several hosts) or chain",
                   settings_.algo.c_str());
  }
  dev::ProtoMode proto;
  if (!dev::parse_proto_mode(settings_.device_proto, &proto))
    return error(ACCORD_ERR_INVALID_ARGUMENT,
                 "ACCORD_DEVICE_PROTO='%s' is not a device protocol; use auto, direct, oneshot, twoshot, staged or fifo",
                 settings_.device_proto.c_str());
  if (!dev::parse_gpu_sync(settings_.shared_gpu_sync, nullptr))
    return error(ACCORD_ERR_INVALID_ARGUMENT, "ACCORD_SHARED_GPU_SYNC='%s' is not a hand-off mode; use auto, spin or wait",
                 settings_.shared_gpu_sync.c_str());
  FifoShape& shape = shape_;
  shape.slot_bytes = settings_.shm_slot_bytes > 0 ? static_cast<size_t>(settings_.shm_slot_bytes) : kDefaultSlotBytes;
  shape.slot_bytes = std::max<size_t>(64, shape.slot_bytes & ~size_t{63});
  if (shape.slot_bytes > kMaxSlotBytes)
    return error(ACCORD_ERR_INVALID_ARGUMENT,
                 "ACCORD_SHM_SLOT_BYTES=%zu is too large; use at most %zu (64 MiB - 64)",
                 shape.slot_bytes, kMaxSlotBytes);
  shape.nslots = settings_.shm_nslots > 0 ? static_cast<size_t>(settings_.shm_nslots) : kDefaultSlots;
  if (shape.nslots < 4)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "ACCORD_SHM_NSLOTS=%zu is too small; use 4 or more (Note [FIFO depth])",
                 shape.nslots);
  ACCORD_TRY(p2p_fifo_shape(settings_.device_p2p_bytes, &p2p_shape_));
  chunk_bytes_ = shape.slot_bytes;
  if (settings_.chunk_bytes > 0) chunk_bytes_ = std::min(chunk_bytes_, static_cast<size_t>(settings_.chunk_bytes));
  if (!settings_.tune_file.empty()) ACCORD_TRY(Tuner::load(settings_.tune_file, &tuner_));
  tuner_.set_net_mbps(static_cast<double>(settings_.net_mbps));
  // Else ordinary stores until the probe at init says otherwise (Note [Store mode probe]).
  nt_fixed_ = settings_.nt_threshold_bytes > 0;
  nt_threshold_ = nt_fixed_ ? static_cast<size_t>(settings_.nt_threshold_bytes) : SIZE_MAX;
  return Status::success();
}

Status Communicator::init(const InitSpec& spec) {
  rank_ = spec.rank;
  nranks_ = spec.nranks;
  endpoint_ = spec.endpoint;
  settings_ = spec.settings;
  RankScope scope(rank_, nranks_);
  const Deadline deadline = Deadline::after_ms(settings_.init_timeout_ms);
  log_settings(settings_);
  Status local = spec.settings_error;
  if (local.ok()) local = configure();
  if (!local.ok()) local = std::move(local).prefix(format("rank %d: ", rank_));
  links_.send.assign(static_cast<size_t>(nranks_), nullptr);
  links_.recv.assign(static_cast<size_t>(nranks_), nullptr);
  links_.pidfd.assign(static_cast<size_t>(nranks_), -1);
  local_ranks_ = {rank_};
  hosts_ = {host_identity(settings_)};
  shm_domains_ = {shm_domain(settings_, rank_)};
  host_of_ = {0};
  if (nranks_ == 1) {
    if (local.ok()) log_store_mode("a communicator of one rank: no probe");
    return local.ok() ? engine_.setup_device(spec.device) : local;
  }
  {
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (driver != nullptr) dlclose(driver);
    may_use_gpu_ = spec.device >= 0 || settings_.device >= 0 || !settings_.sim_topo.empty() || driver != nullptr;
  }
  std::unique_ptr<StoreClient> store;
  Status s = StoreClient::connect(spec.endpoint, rank_, nranks_, deadline, &store);
  if (!s.ok()) {
    if (local.ok()) return s;
    // Note [A rank that fails alone at init]: its own reason first, then why the others were
    // not told.
    return Status(local.code(), local.message() + " (the other ranks were not told: " + s.message() + ")");
  }
  if (fault_.at("init.connected", rank_)) trigger_fault(fault_);
  s = std::move(local);
  if (s.ok()) s = agree_on_settings(store.get(), deadline);
  if (s.ok()) s = connect_transports(store.get(), deadline);
  if (s.ok()) s = decide_stores(store.get(), deadline);
  if (s.ok()) s = decide_single_copy(store.get(), deadline);
  if (s.ok()) s = engine_.setup_device(spec.device);
  if (s.ok()) s = engine_.gather_gpus(store.get(), deadline);
  if (s.ok()) s = engine_.share_sim_slices(store.get(), deadline);
  if (s.ok()) {
    engine_.compute_ring();
    engine_.find_gpu_sharers();
  }
  if (s.ok()) s = engine_.connect_device_fifos(store.get(), deadline);
  if (s.ok()) s = engine_.setup_direct(store.get(), deadline);
  // Note [Device init barrier]: no rank may launch a collective kernel while another rank of
  // the job is still in its device setup: a kernel of this process would spin on a peer whose
  // thread waits in cudaHostRegister or cudaMalloc for the device to go idle (the simulation
  // enforces that rule: Note [Simulated CUDA rules]). So every rank passes this round last.
  if (s.ok() && engine_.job_has_gpus()) {
    std::vector<std::string> unused;
    s = store->all_gather("gpu_ready", rank_, nranks_, "1", &unused, deadline);
  }
  if (s.ok() && shm_ != nullptr) shm_->warm_fifos();  // Note [FIFO lines at init]
  if (s.ok()) engine_.warn_shared_gpu();
  if (s.ok() && engine_.device() >= 0)
    for (int peer : local_ranks_)
      if (peer != rank_ && engine_.has_gpu(peer))
        LOG_INFO(kGpu, "rank %d: pair %d-%d: %s", rank_, std::min(rank_, peer), std::max(rank_, peer),
                 engine_.device_pair(std::min(rank_, peer), std::max(rank_, peer)).c_str());
  if (!s.ok()) {
    // Unless the failure came from the store itself (another rank's), tell the others why;
    // then, in the store's process, stay until they know (Note [A rank that fails alone at
    // init]).
    store->report_failure(s);
    store.reset();
    wait_for_store_server(spec.endpoint, rank_, deadline);
    return s;
  }
  ACCORD_TRY(store->finish());
  const std::string spin_on = policy_.idle_spin_ns > 0
                                  ? " (on to " + std::to_string(policy_.idle_spin_ns / 1000) +
                                        " us while every task has a CPU)"
                                  : "";
  // Note [Yields that hand the CPU away], Note [Moving off a CPU a yield found taken]
  const std::string yields =
      policy_.yields == 0          ? ""
      : policy_.long_yield_ns == 0 ? " then yield (oversubscribed)"
                                   : " then yield (oversubscribed; not for a while after two yields over " +
                                         std::to_string(policy_.long_yield_ns / 1000) + " us close together, spinning " +
                                         std::to_string(policy_.closed_spin_ns / 1000) + " us instead" +
                                         (policy_.move_off_cpu != nullptr
                                              ? "; one of " + std::to_string(policy_.move_off_yield_ns / 1000000) +
                                                    " ms or more moves the thread off its CPU"
                                              : "") +
                                         ")";
  LOG_INFO(kInit,
           "rank %d of %d ready: %zu local ranks over shm, %zu remote over tcp, chunk %zu KiB "
           "(host buffers %zu KiB), wait spin %lld us%s%s",
           rank_, nranks_, local_ranks_.size(), remote_ranks_.size(), chunk_bytes_ >> 10,
           call_chunk(false, 0, Collective::kAllReduce) >> 10,
           static_cast<long long>(policy_.spin_ns / 1000), spin_on.c_str(), yields.c_str());
  return Status::success();
}

// Note [Settings every rank shares] (core/settings.hpp): compared before any transport is set
// up, so that ranks started with different values fail at init, every one of them with the
// same message, instead of waiting in their first collective for messages planned otherwise
// (ACCORD_TIMEOUT_MS later, or never for a rank that thinks the call is done). The tune file
// is compared by its content: hosts may keep their copies at different paths.
Status Communicator::agree_on_settings(StoreClient* store, Deadline deadline) {
  const std::vector<SharedSetting> shared = shared_settings(settings_);
  std::string mine;
  for (const SharedSetting& s : shared) {
    std::string value = s.value;
    if (std::strcmp(s.name, "ACCORD_TUNE_FILE") == 0 && !value.empty()) {
      std::ifstream f(value, std::ios::binary);  // Tuner::load has read it already
      const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      const Digest d = sha256(text.data(), text.size());
      value = format("a file of %zu bytes, SHA-256 %s", text.size(), to_hex(d.data(), 8).c_str());
    }
    mine += value + "\n";  // a value never holds a newline: one line per setting, in table order
  }
  std::vector<std::string> all;
  ACCORD_TRY(store->all_gather("settings", rank_, nranks_, mine, &all, deadline));
  auto values = [](const std::string& text) {
    std::vector<std::string> v;
    for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
      v.push_back(text.substr(at, nl - at));
    return v;
  };
  std::vector<std::vector<std::string>> per_rank;
  for (const std::string& text : all) per_rank.push_back(values(text));
  const std::vector<std::string>& first = per_rank[0];
  std::string differing;  // every setting that differs, after the first one's details
  std::string detail;
  for (size_t i = 0; i < shared.size(); ++i) {
    std::vector<int> others;
    std::string other_value;
    for (int r = 1; r < nranks_; ++r) {
      const std::vector<std::string>& v = per_rank[static_cast<size_t>(r)];
      const std::string value = i < v.size() ? v[i] : "?";
      if (i < first.size() && value == first[i]) continue;
      if (others.empty()) other_value = value;
      others.push_back(r);
    }
    if (others.empty()) continue;
    if (!detail.empty()) {
      differing += format("%s%s", differing.empty() ? "" : ", ", shared[i].name);
      continue;
    }
    auto shown = [](const std::string& v) { return v.empty() ? std::string("unset") : "'" + v + "'"; };
    std::string list;
    for (size_t k = 0; k < others.size() && k < 8; ++k) list += format("%s%d", k ? ", " : "", others[k]);
    if (others.size() > 8) list += format(" and %zu more", others.size() - 8);
    detail = format("%s is %s on rank 0 and %s on rank %d (ranks that differ from rank 0: %s)", shared[i].name,
                    shown(i < first.size() ? first[i] : "?").c_str(), shown(other_value).c_str(), others[0],
                    list.c_str());
  }
  if (detail.empty()) return Status::success();
  return error(ACCORD_ERR_MISMATCH,
               "rank %d: ranks disagree on a setting that shapes every collective's messages: %s%s%s. Ranks "
               "with different values would plan different schedules and wait for each other; give every "
               "rank the same environment (mpirun -x NAME, or the same value in each host's environment)",
               rank_, detail.c_str(), differing.empty() ? "" : "; these differ too: ", differing.c_str());
}

Status Communicator::connect_transports(StoreClient* store, Deadline deadline) {
  // The process line: pid, pid namespace and token (Note [Process identity]), then " g" when
  // this rank may run on a GPU (Note [Device FIFOs]).
  const std::string me = host_identity(settings_) + "\n" + std::to_string(getpid()) + " " + pid_namespace() + " " +
                         process_token() + (may_use_gpu_ ? " g" : "") + "\n" + shm_domain(settings_, rank_) +
                         "\n" + cpu_mask();
  std::vector<std::string> infos;
  ACCORD_TRY(store->all_gather("info", rank_, nranks_, me, &infos, deadline));
  std::vector<long> job_pids;
  group_by_host(infos, &job_pids);
  // Note [Device data over TCP]: every rank decides alike whether TCP peers get device sockets.
  job_may_use_gpu_ = std::any_of(infos.begin(), infos.end(), [](const std::string& info) {
    const size_t nl = info.find('\n'), nl2 = info.find('\n', nl + 1);
    return info.substr(nl + 1, nl2 - nl - 1).find(" g") != std::string::npos;
  });
  if (settings_.shm_disable) {
    // Note [Shared memory domain]: no local peers, so no segment: nothing in /dev/shm at all.
    LOG_INFO(kInit, "rank %d: ACCORD_SHM_DISABLE=1: no shared memory; TCP to every other rank",
             rank_);
    return connect_remote(store, deadline);
  }
  ShmOptions options;
  options.shape = shape_;
  // Note [Device FIFOs]: when a rank of this host may run on a GPU, every segment of the host
  // reserves whole FIFOs for host-staged device calls (host and device calls never share a
  // FIFO); all ranks decide it alike, so that they agree on the segments' layout.
  for (int r : local_ranks_) {
    const std::string& info = infos[static_cast<size_t>(r)];
    const size_t nl = info.find('\n'), nl2 = info.find('\n', nl + 1);
    if (info.substr(nl + 1, nl2 - nl - 1).find(" g") != std::string::npos) options.device_fifos = true;
  }
  // Note [Staged protocol] (device/direct_staged.cpp): and a staging area each, for all-reduces
  // between GPUs that turn out not to peer (the routes are known only after the segments).
  if (options.device_fifos)
    options.staging_bytes = dev::staged_area_bytes(dev::staged_bytes(settings_.staged_bytes));
  options.policy = make_wait_policy(settings_.spin_us, oversubscribed_, settings_.long_yield_us, settings_.cpu_move);
  policy_ = options.policy;
  auto after_publish = [this] {
    if (fault_.at("init.shm_published", rank_)) trigger_fault(fault_);
  };
  Status s = ShmTransport::setup(store, rank_, nranks_, local_ranks_, options, deadline, after_publish, &shm_);
  if (!s.ok()) {
    remove_segments_of(job_pids);
    return s;
  }
  links_.death_notes = shm_->death_notes();
  links_.departures = shm_->departures();
  board_ctx_.abort_flag = &abort_;
  board_ctx_.self_rank = rank_;
  board_ctx_.pidfds = links_.pidfd.data();
  board_ctx_.nranks = nranks_;
  board_ctx_.death_notes = links_.death_notes;
  board_ctx_.departures = links_.departures;
  board_ctx_.operation = collective_name(Collective::kAllReduce);
  for (int r : local_ranks_) {
    if (r == rank_) continue;
    links_.send[static_cast<size_t>(r)] = shm_->sender(r);
    links_.recv[static_cast<size_t>(r)] = shm_->receiver(r);
  }
  return connect_remote(store, deadline);
}

// Note [Store mode probe] (store_probe.cpp): every rank takes part in the store round, so that
// the rounds stay in step whatever each rank's settings; a rank that does not probe
// (ACCORD_NT_THRESHOLD set, a sanitizer build) sends "". Each rank then decides from the
// probes of its host's ranks (local_ranks_), all of which it has, so they decide alike.
Status Communicator::decide_stores(StoreClient* store, Deadline deadline) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const bool probe = false;
  const char* skipped = nt_fixed_ ? "" : "a sanitizer build: no probe";
#else
  const bool probe = !nt_fixed_;
  const char* skipped = "";
#endif
  const std::string mine = probe ? encode_store_probe(run_store_probe()) : "";
  std::vector<std::string> all;
  ACCORD_TRY(store->all_gather("store_probe", rank_, nranks_, mine, &all, deadline));
  if (!probe) {
    log_store_mode(skipped);
    return Status::success();
  }
  std::vector<StoreProbe> host;
  for (int r : local_ranks_) {
    StoreProbe p;
    if (decode_store_probe(all[static_cast<size_t>(r)], &p)) host.push_back(p);
  }
  const StoreDecision d = decide_store_mode(host);
  if (d.streaming) nt_threshold_ = kStreamingFromBytes;
  StoreProbe me;
  decode_store_probe(mine, &me);
  log_store_mode(format("probe at init, %zu rank%s of this host at once, each its fastest of 4 "
                        "passes of a 4 MiB reduction: slowest rank %.3f ns per byte with ordinary "
                        "stores, %.3f with non-temporal ones%s; this rank's probe took %.1f ms",
                        host.size(), host.size() == 1 ? "" : "s", d.ordinary_ns_per_byte,
                        d.streaming_ns_per_byte,
                        d.measured ? (d.streaming ? ", at least 5% faster" : ", not 5% faster")
                                   : " (a probe is missing: ordinary stores)",
                        me.took_ms));
  return Status::success();
}

// The init log's line on the store mode (Note [Store mode probe]): which, and why.
void Communicator::log_store_mode(const std::string& why) const {
  std::string mode = nt_threshold_ == SIZE_MAX
                         ? std::string("ordinary stores for every output")
                         : format("non-temporal stores for out-of-place outputs from %zu bytes",
                                  nt_threshold_);
  const std::string reason =
      nt_fixed_
          ? format("set by ACCORD_NT_THRESHOLD=%zu", nt_threshold_) + (why.empty() ? "" : "; " + why)
          : why + "; ACCORD_NT_THRESHOLD overrides it";
  LOG_INFO(kInit, "rank %d: store mode: %s (%s)", rank_, mode.c_str(), reason.c_str());
}

// Ranks on this host (same host identity: hostname + boot id, or ACCORD_HOST_ID; and the same
// /dev/shm, Note [Shared memory domain]) talk over shared memory and watch each other's
// processes through pidfds; every other rank is remote. A pid from another host (or from a
// rank with another /dev/shm, likely another container) means nothing here, so remote ranks get
// no pidfd: the TCP transport notices their death by its sockets (Note [TCP liveness]).
void Communicator::group_by_host(const std::vector<std::string>& infos, std::vector<long>* local_pids) {
  // Each info: host identity, pid, shared memory domain, CPU mask (the rest), one per line.
  auto fields = [](const std::string& info) {
    std::vector<std::string> f;
    size_t at = 0;
    for (int i = 0; i < 3; ++i) {
      const size_t nl = std::min(info.find('\n', at), info.size());
      f.push_back(info.substr(at, nl - at));
      at = std::min(nl + 1, info.size());
    }
    f.push_back(info.substr(at));
    return f;
  };
  const std::vector<std::string> mine = fields(infos[static_cast<size_t>(rank_)]);
  const std::string my_key = mine[0] + "\n" + mine[2];
  const std::string mine_ns = pid_namespace();
  local_ranks_.clear();
  remote_ranks_.clear();
  hosts_.clear();
  shm_domains_.clear();
  pid_of_.clear();
  proc_of_.clear();
  pidns_of_.clear();
  std::map<std::string, int> index;  // host identity + domain -> small int, by first appearance
  std::vector<int> per_host;
  std::vector<std::string> local_masks;  // Note [Oversubscribed] (transport/wait.hpp)
  std::vector<int> apart;                // ranks of this host identity with another /dev/shm
  host_of_.clear();
  for (int r = 0; r < nranks_; ++r) {
    const std::vector<std::string> f = fields(infos[static_cast<size_t>(r)]);
    hosts_.push_back(f[0]);
    shm_domains_.push_back(f[2]);
    pid_of_.push_back(std::atol(f[1].c_str()));
    {
      // "PID NS TOKEN[ g]": the process is the first three words (Note [Process identity]).
      const std::string& line = f[1];
      const size_t ns_at = line.find(' ') + 1, token_at = line.find(' ', ns_at) + 1;
      pidns_of_.push_back(line.substr(ns_at, token_at - 1 - ns_at));
      proc_of_.push_back(line.substr(0, line.find(' ', token_at)));
    }
    const std::string key = f[0] + "\n" + f[2];
    auto at = index.emplace(key, static_cast<int>(index.size())).first;
    host_of_.push_back(at->second);
    if (at->second == static_cast<int>(per_host.size())) per_host.push_back(0);
    ++per_host[static_cast<size_t>(at->second)];
    if (key != my_key) {
      if (f[0] == mine[0] && !shm_domain_off(f[2]) && !shm_domain_off(mine[2])) apart.push_back(r);
      remote_ranks_.push_back(r);
      continue;
    }
    local_ranks_.push_back(r);
    local_masks.push_back(f[3]);
    // Pids only mean a process inside their own pid namespace (Note [Process identity]).
    if (pidns_of_.back() != mine_ns) continue;
    const pid_t pid = static_cast<pid_t>(pid_of_.back());
    local_pids->push_back(pid);
    if (r != rank_ && pid != getpid()) links_.pidfd[static_cast<size_t>(r)] = open_pidfd(pid);
  }
  if (!apart.empty()) {
    std::string list;
    for (int r : apart) list += format("%s%d", list.empty() ? "" : ", ", r);
    const bool many = apart.size() > 1;
    LOG_WARN(kInit,
             "rank %d: %s %s %s on this host (%s) but %s another /dev/shm, so this rank's shared "
             "memory is not visible there (containers sharing the host's name but not its "
             "/dev/shm?): using TCP. To use shared memory give them one /dev/shm (docker "
             "--ipc=host, or --ipc=container:NAME); to silence this set ACCORD_HOST_ID per "
             "container, or ACCORD_SHM_DISABLE=1 (TCP between all ranks)",
             rank_, many ? "ranks" : "rank", list.c_str(), many ? "run" : "runs", mine[0].c_str(),
             many ? "see" : "sees");
  }
  oversubscribed_ = static_cast<int>(local_ranks_.size()) > job_cpus(local_masks);
  // The hierarchical schedule needs as many ranks on every host.
  nhosts_ = static_cast<int>(per_host.size());
  hosts_even_ = std::count(per_host.begin(), per_host.end(), per_host[0]) == static_cast<long>(per_host.size());
  host_layout_.nhosts = nhosts_;
  host_layout_.ranks_per_host = *std::max_element(per_host.begin(), per_host.end());
  host_layout_.even = hosts_even_;
}

// TCP to every rank on another host, over channels of the same shape as shared memory's
// (the executor cuts messages at chunk_bytes_ = slot size whatever the transport).
Status Communicator::connect_remote(StoreClient* store, Deadline deadline) {
  if (remote_ranks_.empty()) return Status::success();
  TcpOptions options = make_tcp_options(settings_, endpoint_, shape_.slot_bytes, shape_.nslots);
  ACCORD_TRY(TcpTransport::setup(store, rank_, nranks_, remote_ranks_, options, deadline, &tcp_));
  for (int r : remote_ranks_) {
    links_.send[static_cast<size_t>(r)] = tcp_->sender(r);
    links_.recv[static_cast<size_t>(r)] = tcp_->receiver(r);
  }
  if (job_may_use_gpu_) {
    // Note [Device data over TCP]: sockets of their own for GPU data; at destroy they write out
    // what the kernels sent for up to ACCORD_TIMEOUT_MS (the peer's kernel may still need it).
    options.store_prefix = "tcpdev/";
    options.linger_ms = std::max<int64_t>(options.linger_ms, settings_.timeout_ms);
    ACCORD_TRY(engine_.connect_tcp(store, options, deadline));
  }
  LOG_INFO(kInit, "rank %d: TCP to %zu ranks on other hosts over %s (%s), %d sockets per peer", rank_,
           remote_ranks_.size(), tcp_->interface_name().c_str(), tcp_->listen_address().to_string().c_str(),
           tcp_->nsocks());
  return Status::success();
}

std::string Communicator::plan() const {
  auto short_host = [](const std::string& h) { return h.substr(0, h.find('/')); };
  std::string out;
  if (!engine_.ring().empty()) {
    out += "ring order (all-reduce ring, broadcast/reduce chains on GPUs):";
    for (int r : engine_.ring()) out += format(" %d", r);
    out += "\n";
  }
  for (int a = 0; a < nranks_; ++a)
    for (int b = a + 1; b < nranks_; ++b) {
      const std::string& ha = hosts_.at(static_cast<size_t>(a));
      const std::string& hb = hosts_.at(static_cast<size_t>(b));
      const std::string& da = shm_domains_.at(static_cast<size_t>(a));
      const std::string& db = shm_domains_.at(static_cast<size_t>(b));
      const bool gpus = engine_.has_gpu(a) && engine_.has_gpu(b);
      if (ha == hb && da == db && gpus)
        out += format("pair %d-%d: %s\n", a, b, engine_.device_pair(a, b).c_str());
      else if (ha == hb && da == db)
        out += format("pair %d-%d: shm (same host %s, shared memory)\n", a, b, short_host(ha).c_str());
      else if (ha == hb)
        out +=
            format("pair %d-%d: tcp (same host %s, %s, %d sockets%s)\n", a, b, short_host(ha).c_str(),
                   shm_domain_off(da) || shm_domain_off(db) ? "ACCORD_SHM_DISABLE=1" : "but another /dev/shm",
                   tcp_nsocks(), gpus && engine_.has_tcp_data() ? "; GPU buffers staged through pinned host memory" : "");
      else
        out += format("pair %d-%d: tcp (different hosts %s and %s, %d sockets%s)\n", a, b, short_host(ha).c_str(),
                      short_host(hb).c_str(), tcp_nsocks(),
                      gpus && engine_.has_tcp_data() ? "; GPU buffers staged through pinned host memory" : "");
    }
  return out + engine_.plan_lines();
}

Status Communicator::validate(const CollArgs& args) const {
  RankScope scope(rank_, nranks_);
  if (!sticky_.ok())
    return Status(sticky_.code(), format("rank %d: this communicator failed earlier and cannot be used again: %s",
                                         rank_, sticky_.message().c_str()));
  size_t in_bytes, out_bytes;
  return check_args(args, &in_bytes, &out_bytes);
}

std::future<Status> Communicator::run_async(std::vector<CollArgs> ops) {
  auto task = std::make_shared<std::packaged_task<Status()>>([this, ops = std::move(ops)] {
    // Consecutive sends and receives progress together (a group's point-to-point calls).
    for (size_t i = 0; i < ops.size();) {
      size_t end = i;
      while (end < ops.size() && is_point_to_point(ops[end].coll)) ++end;
      if (end == i) {
        ACCORD_TRY(run(ops[i++]));
        continue;
      }
      ACCORD_TRY(run_point_to_point(std::vector<CollArgs>(ops.begin() + static_cast<long>(i),
                                                          ops.begin() + static_cast<long>(end))));
      i = end;
    }
    return Status::success();
  });
  std::future<Status> result = task->get_future();
  post_job([task] { (*task)(); });
  return result;
}

void Communicator::post_job(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(worker_mutex_);
  if (!worker_.joinable()) {
    worker_ = std::thread([this] {
      for (;;) {
        std::function<void()> job;
        {
          std::unique_lock<std::mutex> l(worker_mutex_);
          worker_cv_.wait(l, [this] { return worker_stop_ || !worker_jobs_.empty(); });
          if (worker_jobs_.empty()) return;
          job = std::move(worker_jobs_.front());
          worker_jobs_.pop_front();
        }
        job();
      }
    });
  }
  worker_jobs_.push_back(std::move(job));
  worker_cv_.notify_one();
}

Communicator::~Communicator() {
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(worker_mutex_);
      worker_stop_ = true;
    }
    worker_cv_.notify_all();
    worker_.join();
  }
  engine_.release();
  if (fault_.at("destroy", rank_)) trigger_fault(fault_);
  publish_departure();
  for (int fd : links_.pidfd)
    if (fd >= 0) ::close(fd);
}

Status Communicator::check_args(const CollArgs& a, size_t* in_bytes, size_t* out_bytes) const {
  const char* name = collective_name(a.coll);
  const bool dtype_known = a.dtype >= 0 && a.dtype < ACCORD_NUM_DTYPES;
  const size_t esize = dtype_known ? accord_dtype_size(static_cast<accord_datatype_t>(a.dtype)) : 0;
  if (a.coll != Collective::kBarrier && esize == 0)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "rank %d: %s: unknown dtype %d; use an accord_datatype_t value "
                 "(ACCORD_INT8 .. ACCORD_BFLOAT16)", rank_, name, a.dtype);
  PreMul pm;
  if (reduces(a.coll) && (a.op < 0 || a.op >= ACCORD_NUM_OPS) && !premul_of(a.op, &pm))
    return error(ACCORD_ERR_INVALID_ARGUMENT, "rank %d: %s: unknown reduction op %d; use ACCORD_SUM, ACCORD_PROD, "
                 "ACCORD_MAX, ACCORD_MIN, ACCORD_AVG or an op of accord_red_op_create_pre_mul_sum on this "
                 "communicator", rank_, name, a.op);
  if (reduces(a.coll) && a.op >= ACCORD_NUM_OPS && pm.dtype != a.dtype)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "rank %d: %s: op %d (a pre-multiplied sum) was made for dtype %d, "
                 "but the call's dtype is %d; create the op with the call's dtype", rank_, name, a.op, pm.dtype,
                 a.dtype);
  if (is_point_to_point(a.coll)) {
    if (a.root < 0 || a.root >= nranks_)
      return error(ACCORD_ERR_INVALID_ARGUMENT,
                   "rank %d: %s: peer %d is out of range; it must be in 0..%d", rank_, name, a.root,
                   nranks_ - 1);
    if (a.count > SIZE_MAX / esize)
      return error(ACCORD_ERR_INVALID_ARGUMENT,
                   "rank %d: %s: count %zu is too large for this dtype", rank_, name, a.count);
    *in_bytes = *out_bytes = a.count * esize;
    const void* buf = a.coll == Collective::kSend ? a.send : a.recv;
    if (a.count > 0 && buf == nullptr)
      return error(ACCORD_ERR_INVALID_ARGUMENT,
                   "rank %d: %s with peer %d: the buffer is NULL with count %zu; pass "
                   "one of %zu bytes",
                   rank_, name, a.root, a.count, *in_bytes);
    return Status::success();
  }
  if ((a.coll == Collective::kBroadcast || a.coll == Collective::kReduce) && (a.root < 0 || a.root >= nranks_))
    return error(ACCORD_ERR_INVALID_ARGUMENT, "rank %d: %s: root %d is out of range; it must be in 0..%d", rank_, name,
                 a.root, nranks_ - 1);
  if (a.coll == Collective::kBarrier) return *in_bytes = *out_bytes = 0, Status::success();
  const size_t n = static_cast<size_t>(nranks_);
  const bool scaled = a.coll == Collective::kReduceScatter || a.coll == Collective::kAllGather;
  if (a.count > SIZE_MAX / esize / (scaled ? n : 1))
    return error(ACCORD_ERR_INVALID_ARGUMENT, "rank %d: %s: count %zu is too large for this dtype", rank_, name, a.count);
  const size_t bytes = a.count * esize;
  *in_bytes = a.coll == Collective::kReduceScatter ? bytes * n : bytes;
  *out_bytes = a.coll == Collective::kAllGather ? bytes * n : bytes;
  const bool is_root = a.root == rank_;
  const bool need_send = a.coll != Collective::kBroadcast || is_root;
  const bool need_recv = a.coll != Collective::kReduce || is_root;
  if (a.count > 0 && need_send && a.send == nullptr)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "rank %d: %s: sendbuf is NULL with count %zu; pass a buffer of %zu bytes",
                 rank_, name, a.count, *in_bytes);
  if (a.count > 0 && need_recv && a.recv == nullptr)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "rank %d: %s: recvbuf is NULL with count %zu; pass a buffer of %zu bytes",
                 rank_, name, a.count, *out_bytes);
  if (need_send && need_recv && a.count > 0) {
    const void* in_place_send = a.recv;
    if (a.coll == Collective::kReduceScatter) in_place_send = static_cast<const uint8_t*>(a.recv) - rank_ * bytes;
    if (a.coll == Collective::kAllGather) in_place_send = static_cast<const uint8_t*>(a.recv) + rank_ * bytes;
    if (a.send != in_place_send && overlaps(a.send, *in_bytes, a.recv, *out_bytes))
      return error(ACCORD_ERR_INVALID_ARGUMENT, "rank %d: %s: sendbuf and recvbuf overlap without being in place; use "
                   "separate buffers, or the in-place layout described in accord.h", rank_, name);
  }
  return Status::success();
}

// Note [Host chunk]: GPU and TCP calls cut messages at the slot (8 slots of 256 KiB per FIFO),
// where every chunk costs a flag hand-off or a message; smaller chunks were not measured there.
// On host buffers, slot-sized chunks cycle 2 MiB through each direction's FIFO, as much as
// this VM's L2 per core, and ran slower than any layout that used less of the FIFO:
// host calls with every rank on one host cut their messages at 64 KiB (512 KiB of each FIFO in
// use). Measured on the project VM (Intel Xeon @ 2.50 GHz, 2 vCPUs, 2 MiB L2 per core), 2
// ranks, all-reduce float32, medians of 4 alternated runs, out of place: 4 MiB 1679 us against
// 2199 with 256 KiB chunks, 16 MiB 6657 against 7741, 64 MiB 27602 against 30538. 32 slots of
// 64 KiB (2 MiB again) were as slow as the default and 4 slots of 256 KiB (1 MiB) as fast as
// 64 KiB chunks, so the FIFO's footprint decides, not the number of chunks. Reduce-scatter and
// all-gather gained 3-25% from 1 MiB up, broadcast and point-to-point neither gained nor lost
// (bench/NOTES-2026-11.md, "64 KiB chunks on host buffers"). Device calls, calls across hosts,
// ACCORD_CHUNK_BYTES and all-reduces chosen from a tune file keep chunk_bytes_. Every rank
// computes the same value when all run with the same settings, as ACCORD_CHUNK_BYTES and
// ACCORD_TUNE_FILE already require: the schedules of a call must agree.
//
// Except large all-reduces where the host's probe chose non-temporal stores (Note [Store mode
// probe]): from the streaming threshold, an all-reduce keeps the slot, in place or not. On the
// Intel Xeon model 207 VM (2 MiB L2 per core, 260 MiB L3; its probe chooses non-temporal
// stores) 64 KiB chunks were what remained of the loss at 16-64 MiB since 6e24fe8 (bisected to
// eb86b9a): 2 ranks, `-n 20 -w 5`, 8 alternated pairs under chrt -f 50, 256 KiB chunks against
// 64 KiB, median pair ratios out of place / in place 4 MiB 1.11 / 1.03, 16 MiB 1.13 / 1.03, 64
// MiB 1.25 / 1.11, 256 KiB and 1 MiB 0.98-1.09 (bench/NOTES-2026-11.md, "The 64 MiB loss found:
// 64 KiB chunks"). The Intel Xeon @ 2.50 GHz VM above, whose calls found ordinary stores faster,
// keeps 64 KiB chunks at every size. That the probe's choice and the better chunk go together
// is what those two CPUs showed, not a rule derived from a model; a tune file decides for a
// machine that measures otherwise. The threshold is the same on every rank of a host.
size_t Communicator::call_chunk(bool on_device, size_t bytes, Collective coll) const {
  if (on_device || nhosts_ > 1 || settings_.chunk_bytes > 0) return chunk_bytes_;
  if (coll == Collective::kAllReduce && bytes >= nt_threshold_) return chunk_bytes_;
  return std::min(chunk_bytes_, kHostChunkBytes);
}

// Note [Tuner model] (tuner.hpp): all-reduce asks the tuner for algorithm and chunk; the other
// collectives have one algorithm each.
Algo Communicator::choose_algo(const CollArgs& a, size_t bytes, bool on_device, size_t* chunk) {
  *chunk = call_chunk(on_device, bytes, a.coll);
  Algo pick;
  std::string why;
  switch (a.coll) {
    case Collective::kAllReduce:
      if (has_forced_algo_ && forced_algo_ != Algo::kChain) {
        pick = forced_algo_;
        why = "forced by ACCORD_ALGO";
        if (pick == Algo::kHierarchical && !hosts_even_) {
          pick = Algo::kRing;
          why = "ACCORD_ALGO=hier needs as many ranks on every host; ring instead";
        }
      } else {
        // Training and benchmarks repeat a few sizes: the tuner runs once per size (and path).
        const size_t key = bytes << 1 | (on_device ? 1 : 0);
        auto hit = tune_cache_.find(key);
        if (hit != tune_cache_.end()) {
          *chunk = hit->second.second;
          return hit->second.first;
        }
        // A tune file's chunks were measured up to the slot size (bench/calibrate.sh).
        if (!settings_.tune_file.empty()) *chunk = chunk_bytes_;
        const size_t max_chunk = *chunk;
        TuneChoice c = nhosts_ > 1
                           ? tuner_.choose_all_reduce_hosts(bytes, nranks_, host_layout_, oversubscribed_, max_chunk)
                           : tuner_.choose_all_reduce(bytes, nranks_, oversubscribed_, max_chunk);
        pick = c.pick.algo;
        if (c.pick.chunk_bytes != 0) *chunk = std::min(max_chunk, c.pick.chunk_bytes);
        why = std::move(c.why);
        if (tune_cache_.size() >= 256) tune_cache_.clear();
        tune_cache_.emplace(key, std::make_pair(pick, *chunk));
      }
      break;
    case Collective::kReduceScatter:
    case Collective::kAllGather:
      pick = Algo::kRing;
      why = "the only algorithm for this collective";
      break;
    case Collective::kBroadcast:
    case Collective::kReduce:
      pick = Algo::kChain;
      why = "pipelined chain";
      break;
    case Collective::kBarrier:
    default:
      pick = Algo::kDirect;
      why = "dissemination";
      break;
  }
  if (new_plan_to_log(a.coll, bytes,
                      static_cast<int>(pick) * 64 + (*chunk == chunk_bytes_ ? 0 : 1 + static_cast<int>(*chunk >> 16))))
    log_message(LogLevel::kInfo, LogCat::kTune, "%s of %zu bytes (%d ranks): %s, chunk %zu KiB (%s)",
                collective_name(a.coll), bytes, nranks_, algo_name(pick), *chunk >> 10, why.c_str());
  return pick;
}

// The tune log's line on a plan, once per collective, power-of-two size bucket and plan
// (`code`): whether this one is new there (and then it is recorded).
bool Communicator::new_plan_to_log(Collective coll, size_t bytes, int code) {
  if (!log_enabled(LogLevel::kInfo, LogCat::kTune)) return false;
  const auto key = std::make_pair(static_cast<int>(coll), bytes == 0 ? 0 : 64 - __builtin_clzll(bytes));
  auto it = logged_choices_.find(key);
  if (it != logged_choices_.end() && it->second == code) return false;
  logged_choices_[key] = code;
  return true;
}

const Schedule* Communicator::schedule_for(const ScheduleRequest& req, bool mapped) {
  auto key = std::make_tuple(static_cast<int>(req.coll) * 16 + static_cast<int>(req.algo), req.root, req.count,
                             req.elem_bytes, req.chunk_bytes, mapped ? 1 : 0, req.in_place);
  // Training repeats the same few calls: check the last one before the map.
  if (last_schedule_ != nullptr && key == last_key_) return last_schedule_;
  auto it = schedules_.find(key);
  if (it == schedules_.end()) {
    if (schedules_.size() >= 64) {
      schedules_.clear();
      memo_valid_ = false;  // its schedule is gone
    }
    Schedule s;
    if (!build_schedule(req, &s)) return nullptr;
    if (mapped)  // built over ring positions: peers become the ranks at those positions
      for (Step& st : s.steps) {
        if (st.send_peer >= 0) st.send_peer = engine_.ring()[static_cast<size_t>(st.send_peer)];
        if (st.recv_peer >= 0) st.recv_peer = engine_.ring()[static_cast<size_t>(st.recv_peer)];
      }
    it = schedules_.emplace(key, std::move(s)).first;
  }
  last_key_ = key;
  last_schedule_ = &it->second;
  return last_schedule_;
}

// Note [Death notes]: record whom this rank blames, so that ranks which find this process
// gone after it exits name the original culprit. The blamed rank is the one the message says
// died ("peer rank N died").
void Communicator::leave_death_note(const Status& s) {
  if (shm_ == nullptr || s.code() != ACCORD_ERR_REMOTE) return;
  const std::string& m = s.message();
  size_t at = m.find("peer rank ");
  if (at == std::string::npos) return;
  int blamed = std::atoi(m.c_str() + at + 10);
  if (blamed >= 0 && blamed < nranks_ && blamed != rank_) shm_->leave_death_note(rank_, blamed);
}

Status Communicator::check_consistency(const CollArgs& a) {
  CallDescriptor mine{static_cast<int32_t>(a.coll), a.dtype, reduces(a.coll) ? a.op : 0,
                      a.coll == Collective::kBroadcast || a.coll == Collective::kReduce ? a.root : 0,
                      a.coll == Collective::kBarrier ? 0 : static_cast<uint64_t>(a.count)};
  std::vector<CallDescriptor> all(static_cast<size_t>(nranks_));
  ScheduleRequest req;
  req.coll = Collective::kAllGather;
  req.algo = Algo::kRing;
  req.rank = rank_;
  req.nranks = nranks_;
  req.count = sizeof(CallDescriptor);
  req.elem_bytes = 1;
  req.chunk_bytes = chunk_bytes_;
  const Schedule* schedule = schedule_for(req);
  ExecArgs x;
  x.input = &mine;
  x.output = all.data();
  x.wait.deadline = Deadline::after_ms(settings_.timeout_ms);
  x.wait.abort_flag = &abort_;
  x.wait.self_rank = rank_;
  x.wait.operation = "ACCORD_CHECK argument exchange";
  x.wait.seq = seq_ + 1;
  x.tag = 0x43484b31;  // "CHK1": the check exchange itself is the same call on every rank
  Status s = execute(*schedule, x, links_);
  if (!s.ok()) {
    sticky_ = s;
    sticky_code_.store(s.code(), std::memory_order_release);
    return s;
  }
  for (int r = 0; r < nranks_; ++r) {
    if (std::memcmp(&all[static_cast<size_t>(r)], &mine, sizeof mine) != 0)
      return error(ACCORD_ERR_MISMATCH, "rank %d: ranks disagree on collective %llu: rank %d called %s, rank %d called "
                   "%s; every rank must make the same calls in the same order", rank_,
                   static_cast<unsigned long long>(seq_ + 1), r, describe(all[static_cast<size_t>(r)]).c_str(), rank_,
                   describe(mine).c_str());
  }
  return Status::success();
}

Status Communicator::run(const CollArgs& a) {
  if (is_point_to_point(a.coll)) return run_point_to_point({a});
  if (reduces(a.coll) && a.op >= ACCORD_NUM_OPS) return run_premul_host(a);  // Note [Pre-multiplied sum]
  return run_on(a, false);
}

// Note [Repeated calls]: training and benchmarks make the same call (collective, buffers,
// count, dtype, op, root) again and again. Checking the arguments, choosing the algorithm,
// finding the schedule, the kernel and the tag take about 1000 instructions, as long as the
// data exchange of an 8-byte all-reduce; for a call identical to the previous one, whose
// checks passed, run_on reuses that plan. Every result of plan_call depends only on those
// arguments and on the communicator, and the plan's schedule stays valid until schedules_ is
// cleared, which drops the memo. ACCORD_CHECK=1 plans every call (it checks every call).
Status Communicator::plan_call(const CollArgs& a, bool on_device, CallPlan* plan) {
  const char* name = collective_name(a.coll);
  size_t in_bytes = 0, out_bytes = 0;
  ACCORD_TRY(check_args(a, &in_bytes, &out_bytes));
  if (settings_.check && nranks_ > 1) ACCORD_TRY(check_consistency(a));
  if (a.count == 0 && a.coll != Collective::kBarrier) return Status::success();
  const size_t esize = a.coll == Collective::kBarrier ? 1 : accord_dtype_size(static_cast<accord_datatype_t>(a.dtype));
  const size_t bytes = a.count * esize;

  ScheduleRequest req;
  req.coll = a.coll;
  plan->single_copy = takes_single_copy(a, bytes, on_device);
  // Note [Single copy], in place above the window: the FIFOs' schedule is planned too.
  plan->single_copy_if_in_place = !plan->single_copy && single_copy_ && a.coll == Collective::kAllReduce &&
                                  !on_device && !has_forced_algo_ && bytes > single_copy_max_;
  req.algo = plan->single_copy ? Algo::kDirect : choose_algo(a, bytes, on_device, &req.chunk_bytes);
  if ((plan->single_copy || plan->single_copy_if_in_place) && new_plan_to_log(a.coll, bytes, -1))
    log_message(LogLevel::kInfo, LogCat::kTune, "%s of %zu bytes (%d ranks): single copy%s (every rank on this host; "
                "ACCORD_SINGLE_COPY_MIN %zu to _MAX %zu bytes)", name, bytes, nranks_,
                plan->single_copy ? "" : " if every rank is in place, else the plan above", single_copy_min_,
                single_copy_max_);
  req.host_of = host_of_.data();
  req.rank = rank_;
  req.nranks = nranks_;
  req.count = a.count;
  req.elem_bytes = esize;
  req.root = a.root;
  switch (a.coll) {
    case Collective::kReduceScatter:
      req.in_place = a.recv == static_cast<const uint8_t*>(a.send) + rank_ * bytes;
      break;
    case Collective::kAllGather:
      req.in_place = a.send == static_cast<const uint8_t*>(a.recv) + rank_ * bytes;
      break;
    default:
      req.in_place = a.send == a.recv;
  }
  // Note [Ring order]: on GPUs, rings and chains run in the topology's best ring order.
  const bool mapped = on_device && !engine_.ring().empty() &&
                      ((a.coll == Collective::kAllReduce && req.algo == Algo::kRing) || req.algo == Algo::kChain);
  if (mapped) {
    req.rank = engine_.pos_of()[static_cast<size_t>(rank_)];
    req.root = engine_.pos_of()[static_cast<size_t>(a.root)];
  }
  // Note [Board]: decided from the call and the communicator alone, so every rank agrees.
  plan->board = a.coll == Collective::kAllReduce && req.algo == Algo::kDirect && !on_device &&
                bytes <= kBoardPayloadBytes && remote_ranks_.empty() && shm_ != nullptr && shm_->board() != nullptr;
  plan->board = plan->board && !plan->single_copy;
  if (!plan->board && !plan->single_copy) {
    plan->schedule = schedule_for(req, mapped);
    if (plan->schedule == nullptr)
      return error(ACCORD_ERR_INTERNAL, "rank %d: %s: no schedule for algorithm %s", rank_, name, algo_name(req.algo));
  }
  if (reduces(a.coll)) {
    plan->reduce = kernels::get_reduce_fn(static_cast<accord_datatype_t>(a.dtype), static_cast<accord_red_op_t>(a.op));
    if (plan->reduce == nullptr)
      return error(ACCORD_ERR_UNSUPPORTED, "rank %d: %s: no kernel for this dtype and op", rank_, name);
  }
  plan->elem_bytes = esize;
  plan->out_bytes = out_bytes;
  plan->tag = call_tag(a);
  return Status::success();
}

Status Communicator::run_on(const CollArgs& a, bool on_device) {
  RankScope scope(rank_, nranks_);
  const char* name = collective_name(a.coll);
  if (!sticky_.ok())
    return Status(sticky_.code(), format("rank %d: %s refused: this communicator failed earlier and cannot be used "
                                         "again (destroy it and create a new one). The earlier error: %s",
                                         rank_, name, sticky_.message().c_str()));
  const bool repeat = memo_valid_ && on_device == memo_on_device_ && a.coll == memo_args_.coll &&
                      a.send == memo_args_.send && a.recv == memo_args_.recv && a.count == memo_args_.count &&
                      a.dtype == memo_args_.dtype && a.op == memo_args_.op && a.root == memo_args_.root;
  if (!repeat) {
    memo_valid_ = false;
    CallPlan plan;
    ACCORD_TRY(plan_call(a, on_device, &plan));
    if (plan.schedule == nullptr && !plan.board && !plan.single_copy) return Status::success();
    if (plan.schedule != nullptr) {
      for (const Step& st : plan.schedule->steps)
        if (st.kind == StepKind::kRecvReduceSend) plan.stage_bytes = std::max(plan.stage_bytes, st.bytes);
    }
    memo_args_ = a;
    memo_on_device_ = on_device;
    memo_plan_ = plan;
    memo_valid_ = !settings_.check;
  }
  const CallPlan& plan = memo_plan_;
  if (plan.board) return run_on_board(a, plan);
  if (plan.single_copy) return run_single_copy(a, plan, nullptr);
  if (plan.single_copy_if_in_place) {
    bool declined = false;
    Status s = run_single_copy(a, plan, &declined);
    if (!declined) return s;
    --seq_;  // the FIFOs run this call under the same number, on every rank alike
  }
  ExecArgs x;
  x.input = a.send;
  x.output = a.recv;
  x.elem_bytes = plan.elem_bytes;
  x.reduce = plan.reduce;
  if (reduces(a.coll)) x.divisor = a.op == ACCORD_AVG ? nranks_ : 0;
  // Note [Streaming in place]: in place, the output's lines are in the cache already (this
  // rank has just read them), so ordinary stores write them back once; non-temporal stores
  // there cost more (256 MiB, 2 ranks: 8.8 GB/s with ordinary stores, 5.8 with streaming).
  x.streaming = plan.out_bytes >= nt_threshold_ && a.send != a.recv;
  const Schedule* schedule = plan.schedule;
  if (schedule != nullptr) {
    if (scratch_.size() < schedule->scratch_bytes) scratch_.resize(schedule->scratch_bytes);
    x.scratch = scratch_.data();
    if (plan.stage_bytes > 0) {
      if (stage_.size() < plan.stage_bytes) stage_.resize(plan.stage_bytes);
      x.stage = stage_.data();
      x.stage_bytes = stage_.size();
    }
  }
  x.wait.deadline = Deadline::after_ms_coarse(settings_.timeout_ms);
  x.wait.abort_flag = &abort_;
  x.wait.self_rank = rank_;
  x.wait.operation = name;
  x.wait.seq = ++seq_;
  x.tag = plan.tag;
  x.fault = armed_fault();
  x.fault_step = fault_.step;
  return finish_call(execute(*schedule, x, links_));
}

Status Communicator::run_on_board(const CollArgs& a, const CallPlan& plan) {
  BoardCall c;
  c.input = a.send;
  c.output = a.recv;
  c.bytes = plan.out_bytes;
  c.elem_bytes = plan.elem_bytes;
  c.reduce = plan.reduce;
  c.divisor = a.op == ACCORD_AVG ? nranks_ : 0;
  c.tag = plan.tag;
  c.seq = ++board_seq_;
  board_ctx_.seq = ++seq_;
  board_ctx_.operation = collective_name(a.coll);
  c.fault = armed_fault();
  c.fault_step = fault_.step;
  return finish_call(execute_on_board(*shm_->board(), c, &board_ctx_, settings_.timeout_ms));
}

// Note [Single copy] (single_copy.cpp): two board calls, the addresses and the end.
Status Communicator::run_single_copy(const CollArgs& a, const CallPlan& plan, bool* declined) {
  SingleCopyCall c;
  c.coll = a.coll;
  c.input = a.send;
  c.output = a.recv;
  c.bytes = a.count * plan.elem_bytes;
  c.root = a.root;
  c.elem_bytes = plan.elem_bytes;
  c.reduce = plan.reduce;
  c.divisor = a.op == ACCORD_AVG ? nranks_ : 0;
  c.tag = plan.tag;
  c.seq = board_seq_ + 1;
  board_seq_ += 2;
  board_ctx_.seq = ++seq_;
  board_ctx_.operation = collective_name(a.coll);
  c.fault = armed_fault();
  c.fault_step = fault_.step;
  c.in_place_only = declined != nullptr;
  c.declined = declined;
  if (single_copy_tmp_.size() < kSingleCopyChunk) single_copy_tmp_.resize(kSingleCopyChunk);
  Status s = execute_single_copy(*shm_->board(), single_copy_peers_, c, single_copy_tmp_.data(), &board_ctx_,
                                 settings_.timeout_ms);
  if (log_enabled(LogLevel::kDebug, LogCat::kTune) && s.ok() && declined != nullptr)
    log_message(LogLevel::kDebug, LogCat::kTune, "%s (seq %llu) of %zu bytes: %s", board_ctx_.operation,
                static_cast<unsigned long long>(seq_), c.bytes,
                *declined ? "the FIFOs (not every rank in place)" : "single copy (every rank in place)");
  return finish_call(std::move(s));
}

// Note [Single copy]: decided from the call and the communicator alone (the window is the
// one every rank agreed on at init), so every rank agrees. `bytes` is the call's count times
// its element size, as every rank passes it: the buffer of an all-reduce or broadcast, the
// input of an all-gather (a rank's block of its output), the output of a reduce-scatter (a
// rank's block of its input). Narrowed where the FIFOs were faster (bench/ab.py, 2 ranks,
// Note [Single copy]): an all-gather's output and a reduce-scatter's input, nranks times
// `bytes`, must fit under ACCORD_SINGLE_COPY_MAX too (beyond, out of place, the FIFOs won, as
// for the all-reduce); broadcasts and reduce-scatters start at kSingleCopyFloor (below, they
// tied or lost); reduces keep the FIFOs (both schedules tried lost). The board keeps the
// smallest all-reduces, and ACCORD_ALGO, when set, its algorithm.
bool Communicator::takes_single_copy(const CollArgs& a, size_t bytes, bool on_device) const {
  if (!single_copy_ || on_device || has_forced_algo_ || bytes < single_copy_min_ || bytes > single_copy_max_)
    return false;
  const size_t whole = bytes * static_cast<size_t>(nranks_);
  switch (a.coll) {
    case Collective::kAllReduce:
      return bytes > kBoardPayloadBytes;
    case Collective::kBroadcast:
      return bytes >= kSingleCopyFloor;
    case Collective::kAllGather:
      return whole <= single_copy_max_;
    case Collective::kReduceScatter:
      return bytes >= kSingleCopyFloor && whole <= single_copy_max_;
    default:
      return false;
  }
}

// Note [Single copy] (single_copy.cpp): the probe at init. Every rank takes part in both store
// rounds whatever its settings, so that the rounds stay in step: first each rank's pid and the
// address of its probe word, or "off" and why; then what each found reading its peers' words
// ("ok MIN MAX", or "no" and why). The job takes the single copy only if every rank said ok,
// in the window all of them allow; else every rank names the same reason (the first in rank
// order).
Status Communicator::decide_single_copy(StoreClient* store, Deadline deadline) {
  single_copy_ = false;
  std::string why_not;
  if (!settings_.single_copy) why_not = "ACCORD_SINGLE_COPY=0";
  else if (!remote_ranks_.empty()) why_not = "ranks on other hosts";
  else if (shm_ == nullptr || shm_->board() == nullptr) why_not = "no shared memory between the ranks";
  if (why_not.empty()) allow_peers_to_read_memory();
  std::vector<std::string> words;
  ACCORD_TRY(store->all_gather("single_copy_probe", rank_, nranks_,
                               why_not.empty() ? format("%ld %p", static_cast<long>(getpid()),
                                                        static_cast<const void*>(single_copy_probe_word()))
                                               : "off " + why_not,
                               &words, deadline));
  if (!why_not.empty()) why_not = format("rank %d: %s", rank_, why_not.c_str());
  single_copy_peers_.assign(static_cast<size_t>(nranks_), SingleCopyPeer{});
  for (int r = 0; why_not.empty() && r < nranks_; ++r) {
    if (r == rank_) continue;
    SingleCopyPeer& peer = single_copy_peers_[static_cast<size_t>(r)];
    peer.same_process = same_process(rank_, r);
    peer.pid = static_cast<pid_t>(pid_of_[static_cast<size_t>(r)]);
    const std::string& w = words[static_cast<size_t>(r)];
    long pid = 0;
    void* addr = nullptr;
    if (w.rfind("off ", 0) == 0) {
      why_not = format("rank %d: %s", r, w.c_str() + 4);
    } else if (peer.same_process) {
      continue;
    } else if (std::sscanf(w.c_str(), "%ld %p", &pid, &addr) != 2) {
      why_not = format("rank %d sent '%s' in the probe's first round", r, w.c_str());
    } else if (pidns_of_[static_cast<size_t>(r)] != pidns_of_[static_cast<size_t>(rank_)]) {
      why_not = format("rank %d: rank %d is in another pid namespace", rank_, r);
    } else {
      uint64_t value = 0;
      bool gone = false;
      const std::string e = read_process_memory(peer.pid, &value, addr, sizeof value, &gone);
      if (!e.empty())
        why_not = format("rank %d could not read rank %d's memory (pid %ld) with process_vm_readv: %s", rank_, r,
                         pid, e.c_str());
      else if (value != kSingleCopyProbeValue)
        why_not = format("rank %d read a wrong value from rank %d's memory (pid %ld)", rank_, r, pid);
    }
  }
  // This rank's window: the built-in one unless set. Below 256 KiB with more ranks than CPUs,
  // the two board posts a call waits for (every rank must run for each) cost more than the
  // copies save; above 32 MiB in all (the ranks' outputs are as many bytes again), out of
  // place, the caches no longer hold the outputs and the FIFOs' non-temporal stores win (Note
  // [Single copy]).
  const long long window_min = settings_.single_copy_min > 0 ? settings_.single_copy_min
                                                             : oversubscribed_ ? 256 << 10 : 16 << 10;
  const long long window_max = settings_.single_copy_max > 0 ? settings_.single_copy_max : (32LL << 20) / nranks_;
  std::vector<std::string> verdicts;
  ACCORD_TRY(store->all_gather("single_copy_ok", rank_, nranks_,
                               why_not.empty() ? format("ok %lld %lld", static_cast<long long>(window_min),
                                                        static_cast<long long>(window_max))
                                               : "no " + why_not,
                               &verdicts, deadline));
  long long lo = 0, hi = INT64_MAX;
  std::string reason;
  for (int r = 0; r < nranks_ && reason.empty(); ++r) {
    const std::string& v = verdicts[static_cast<size_t>(r)];
    long long a = 0, b = 0;
    if (std::sscanf(v.c_str(), "ok %lld %lld", &a, &b) == 2) {
      lo = std::max(lo, a);
      hi = std::min(hi, b);
    } else {
      reason = v.rfind("no ", 0) == 0 ? v.substr(3) : format("rank %d sent '%s'", r, v.c_str());
    }
  }
  if (!reason.empty()) {
    LOG_INFO(kInit, "rank %d: single copy: off (%s); host collectives go through the shared-memory FIFOs",
             rank_, reason.c_str());
    return Status::success();
  }
  single_copy_ = true;
  single_copy_min_ = static_cast<size_t>(lo);
  single_copy_max_ = static_cast<size_t>(hi);
  LOG_INFO(kInit, "rank %d: single copy: collectives of %zu to %zu bytes read and write the peers' buffers "
           "directly (all-reduce, all-gather, broadcast, reduce-scatter; process_vm_readv/writev; "
           "ACCORD_SINGLE_COPY=0 turns it off)",
           rank_, single_copy_min_, single_copy_max_);
  return Status::success();
}

// Note [Departures] (wait.hpp). After the engine's release: the kernels have ended (or were
// given up on), so DevCtl::done is the last device call this rank completed. Nothing is
// published after an error or an abort: peers then report the exit as a death, as before, and
// name the first culprit through the death notes.
void Communicator::publish_departure() {
  if (shm_ == nullptr || abort_.load(std::memory_order_acquire)) return;
  if (engine_.has_kernels()) engine_.adopt_kernel_error();
  if (sticky_code_.load(std::memory_order_acquire) != ACCORD_SUCCESS) return;
  shm_->depart(rank_, seq_, engine_.device_done());
}

void Communicator::set_sticky(const Status& s) {
  std::lock_guard<std::mutex> lock(sticky_mu_);
  if (sticky_code_.load() != ACCORD_SUCCESS) return;
  sticky_ = s;
  sticky_code_.store(s.code(), std::memory_order_release);
  leave_death_note(s);
  LOG_WARN(kColl, "%s", s.message().c_str());
}

const FaultPlan* Communicator::armed_fault() const {
  return fault_.at("coll", rank_) && static_cast<long>(seq_) == fault_.seq ? &fault_ : nullptr;
}

Status Communicator::finish_call(Status s) {
  if (!s.ok()) {
    sticky_ = s;
    sticky_code_.store(s.code(), std::memory_order_release);
    leave_death_note(s);
    LOG_WARN(kColl, "%s", s.message().c_str());
  }
  return s;
}

}  // namespace accord
