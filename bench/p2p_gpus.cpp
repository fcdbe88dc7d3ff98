// p2p_bandwidth, GPU pairs of this process (see p2p_bandwidth.hpp).
//
// For every ordered pair (a -> b): if each GPU may access the other's memory and
// ACCORD_P2P_DISABLE is not set, peer access is enabled both ways and a direct copy
// (copy_peer_async on a's stream) is timed; otherwise the copy is staged through pinned host
// memory as the host-staged transport does it: chunks of the shm slot size, as many in flight as
// it has slots, a's stream copying device -> pinned and b's stream pinned -> device, ordered by
// events. Bandwidth: size / median time of one copy (enqueue to stream synchronize) at each size.
// Latency: median of --lat-iters copies of -l bytes on the same route. The prediction is the
// topology's System::bandwidth_gbs for the route (simulated runtime: the System it obeys; CUDA:
// the detected one).
#include <accord/accord.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/p2p_bandwidth.hpp"
#include "core/settings.hpp"
#include "core/status.hpp"
#include "topology/detect.hpp"
#include "topology/system.hpp"
#include "transport/device/device_runtime.hpp"
#include "transport/device/sim_runtime.hpp"

namespace accord::bench::p2p {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Byte i of GPU g's source buffer.
uint8_t pattern(int g, size_t i) { return static_cast<uint8_t>((i * 131 + static_cast<size_t>(g) * 29 + 7) >> 3); }

// The staged estimate for a pair: the topology's figure when the pair cannot peer (it is
// already the staged route's), else what the host-staged route of its PCIe legs gives.
double staged_estimate(const topo::System& sys, int a, int b) {
  if (!sys.p2p(a, b)) return sys.bandwidth_gbs(a, b);
  auto leg = [&](int gpu) {
    for (int d = sys.gpus[static_cast<size_t>(gpu)], hops = 0; d >= 0 && hops < 64; d = sys.devices[d].parent, ++hops) {
      const double bw = topo::pci_bandwidth_gbs(sys.devices[d].pci_speed_gts, sys.devices[d].pci_width);
      if (bw > 0) return bw;
    }
    return topo::kDefaultPciGbs;
  };
  return std::min(leg(a), leg(b)) * topo::kHostStagingFactor;
}

// The communicator's shared-memory slots when ACCORD_SHM_SLOT_BYTES / ACCORD_SHM_NSLOTS are not
// set: collectives/communicator.cpp's kDefaultSlotBytes and kDefaultSlots (keep them equal).
constexpr size_t kCommSlotBytes = 256 << 10;
constexpr int kCommSlots = 8;

class GpuBench {
 public:
  GpuBench(const Options& o, DeviceRuntime* rt, int ngpus) : o_(o), rt_(rt), n_(ngpus) {}
  ~GpuBench() { release(); }

