// The tuner: which all-reduce algorithm, with which chunk size, for a call of S bytes on n ranks.
//
// Note [Tuner model]: each candidate (algorithm, chunk) has a time model t(S) = alpha + S / beta.
// Built in, alpha and beta come from the algorithm's cost (hops of latency and bytes moved,
// written at the top of each file in algorithms/) and three machine constants: the latency of
// one shared-memory hop, the copy bandwidth and the reduce bandwidth, with the hop latency
// raised when ranks outnumber cores (each hop then waits for a scheduler round). A calibration
// run (bench/calibrate.sh) measures every candidate at sizes 8 B .. 256 MiB and saves the
// times in a tune file (ACCORD_TUNE_FILE); between two measured sizes the model is the line
// through them (its own alpha and beta for that size range), below the smallest it is the
// smallest's time, above the largest it continues the last segment. A file covers the rank
// counts it was measured with; other rank counts use the built-in model. Measured times within
// 5% of each other are a near-tie, which the built-in model breaks when it clearly prefers one
// (Note [Near ties between algorithms], tuner.cpp).
//
// Across hosts (Note [Tuner across hosts], tuner.cpp) a second model weighs the flat ring,
// recursive doubling, the one-shot direct exchange and the hierarchical algorithm by their
// hops over the network (TuneConstants::net_hop_us) and the bytes each host's link carries
// (ACCORD_NET_MBPS), plus their shared-memory hops inside a host.
//
// Only all-reduce has several algorithms today; the other collectives have one each
// (communicator.cpp).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "collectives/schedule.hpp"
#include "core/status.hpp"

namespace accord {

struct TuneCandidate {
  Algo algo = Algo::kRing;
  size_t chunk_bytes = 0;  // 0: the transport's slot size
};

struct TuneChoice {
  TuneCandidate pick;
  double predicted_us = 0;
  std::string why;  // for ACCORD_LOG=tune:info: the model used and the runners-up
};

// Built-in machine constants (measured on the 2-core development VM with bench/, see
// bench/README.md; a tune file replaces them).
struct TuneConstants {
  double hop_us = 0.3;               // one message from a rank to its neighbour, spinning
  double oversubscribed_hop_us = 6;  // the same when ranks outnumber cores (a scheduler round)
  double copy_bytes_per_us = 9000;   // ~9 GB/s through a shared-memory slot
  double reduce_bytes_per_us = 7000; // ~7 GB/s reading two operands, writing one
  double net_hop_us = 30;            // one TCP message between hosts (progress thread, kernel, wire)
  double net_bytes_per_us = 1250;    // each host's link, per direction (10 Gbit/s; ACCORD_NET_MBPS)
};

// Where the ranks are: nhosts hosts, ranks_per_host on each (even: every host the same, and
// ranks numbered host by host, as the launchers do), or uneven (hierarchical cannot serve).
struct HostLayout {
  int nhosts = 1;
  int ranks_per_host = 1;  // the largest count on any host when uneven
  bool even = true;
};

class Tuner {
 public:
  // Reads a tune file; an unreadable or malformed file is an error naming the file and line.
  static Status load(const std::string& path, Tuner* out);
  // Parses the text of a tune file (`name` for messages).
  static Status parse(const std::string& text, const std::string& name, Tuner* out);

  // Picks for an all-reduce of `bytes` on `nranks` ranks (more of them on a host than it has
  // cores: `oversubscribed`), chunks of at most `max_chunk` bytes.
  TuneChoice choose_all_reduce(size_t bytes, int nranks, bool oversubscribed, size_t max_chunk) const;

  // Picks for an all-reduce across hosts (layout.nhosts > 1) from the multi-host model.
  TuneChoice choose_all_reduce_hosts(size_t bytes, int nranks, const HostLayout& layout, bool oversubscribed,
                                     size_t max_chunk) const;
  double predict_hosts(const TuneCandidate& c, size_t bytes, int nranks, const HostLayout& layout,
                       bool oversubscribed, size_t max_chunk) const;
  // The host link's speed (from ACCORD_NET_MBPS).
  void set_net_mbps(double mbps) { if (mbps > 0) k_.net_bytes_per_us = mbps / 8; }

  // The model's time for one candidate (microseconds).
  double predict(const TuneCandidate& c, size_t bytes, int nranks, bool oversubscribed, size_t max_chunk) const;

  bool calibrated_for(int nranks) const;
  const std::string& source() const { return source_; }

  struct Point {
    int nranks = 0;
    TuneCandidate cand;
    size_t bytes = 0;
    double us = 0;
  };
  const std::vector<Point>& points() const { return points_; }

 private:
  double model_us(const TuneCandidate& c, size_t bytes, int nranks, bool oversubscribed, size_t max_chunk) const;
  bool measured_us(const TuneCandidate& c, size_t bytes, int nranks, size_t max_chunk, double* us) const;
  // Sorts candidates by time (`prefer` first, if it is one of them), gives a near-tie between
  // chunk sizes to the default one, and says why.
  TuneChoice pick(std::vector<std::pair<double, TuneCandidate>> scored, size_t max_chunk,
                  const std::string& model,
                  const std::optional<TuneCandidate>& prefer = std::nullopt) const;
  std::optional<TuneCandidate> algo_tie_favourite(
      const std::vector<std::pair<double, TuneCandidate>>& scored, size_t bytes, int nranks,
      bool oversubscribed, size_t max_chunk, std::string* why) const;

  TuneConstants k_;
  std::vector<Point> points_;  // sorted by (nranks, algo, chunk, bytes)
  std::string source_ = "built-in model";
};

// "ring", "ring/64K": the candidate as tune files and logs spell it.
std::string candidate_name(const TuneCandidate& c);

}  // namespace accord
