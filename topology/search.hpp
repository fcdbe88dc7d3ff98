// Ring and tree search over a System, and the bandwidth Accord predicts for them. This is the
// function the collectives layer calls: given the GPUs its ranks run on, which ring orders
// (channels) and trees to use and how fast they should go. See topology/README.md "Search".
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "core/status.hpp"
#include "topology/system.hpp"

namespace accord::topo {

struct Tree {
  int channel = 0;                         // the ring channel it belongs to (shares its links)
  int root = -1;                           // GPU index
  std::vector<std::pair<int, int>> edges;  // (parent, child) GPU indices
  double bandwidth_gbs = 0;                // slowest edge of this tree
};

struct Plan {
  std::vector<int> gpus;                    // GPU index of each rank (rank r runs on gpus[r])
  std::vector<std::vector<int>> rings;      // one order of GPU indices per channel
  std::vector<std::vector<int>> rank_rings; // the same orders in ranks
  std::vector<double> ring_bandwidth_gbs;   // per channel, after sharing links between channels
  std::vector<Tree> trees;                  // two per channel: NCCL-style double binary tree
  double bottleneck_gbs = 0;  // slowest hop of the first ring
  int bottleneck_hops = 0;    // hops of the first ring at that speed
  // Predictions (GB/s), all-reduce: bus bandwidth in nccl-tests' sense and algorithm bandwidth.
  double ring_bus_gbs = 0, ring_alg_gbs = 0;
  double tree_bus_gbs = 0, tree_alg_gbs = 0;
};

// The ranks' GPUs (indices into s, each at most once). An empty list means every GPU in order.
Status plan_collectives(const System& s, const std::vector<int>& gpus, Plan* out);

// ---- building blocks, exposed for tests and tools ----

// Slow hops (or tree edges) counted per path class, indexed by PathClass; Note [Path class
// tie-break] in search.cpp. Fewer hops through the farthest class is better, then the next.
using ClassCounts = std::array<int, static_cast<size_t>(PathClass::kUnknown) + 1>;
// -1, 0 or 1 as a is better than, as good as, or worse than b.
int compare_classes(const ClassCounts& a, const ClassCounts& b);

// Bottleneck of a closed ring over `order` (positions into `bw`, an n x n row-major matrix of
// one-direction bandwidths), how many hops run at that bottleneck, and their path classes
// (from `paths`, the n x n row-major classes of the same pairs; empty: all alike).
struct RingScore {
  double bottleneck = 0;
  int slow_hops = 0;
  ClassCounts slow_by_class{};
};
RingScore score_ring(const std::vector<double>& bw, int n, const std::vector<int>& order,
                     const std::vector<PathClass>& paths = {});
// True when a is strictly better than b by the search rule: higher bottleneck, then fewer hops
// at it, then those hops through fewer and nearer bridges (PIX < PXB < PHB < NODE < SYS).
bool better(const RingScore& a, const RingScore& b);

// Best ring over positions 0..n-1 by that rule; exact (Held-Karp) up to kExactRingLimit GPUs,
// a greedy search with 2-opt above.
std::vector<int> best_ring(const std::vector<double>& bw, int n,
                           const std::vector<PathClass>& paths = {});
inline constexpr int kExactRingLimit = 16;

// Double binary tree over positions 0..n-1: parent of each position in tree 0 and tree 1
// (-1 for the root). Tree 1 is tree 0 mirrored (even n) or shifted by one (odd n), so that for
// even n every position is a leaf in one of the two trees (odd n: all but one).
void double_binary_tree(int n, std::vector<int>* parent0, std::vector<int>* parent1);

// How good a placement of GPUs on the double binary tree's positions is: the slowest edge of
// either tree (an edge carries data both ways, so its speed is the slower direction), then how
// many edges run at that speed (fewer is better), then their path classes as for rings (an
// edge's class is the farther of its two directions').
struct TreeScore {
  double bottleneck = 0;
  int slow_edges = 0;
  ClassCounts slow_by_class{};
};
// order[pos] = which of the n GPUs (positions into `bw`) sits at tree position pos.
TreeScore score_tree(const std::vector<double>& bw, int n, const std::vector<int>& order,
                     const std::vector<PathClass>& paths = {});
bool better(const TreeScore& a, const TreeScore& b);
// Best placement by that rule, starting from `start` (a ring order): exhaustive up to
// kExactTreeLimit GPUs (n! placements); above, pairwise swaps while they improve, from every
// rotation of `start` in both directions.
std::vector<int> best_tree_order(const std::vector<double>& bw, int n,
                                 const std::vector<int>& start,
                                 const std::vector<PathClass>& paths = {});
inline constexpr int kExactTreeLimit = 8;

}  // namespace accord::topo