  Status setup(const Settings& s) {
    chunk_ = o_.chunk_bytes      ? o_.chunk_bytes
             : s.shm_slot_bytes > 0 ? static_cast<size_t>(s.shm_slot_bytes)
                                    : kCommSlotBytes;
    nslots_ = s.shm_nslots > 0 ? static_cast<int>(s.shm_nslots) : kCommSlots;
    bytes_ = std::max(o_.sizes.back(), o_.lat_bytes);
    src_.assign(static_cast<size_t>(n_), nullptr);
    dst_.assign(static_cast<size_t>(n_), nullptr);
    streams_.resize(static_cast<size_t>(n_));
    events_.assign(static_cast<size_t>(n_), std::vector<Event>(static_cast<size_t>(nslots_)));
    auto where = [&](int g, const Status& st, const char* what, const char* hint = "") {
      if (st.ok()) return Status();
      return Status(st.code(), format("GPU %d: %s (%zu bytes): %s%s", g, what, bytes_, st.message().c_str(), hint));
    };
    for (int g = 0; g < n_; ++g) {
      const size_t gi = static_cast<size_t>(g);
      Status st = rt_->alloc_device(g, bytes_, &src_[gi]);
      if (st.ok()) st = rt_->alloc_device(g, bytes_, &dst_[gi]);
      if (!st.ok()) return where(g, st, "alloc_device", "; use a smaller -e or -l, or fewer GPUs (-g)");
    }
    std::vector<uint8_t> host(bytes_);  // after the device memory, whose errors say more
    for (int g = 0; g < n_; ++g) {
      const size_t gi = static_cast<size_t>(g);
      for (size_t i = 0; i < bytes_; ++i) host[i] = pattern(g, i);
      ACCORD_TRY(where(g, rt_->copy(CopyKind::kHostToDevice, g, src_[gi], host.data(), bytes_), "filling the source"));
      ACCORD_TRY(where(g, rt_->create_stream(g, &streams_[gi]), "create_stream"));
      for (Event& e : events_[gi]) ACCORD_TRY(where(g, rt_->create_event(g, &e), "create_event"));
    }
    Status st = rt_->alloc_host_pinned(chunk_ * static_cast<size_t>(nslots_), &pinned_);
    if (!st.ok())
      return Status(st.code(), format("alloc_host_pinned (%d x %zu bytes, host staging): %s; use a smaller --chunk",
                                      nslots_, chunk_, st.message().c_str()));
    zeros_.assign(bytes_, 0);
    check_.resize(bytes_);
    return Status();
  }

  size_t chunk() const { return chunk_; }
  int nslots() const { return nslots_; }

  // One copy a -> b of `bytes` over the route, waited for.
  Status copy(bool direct, int a, int b, size_t bytes) {
    const size_t ai = static_cast<size_t>(a), bi = static_cast<size_t>(b);
    if (direct) {
      ACCORD_TRY(rt_->copy_peer_async(b, dst_[bi], a, src_[ai], bytes, streams_[ai]));
      return rt_->synchronize_stream(streams_[ai]);
    }
    // Slot k % nslots: a's stream waits until b's stream has emptied it (events_[b]), fills it
    // and records events_[a]; b's stream waits for that record and empties it.
    const char* src = static_cast<const char*>(src_[ai]);
    char* dst = static_cast<char*>(dst_[bi]);
    for (size_t off = 0, k = 0; off < bytes; off += chunk_, ++k) {
      const size_t len = std::min(chunk_, bytes - off);
      const size_t slot = k % static_cast<size_t>(nslots_);
      char* stage = static_cast<char*>(pinned_) + slot * chunk_;
      ACCORD_TRY(rt_->stream_wait_event(streams_[ai], events_[bi][slot]));
      ACCORD_TRY(rt_->copy_async(CopyKind::kDeviceToHost, stage, src + off, len, streams_[ai]));
      ACCORD_TRY(rt_->record_event(events_[ai][slot], streams_[ai]));
      ACCORD_TRY(rt_->stream_wait_event(streams_[bi], events_[ai][slot]));
      ACCORD_TRY(rt_->copy_async(CopyKind::kHostToDevice, dst + off, stage, len, streams_[bi]));
      ACCORD_TRY(rt_->record_event(events_[bi][slot], streams_[bi]));
    }
    ACCORD_TRY(rt_->synchronize_stream(streams_[bi]));
    return rt_->synchronize_stream(streams_[ai]);
  }

  // Median seconds of one copy after `warmup` untimed ones.
  Status time(bool direct, int a, int b, size_t bytes, int warmup, int iters, double* out) {
    for (int i = 0; i < warmup; ++i) ACCORD_TRY(copy(direct, a, b, bytes));
    std::vector<double> t;
    for (int i = 0; i < iters; ++i) {
      const auto t0 = Clock::now();
      ACCORD_TRY(copy(direct, a, b, bytes));
      t.push_back(seconds_since(t0));
    }
    *out = median(std::move(t));
    return Status();
  }

