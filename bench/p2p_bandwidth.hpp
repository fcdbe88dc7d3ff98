// p2p_bandwidth: copy bandwidth and latency of every ordered GPU pair of this process, and of
// every ordered rank pair through the communicator's host channels, printed beside the
// topology's prediction with the pairs that run far below it flagged (bench/README.md,
// "p2p_bandwidth"). p2p_bandwidth.cpp parses the options, picks the mode and prints the table;
// p2p_gpus.cpp times GPU pairs through the device runtime; p2p_ranks.cpp times rank pairs.
//
// Unlike the collective benchmarks this one links the internal library: it needs the device
// runtime's peer calls and the communicator's channels, which the public API does not expose.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace accord::bench::p2p {

struct Options {
  std::vector<size_t> sizes;     // bandwidth sizes (-b/-e/-f/-i); the last one fills the table
  size_t lat_bytes = 8;          // -l: latency message
  int iters = 20, warmup = 5;    // -n, -w: timed copies (median) and warm-ups per size
  int lat_iters = 100;           // --lat-iters: timed round trips / copies for the latency
  int check = 1;                 // -c: compare the destination with the source after timing
  int gpus = 0;                  // -g N: GPUs 0..N-1 (0: every GPU of the runtime)
  int threads = 1;               // -t N: N host-memory ranks as threads of this process
  double flag_below = 0.5;       // --flag-below: flag measured < this x predicted
  size_t chunk_bytes = 0;        // --chunk: host staging chunk (0: the shm transport's slot)
  bool compare_staged = true;    // p2p GPU pairs: also time the host-staged route
  bool show_plan = false;        // --show-plan: why each pair takes its route
  std::string json_path;         // --json FILE
};

// One ordered pair (src -> dst).
struct PairResult {
  int src = -1, dst = -1;
  std::string route;          // GPUs: p2p or host-staged; ranks: the channel's transport (shm, tcp)
  std::string path;           // GPUs: nvidia-smi path class ("NV2", "SYS", "?"); ranks: "-"
  std::vector<double> gbs;    // measured GB/s per size of Options::sizes
  std::vector<double> time_us;  // median time of one transfer per size
  double predicted_gbs = 0;   // 0: no prediction (printed "-", never flagged)
  double staged_gbs = 0;      // p2p GPU pairs: the host-staged route at the largest size (0: not timed)
  double latency_us = 0;
  std::string why;            // why this route (for --show-plan and the JSON)
};

// What the table's header says besides the columns.
struct Context {
  std::string mode;                 // "gpus" or "ranks"
  std::vector<std::string> notes;   // "# ..." lines printed above the table
};

// Both return the process exit code (0, or 1 if a copy delivered wrong data, 2 on errors).
int run_gpus(const Options& o);
// Rank pairs: under a launcher (one rank per process), or o.threads ranks as threads.
int run_ranks(const Options& o, int argc, char** argv);

// Prints the table, the sweep (when there are several sizes) and the summary; writes the JSON
// when asked. Returns the number of flagged pairs, or -1 if the JSON could not be written.
int print_results(const Options& o, const Context& ctx, const std::vector<PairResult>& rows);

double median(std::vector<double> v);
std::string size_name(size_t bytes);  // "64M", "128K", "8"
// The flags of one row ("" if none): SLOW (measured < flag_below x predicted), P2P<STAGED.
std::string flags_of(const Options& o, const PairResult& r);

}  // namespace accord::bench::p2p
