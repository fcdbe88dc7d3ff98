// The store-mode probe at init and the decision every rank of a host takes from it.
#include "collectives/store_probe.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "collectives/kernels/reduce_kernels.hpp"
#include "core/clock.hpp"

namespace accord {
namespace {

constexpr size_t kProbeBytes = kStreamingFromBytes;  // the smallest size the choice applies to
constexpr size_t kProbeChunk = 64 << 10;             // a host call's chunk (Note [Host chunk])
constexpr size_t kProbeSlots = 8;                    // a FIFO's slots (kDefaultSlots)
constexpr int kProbePasses = 4;                      // timed passes per kind of store

}  // namespace

// Note [Store mode probe]: non-temporal stores of a large out-of-place output (ExecArgs::
// streaming) pay on one machine and lose on another: on the AMD EPYC VM (32 MiB L3) 16-256 MiB
// all-reduces ran faster with them, on the Intel Xeon VM of 2026-11-26 (35.8 MiB L3) slower at
// every size from 4 MiB (bench/NOTES-2026-11.md). Commit 297fdca let the first 33 calls of each
// collective that would stream alternate the two kinds and keep the faster, per rank; a job's
// first large calls then ran half the time in the slower kind (nccl-tests' `-n 20` measured
// 25-35% less at 16-64 MiB, issue 36). Now every rank of a host runs this probe at init, at
// the same time as the others (they leave the same store round together), so that the cores
// compete for memory as in a call: a 4 MiB float sum in 64 KiB chunks, each chunk first
// copied into one of 8 slot-sized buffers the way a message goes to a peer (copy_to_peer),
// then reduced with an older one into the output, with ordinary or non-temporal stores.
// Passes alternate between the two kinds after one cold pass, 4 each (a plain copy timed alone
// said the opposite of the all-reduces on the 2026-11-26 VM, so the probe does what a call
// does, with the other ranks busy too). Each rank sends its fastest pass of each kind through
// the bootstrap store, and every rank applies decide_store_mode to its host's probes, so the
// ranks of a host agree. The fastest pass, not the median: other work on the machine only adds
// time, in whole scheduler ticks. About 10 ms (8.5 MiB of buffers, 9 passes of about 1 ms).
// ACCORD_NT_THRESHOLD set skips it; so does a sanitizer build (its kernels run the plain loop,
// which says nothing about the real ones), which keeps ordinary stores.
StoreProbe run_store_probe() {
  StoreProbe p;
  const int64_t start = now_ns();
  const size_t total = 2 * kProbeBytes + kProbeSlots * kProbeChunk;
  auto* mem = static_cast<uint8_t*>(std::aligned_alloc(4096, total));
  if (mem == nullptr) return p;
  std::memset(mem, 0, total);  // every page faulted in before any pass is timed
  uint8_t* in = mem;
  uint8_t* out = mem + kProbeBytes;
  uint8_t* slots = out + kProbeBytes;
  const kernels::ReduceFn sum = kernels::get_reduce_fn(ACCORD_FLOAT32, ACCORD_SUM);
  double best[2] = {0, 0};  // [streaming]
  for (int pass = 0; pass <= 2 * kProbePasses; ++pass) {
    const bool streaming = pass % 2 == 1;  // pass 0, ordinary, is cold and not timed
    const int64_t t0 = now_ns();
    for (size_t off = 0, i = 0; off < kProbeBytes; off += kProbeChunk, ++i) {
      kernels::copy_to_peer(slots + i % kProbeSlots * kProbeChunk, in + off, kProbeChunk);
      kernels::ReduceArgs a;
      a.dst0 = out + off;
      a.a = in + off;
      a.b = slots + (i + kProbeSlots / 2) % kProbeSlots * kProbeChunk;
      a.count = kProbeChunk / 4;
      a.dst0_streaming = streaming;
      sum(a);
    }
    const double ns = static_cast<double>(now_ns() - t0) / static_cast<double>(kProbeBytes);
    if (pass == 0) continue;
    double& b = best[streaming];
    b = b > 0 ? std::min(b, ns) : ns;
  }
  std::free(mem);
  p.ordinary_ns_per_byte = best[0];
  p.streaming_ns_per_byte = best[1];
  p.took_ms = static_cast<double>(now_ns() - start) / 1e6;
  return p;
}

// Note [Store mode probe]: a collective waits for its slowest rank, so each kind of store
// counts as the slowest rank's fastest pass; non-temporal stores win only if that is at least
// 5% faster than with ordinary stores (they are a gamble where the output is read soon). A
// probe missing or not a positive number leaves ordinary stores.
StoreDecision decide_store_mode(const std::vector<StoreProbe>& host_probes) {
  StoreDecision d;
  if (host_probes.empty()) return d;
  for (const StoreProbe& p : host_probes) {
    const bool valid = std::isfinite(p.ordinary_ns_per_byte) &&
                       std::isfinite(p.streaming_ns_per_byte) && p.ordinary_ns_per_byte > 0 &&
                       p.streaming_ns_per_byte > 0;
    if (!valid) return StoreDecision{};
    d.ordinary_ns_per_byte = std::max(d.ordinary_ns_per_byte, p.ordinary_ns_per_byte);
    d.streaming_ns_per_byte = std::max(d.streaming_ns_per_byte, p.streaming_ns_per_byte);
  }
  d.measured = true;
  d.streaming = d.streaming_ns_per_byte < kStreamingGain * d.ordinary_ns_per_byte;
  return d;
}

// Exact round trip: every rank must decide from the same numbers.
std::string encode_store_probe(const StoreProbe& p) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%a %a %a", p.ordinary_ns_per_byte, p.streaming_ns_per_byte,
                p.took_ms);
  return buf;
}

bool decode_store_probe(const std::string& text, StoreProbe* out) {
  StoreProbe p;
  if (std::sscanf(text.c_str(), "%la %la %la", &p.ordinary_ns_per_byte, &p.streaming_ns_per_byte,
                  &p.took_ms) != 3)
    return false;
  *out = p;
  return true;
}

}  // namespace accord