  Status clear_dst(int b, size_t bytes) {
    return rt_->copy(CopyKind::kHostToDevice, b, dst_[static_cast<size_t>(b)], zeros_.data(), bytes);
  }
  // Bytes of b's destination that differ from a's source over the first `bytes`.
  Status wrong_bytes(int a, int b, size_t bytes, size_t* wrong) {
    ACCORD_TRY(rt_->copy(CopyKind::kDeviceToHost, b, check_.data(), dst_[static_cast<size_t>(b)], bytes));
    *wrong = 0;
    for (size_t i = 0; i < bytes; ++i) *wrong += check_[i] != pattern(a, i);
    return Status();
  }

 private:
  void release() {
    for (Stream& s : streams_)
      if (s.id) (void)rt_->destroy_stream(s);
    for (auto& evs : events_)
      for (Event& e : evs)
        if (e.id) (void)rt_->destroy_event(e);
    for (void* p : src_) (void)rt_->free_device(p);
    for (void* p : dst_) (void)rt_->free_device(p);
    if (pinned_) (void)rt_->free_host_pinned(pinned_);
  }

  const Options& o_;
  DeviceRuntime* rt_;
  int n_;
  size_t chunk_ = 0, bytes_ = 0;
  int nslots_ = 0;
  std::vector<void*> src_, dst_;
  std::vector<Stream> streams_;
  std::vector<std::vector<Event>> events_;  // per GPU, one per staging slot
  void* pinned_ = nullptr;
  std::vector<uint8_t> zeros_, check_;
};

}  // namespace

