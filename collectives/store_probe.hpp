// Which kind of store writes a large out-of-place output: decided once at init, for every rank
// of a host alike (Note [Store mode probe], store_probe.cpp).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace accord {

// One rank's probe: its fastest pass with each kind of store, in ns per output byte
// (0: not measured).
struct StoreProbe {
  double ordinary_ns_per_byte = 0;
  double streaming_ns_per_byte = 0;
  double took_ms = 0;  // the whole probe, buffers included (for the log)
};

// Runs the probe on this thread: a 4 MiB float sum written in host chunks, passes alternating
// between ordinary and non-temporal stores after one cold pass. A few milliseconds.
StoreProbe run_store_probe();

// What every rank of a host decides from the probes of all its ranks (in rank order).
struct StoreDecision {
  bool streaming = false;            // non-temporal stores from kStreamingFromBytes, else none
  double ordinary_ns_per_byte = 0;   // the slowest rank's fastest pass, ordinary stores
  double streaming_ns_per_byte = 0;  // the same with non-temporal stores
  bool measured = false;             // false: some probe missing, so ordinary stores
};
inline constexpr size_t kStreamingFromBytes = 4 << 20;
inline constexpr double kStreamingGain = 0.95;  // non-temporal must be at least 5% faster

// Deterministic: the same probes in any order give the same decision.
StoreDecision decide_store_mode(const std::vector<StoreProbe>& host_probes);

// The probe as the bootstrap store carries it, and back ("" for a rank that did not probe).
std::string encode_store_probe(const StoreProbe& p);
bool decode_store_probe(const std::string& text, StoreProbe* out);

}  // namespace accord