int run_gpus(const Options& o) {
  Settings s;
  Status st = load_settings(&s);
  if (!st.ok()) {
    std::fprintf(stderr, "p2p_bandwidth: %s\n", st.message().c_str());
    return 2;
  }
  std::string why;
  DeviceRuntime* rt = process_device_runtime(s, &why);
  if (rt == nullptr || rt->device_count() == 0) {
    const std::string text = rt ? rt->description() : why;
    std::fprintf(stderr, "p2p_bandwidth: no GPUs in this process (%s).%s Rank pairs on host memory: run under mpirun, "
                 "or with -t N.\n", text.c_str(),
                 text.find("ACCORD_SIM_TOPO=FILE") == std::string::npos ? " Set ACCORD_SIM_TOPO=FILE for simulated GPUs." : "");
    return 2;
  }
  const int have = rt->device_count();
  const int n = o.gpus > 0 ? o.gpus : have;
  if (n > have) {
    std::fprintf(stderr, "p2p_bandwidth: -g %d, but the runtime has %d GPUs (%s)\n", n, have, rt->description().c_str());
    return 2;
  }
  if (n < 2) {
    std::fprintf(stderr, "p2p_bandwidth: %d GPU (%s): a pair needs two; rank pairs on host memory: mpirun or -t N\n", n,
                 rt->description().c_str());
    return 2;
  }

  // The prediction's topology: the simulation's own, or the detected one when it has these GPUs.
  Context ctx;
  ctx.mode = "gpus";
  const bool simulated = std::strcmp(rt->kind(), "simulated") == 0;
  topo::System detected;
  const topo::System* sys = nullptr;
  std::string sys_note;
  if (auto* sim = dynamic_cast<SimulatedRuntime*>(rt)) {
    sys = &sim->system();
    sys_note = "the simulated machine's topology (" + sys->source + ")";
  } else {
    Status d = topo::detect_system(s, &detected);
    if (!d.ok()) sys_note = "none (topology detection failed: " + d.message() + ")";
    else if (detected.gpu_count() != have)
      sys_note = format("none (the detected topology has %d GPUs, the runtime %d)", detected.gpu_count(), have);
    else sys = &detected, sys_note = "the detected topology (" + detected.source + ")";
  }
  // The topology's index of each GPU this process sees, by PCI bus id (Note [GPU identity]):
  // ordinals differ from it under CUDA_VISIBLE_DEVICES (every rank's "GPU 0") or CUDA's
  // fastest-first order.
  std::vector<int> topo_of(static_cast<size_t>(n), -1);
  for (int g = 0; sys != nullptr && g < n; ++g) {
    DeviceInfo info;
    const std::string bus = rt->device_info(g, &info).ok() ? topo::normalize_bus_id(info.pci_bus_id) : "";
    if (auto* sim = dynamic_cast<SimulatedRuntime*>(rt))  // it names GPUs without a bus id too
      topo_of[static_cast<size_t>(g)] = sim->physical_of_bus(info.pci_bus_id);
    else
      for (int t = 0; t < sys->gpu_count() && !bus.empty(); ++t)
        if (topo::normalize_bus_id(sys->gpu(t).pci_bus_id) == bus) topo_of[static_cast<size_t>(g)] = t;
    if (topo_of[static_cast<size_t>(g)] < 0) {
      sys_note = format("none (%s has no GPU of bus id %s, GPU %d of this process)",
                        sys == &detected ? "the detected topology" : "the simulated machine's topology",
                        info.pci_bus_id.c_str(), g);
      sys = nullptr;
    }
  }
  ctx.notes.push_back("runtime: " + rt->description());
  if (simulated && !s.sim_throttle)
    ctx.notes.push_back(
        "SIMULATED GPUs: their memory is host memory, so every measured figure is this machine's host memcpy speed, "
        "not the modeled machine's; ratios and flags describe this machine (ACCORD_SIM_THROTTLE=1 makes copies take "
        "the topology's time instead)");
  if (simulated && s.sim_throttle)
    ctx.notes.push_back("SIMULATED GPUs with ACCORD_SIM_THROTTLE=1: copies take at least the topology's time, so the "
                        "figures show the model's shape, capped by this machine's memcpy speed");
  ctx.notes.push_back("prediction: " + sys_note +
                      (sys ? ": System::bandwidth_gbs of the route (NVLinks x per-link rate, else the PCIe legs, "
                             "x 0.5 when host-staged)"
                           : ""));

  GpuBench bench(o, rt, n);
  st = bench.setup(s);
  if (!st.ok()) {
    std::fprintf(stderr, "p2p_bandwidth: %s\n", st.message().c_str());
    return 2;
  }
  ctx.notes.push_back(format("bandwidth: size / median time of one copy (%d timed after %d warm-ups, enqueue to "
                             "stream synchronize); latency: median of %d copies of %zu B",
                             o.iters, o.warmup, o.lat_iters, o.lat_bytes));
  ctx.notes.push_back(format("host-staged route: device -> pinned host -> device, %s chunks, %d in flight (the shm "
                             "transport's slots), a stream on each GPU%s",
                             size_name(bench.chunk()).c_str(), bench.nslots(),
                             s.p2p_disable ? "; ACCORD_P2P_DISABLE=1: every pair is host-staged" : ""));
  std::printf("# Accord benchmark: p2p_bandwidth, %d GPUs of this process, %d ordered pairs\n", n, n * (n - 1));
  for (const std::string& line : ctx.notes) std::printf("# %s\n", line.c_str());
  std::fflush(stdout);

  std::vector<PairResult> rows;
  int code = 0;
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      PairResult r;
      r.src = a;
      r.dst = b;
      const int ta = topo_of[static_cast<size_t>(a)], tb = topo_of[static_cast<size_t>(b)];  // the topology's
      r.path = sys ? topo::path_class_name(sys->path(ta, tb), sys->pair(ta, tb).nvlinks) : "?";
      bool ab = false, ba = false;
      Status c = rt->can_access_peer(a, b, &ab);
      if (c.ok()) c = rt->can_access_peer(b, a, &ba);
      if (!c.ok()) {
        std::fprintf(stderr, "p2p_bandwidth: GPU %d -> GPU %d: can_access_peer: %s\n", a, b, c.message().c_str());
        return 2;
      }
      bool direct = ab && ba && !s.p2p_disable;
      if (s.p2p_disable) r.why = "ACCORD_P2P_DISABLE=1";
      else if (!direct)
        r.why = format("no peer access (can_access_peer %d->%d: %s, %d->%d: %s)%s%s", a, b, ab ? "yes" : "no", b, a,
                       ba ? "yes" : "no", sys ? ": " : "", sys ? sys->p2p_reason(ta, tb).c_str() : "");
      else r.why = "peer access both ways";
      if (direct) {
        Status e = rt->enable_peer(a, b);
        if (e.ok()) e = rt->enable_peer(b, a);
        if (!e.ok()) {
          // The driver said yes and then no: time what a transport would fall back to.
          std::fprintf(stderr,
                       "p2p_bandwidth: GPU %d -> GPU %d: can_access_peer said yes but enable_peer failed (%s); timing "
                       "the pair host-staged. Check the driver (nvidia-smi topo -p2p rw), or set "
                       "ACCORD_P2P_DISABLE=1.\n",
                       a, b, e.message().c_str());
          direct = false;
          r.why = "enable_peer failed: " + e.message();
          code = std::max(code, 1);
        }
      }
      r.route = direct ? "p2p" : "host-staged";
      if (sys) r.predicted_gbs = direct ? sys->bandwidth_gbs(ta, tb) : staged_estimate(*sys, ta, tb);
      auto fail = [&](const Status& f, const char* what) {
        std::fprintf(stderr, "p2p_bandwidth: GPU %d -> GPU %d (%s): %s: %s\n", a, b, r.route.c_str(), what,
                     f.message().c_str());
        return 2;
      };
      for (size_t size : o.sizes) {
        double t = 0;
        Status m = bench.time(direct, a, b, size, o.warmup, o.iters, &t);
        if (!m.ok()) return fail(m, "bandwidth copy");
        r.time_us.push_back(t * 1e6);
        r.gbs.push_back(static_cast<double>(size) / t / 1e9);
      }
      const size_t big = o.sizes.back();
      auto verify = [&](const char* route) {
        size_t wrong = 0;
        Status v = bench.wrong_bytes(a, b, big, &wrong);
        if (!v.ok()) return fail(v, "reading the destination back"), false;
        if (wrong) {
          std::fprintf(stderr, "p2p_bandwidth: GPU %d -> GPU %d (%s): %zu of %zu bytes wrong after the copy\n", a, b,
                       route, wrong, big);
          code = std::max(code, 1);
        }
        return true;
      };
      if (o.check && !verify(r.route.c_str())) return 2;
      if (direct && o.compare_staged) {
        double t = 0;
        Status m = o.check ? bench.clear_dst(b, big) : Status();
        if (m.ok()) m = bench.time(false, a, b, big, o.warmup, o.iters, &t);
        if (!m.ok()) return fail(m, "host-staged comparison copy");
        r.staged_gbs = static_cast<double>(big) / t / 1e9;
        if (o.check && !verify("host-staged")) return 2;
      }
      double lat = 0;
      Status m = bench.time(direct, a, b, o.lat_bytes, 5, o.lat_iters, &lat);
      if (!m.ok()) return fail(m, "latency copy");
      r.latency_us = lat * 1e6;
      rows.push_back(std::move(r));
    }
  if (o.show_plan) {
    std::printf("#\n# Plan (route of every ordered pair and why):\n");
    for (const PairResult& r : rows)
      std::printf("#   GPU %d -> GPU %d: %s over %s (%s)\n", r.src, r.dst, r.route.c_str(), r.path.c_str(),
                  r.why.c_str());
  }
  const int flagged = print_results(o, ctx, rows);
  if (flagged < 0) code = 2;
  return code;
}

}  // namespace accord::bench::p2p
