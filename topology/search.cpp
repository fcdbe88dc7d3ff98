// Ring and tree search (search.hpp).
//
// Rings: the first ring maximises its slowest hop, then minimises the hops at that speed, over the
// per-pair bandwidths of the System. Exact by Held-Karp dynamic programming (O(2^n n^2) per
// candidate bottleneck) up to 16 GPUs. Further rings (channels) are searched on what the earlier
// ones left: each hop charges the resources it crosses (a direct NVLink bundle per direction, a
// GPU's NVSwitch port, a GPU's PCIe link per direction, the CPU interconnect per direction), and a
// channel's bandwidth is what its most loaded resource allows. Channels are added while they reach
// at least half of the first one's bandwidth (a slower channel would hold the faster ones back,
// since every channel carries an equal share of the data).
//
// Note [Path class tie-break]: the bandwidth model gives several paths one estimate (PHB and
// NODE pairs are both staged through host memory at the same speed), so rings (and trees) of
// equal bottleneck and equal hops at it can differ in what those slow hops cross. Among them
// the search prefers fewer slow hops through the farthest class, then through the next
// (SYS, then NODE, PHB, PXB, PIX, NVLink; unknown counts as farthest): on 4 GPUs with NVLink
// pairs 0-2 and 1-3, PHB pairs 0-1 and 2-3 and NODE pairs 0-3 and 1-2, the ring 0 2 3 1 (two
// PHB hops) rather than 0 2 1 3 (two NODE hops). In Held-Karp a slow hop of class c costs
// B + (n+1)^c with B = (n+1)^8: no class sum reaches B, so the count of slow hops comes
// first, and each class's count is one base-(n+1) digit, so sums order like the rule.
//
// Trees: NCCL's double binary tree (research/nccl.md 2.3), with the GPUs placed on its positions
// so that the slowest edge of either tree is as fast as possible, then with the fewest edges at
// that speed: exhaustive over all n! placements up to kExactTreeLimit GPUs, pairwise swaps from
// the channel's ring order above. (Placing GPUs in ring order, as NCCL does across nodes, makes
// edges between positions up to n/2 apart: on DGX-1 that crosses the CPU interconnect.)
// Predictions follow NCCL's model without protocol efficiencies: ring bus bandwidth = the sum of
// channel bandwidths; tree algorithm bandwidth = half the sum of the channels' tree bandwidths.
#include "topology/search.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>

namespace accord::topo {

namespace {
constexpr double kEps = 1e-9;
bool same_speed(double a, double b) { return std::fabs(a - b) <= kEps * std::max(1.0, std::fabs(a)); }
// The class of hop a -> b; without classes every hop is alike (kSelf).
size_t class_of(const std::vector<PathClass>& paths, int n, int a, int b) {
  return paths.empty() ? 0 : static_cast<size_t>(paths[a * n + b]);
}
}  // namespace

int compare_classes(const ClassCounts& a, const ClassCounts& b) {
  for (size_t c = a.size(); c-- > 0;)
    if (a[c] != b[c]) return a[c] < b[c] ? -1 : 1;
  return 0;
}

RingScore score_ring(const std::vector<double>& bw, int n, const std::vector<int>& order,
                     const std::vector<PathClass>& paths) {
  RingScore s;
  int m = static_cast<int>(order.size());
  if (m < 2) return s;
  s.bottleneck = std::numeric_limits<double>::infinity();
  for (int i = 0; i < m; ++i) s.bottleneck = std::min(s.bottleneck, bw[order[i] * n + order[(i + 1) % m]]);
  for (int i = 0; i < m; ++i) {
    const int a = order[i], b = order[(i + 1) % m];
    if (!same_speed(bw[a * n + b], s.bottleneck)) continue;
    ++s.slow_hops;
    ++s.slow_by_class[class_of(paths, n, a, b)];
  }
  return s;
}

bool better(const RingScore& a, const RingScore& b) {
  if (!same_speed(a.bottleneck, b.bottleneck)) return a.bottleneck > b.bottleneck;
  if (a.slow_hops != b.slow_hops) return a.slow_hops < b.slow_hops;
  return compare_classes(a.slow_by_class, b.slow_by_class) < 0;
}

namespace {

// Held-Karp over edges with bw >= t, minimising the edges at speed t, then their classes (Note
// [Path class tie-break]). Empty if no ring.
std::vector<int> ring_at_threshold(const std::vector<double>& bw, int n, double t,
                                   const std::vector<PathClass>& paths) {
  const int full = (1 << n) - 1;
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
  std::array<int64_t, std::tuple_size_v<ClassCounts> + 1> weight{};  // (n+1)^c; the last is B
  weight[0] = 1;
  for (size_t c = 1; c < weight.size(); ++c) weight[c] = weight[c - 1] * (n + 1);
  auto cost = [&](int a, int b) -> int64_t {
    double w = bw[a * n + b];
    if (w < t && !same_speed(w, t)) return kInf;
    return same_speed(w, t) ? weight.back() + weight[class_of(paths, n, a, b)] : 0;
  };
  std::vector<int64_t> dp(static_cast<size_t>(1 << n) * n, kInf);
  dp[1 * n + 0] = 0;  // start at position 0, visited {0}
  for (int mask = 1; mask <= full; mask += 2) {
    for (int v = 0; v < n; ++v) {
      int64_t cur = dp[mask * n + v];
      if (cur >= kInf || !(mask >> v & 1)) continue;
      for (int w = 1; w < n; ++w) {
        if (mask >> w & 1) continue;
        int64_t c = cost(v, w);
        if (c >= kInf) continue;
        int64_t& next = dp[(mask | 1 << w) * n + w];
        next = std::min(next, cur + c);
      }
    }
  }
  int64_t best = kInf;
  int last = -1;
  for (int v = n - 1; v >= 1; --v) {  // ties go to the highest index: identity order when all equal
    int64_t c = cost(v, 0);
    if (c >= kInf || dp[full * n + v] >= kInf) continue;
    if (dp[full * n + v] + c < best) best = dp[full * n + v] + c, last = v;
  }
  if (last < 0) return {};
  std::vector<int> order(n);
  int mask = full, v = last;
  for (int pos = n - 1; pos >= 1; --pos) {
    order[pos] = v;
    int prev_mask = mask & ~(1 << v), found = -1;
    for (int u = n - 1; u >= 0 && found < 0; --u) {
      if (!(prev_mask >> u & 1)) continue;
      int64_t c = cost(u, v);
      if (c < kInf && dp[prev_mask * n + u] < kInf && dp[prev_mask * n + u] + c == dp[mask * n + v])
        found = u;
    }
    mask = prev_mask;
    v = found;
  }
  order[0] = 0;
  return order;
}

// Above the exact limit: greedy fastest-next-hop from 0 (of equal ones, the nearest class), then
// 2-opt moves while they improve.
std::vector<int> ring_greedy(const std::vector<double>& bw, int n,
                             const std::vector<PathClass>& paths) {
  std::vector<int> order{0};
  std::vector<bool> used(n);
  used[0] = true;
  for (int k = 1; k < n; ++k) {
    int cur = order.back(), pick = -1;
    for (int w = 0; w < n; ++w) {
      if (used[w]) continue;
      const double a = bw[cur * n + w], b = pick < 0 ? 0 : bw[cur * n + pick];
      if (pick < 0 || (a > b && !same_speed(a, b)) ||
          (same_speed(a, b) && class_of(paths, n, cur, w) < class_of(paths, n, cur, pick)))
        pick = w;
    }
    used[pick] = true;
    order.push_back(pick);
  }
  for (bool improved = true; improved;) {
    improved = false;
    for (int i = 1; i < n - 1 && !improved; ++i)
      for (int j = i + 1; j < n && !improved; ++j) {
        std::vector<int> cand = order;
        std::reverse(cand.begin() + i, cand.begin() + j + 1);
        if (better(score_ring(bw, n, cand, paths), score_ring(bw, n, order, paths)))
          order = cand, improved = true;
      }
  }
  return order;
}

}  // namespace

std::vector<int> best_ring(const std::vector<double>& bw, int n,
                           const std::vector<PathClass>& paths) {
  if (n <= 0) return {};
  if (n <= 2) {
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    return order;
  }
  if (n > kExactRingLimit) return ring_greedy(bw, n, paths);
  std::vector<double> speeds;
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b && bw[a * n + b] > 0) speeds.push_back(bw[a * n + b]);
  std::sort(speeds.rbegin(), speeds.rend());
  for (size_t i = 0; i < speeds.size(); ++i) {
    if (i > 0 && same_speed(speeds[i], speeds[i - 1])) continue;
    std::vector<int> order = ring_at_threshold(bw, n, speeds[i], paths);
    if (!order.empty()) return order;
  }
  std::vector<int> order(n);  // nothing connects: the plain order, priced at zero
  std::iota(order.begin(), order.end(), 0);
  return order;
}

void double_binary_tree(int n, std::vector<int>* parent0, std::vector<int>* parent1) {
  parent0->assign(n, -1);
  parent1->assign(n, -1);
  // Tree 0, in order over positions: a position's lowest set bit is its height; its children sit
  // half that far on either side (the right one moves closer when it would fall off the end).
  for (int r = 0; r < n; ++r) {
    int step;
    if (r == 0) {
      step = 1;
      while (step * 2 < n) step *= 2;
      if (n > 1) (*parent0)[step] = 0;
      continue;
    }
    step = (r & -r) / 2;
    if (step == 0) continue;
    (*parent0)[r - step] = r;
    while (step > 0 && r + step >= n) step /= 2;
    if (step > 0) (*parent0)[r + step] = r;
  }
  auto map = [n](int p) { return n % 2 == 0 ? n - 1 - p : (p + 1) % n; };
  for (int r = 0; r < n; ++r) {
    int p = (*parent0)[r];
    (*parent1)[map(r)] = p < 0 ? -1 : map(p);
  }
}

TreeScore score_tree(const std::vector<double>& bw, int n, const std::vector<int>& order,
                     const std::vector<PathClass>& paths) {
  TreeScore t;
  const int m = static_cast<int>(order.size());
  if (m < 2) return t;
  std::vector<int> p0, p1;
  double_binary_tree(m, &p0, &p1);
  t.bottleneck = std::numeric_limits<double>::infinity();
  std::vector<std::pair<double, size_t>> edges;  // speed (slower direction), class (farther one)
  edges.reserve(2 * m);
  for (const std::vector<int>* parents : {&p0, &p1})
    for (int pos = 0; pos < m; ++pos) {
      int parent = (*parents)[pos];
      if (parent < 0) continue;
      int a = order[parent], b = order[pos];
      edges.emplace_back(std::min(bw[a * n + b], bw[b * n + a]),
                         std::max(class_of(paths, n, a, b), class_of(paths, n, b, a)));
      t.bottleneck = std::min(t.bottleneck, edges.back().first);
    }
  for (const auto& [speed, cls] : edges)
    if (same_speed(speed, t.bottleneck)) ++t.slow_edges, ++t.slow_by_class[cls];
  return t;
}

bool better(const TreeScore& a, const TreeScore& b) {
  if (!same_speed(a.bottleneck, b.bottleneck)) return a.bottleneck > b.bottleneck;
  if (a.slow_edges != b.slow_edges) return a.slow_edges < b.slow_edges;
  return compare_classes(a.slow_by_class, b.slow_by_class) < 0;
}

std::vector<int> best_tree_order(const std::vector<double>& bw, int n,
                                 const std::vector<int>& start,
                                 const std::vector<PathClass>& paths) {
  std::vector<int> best = start;
  if (static_cast<int>(start.size()) < 3) return best;
  TreeScore best_score = score_tree(bw, n, best, paths);
  if (static_cast<int>(start.size()) <= kExactTreeLimit) {
    // Every placement; the start (ring order) stays unless one is strictly better.
    std::vector<int> cand = start;
    std::sort(cand.begin(), cand.end());
    do {
      TreeScore sc = score_tree(bw, n, cand, paths);
      if (better(sc, best_score)) best = cand, best_score = sc;
    } while (std::next_permutation(cand.begin(), cand.end()));
    return best;
  }
  // Above the limit: pairwise swaps while they improve, from every rotation of the ring order
  // in both directions (a single start gets stuck where a whole island would have to move).
  const int m = static_cast<int>(start.size());
  for (int dir = 0; dir < 2; ++dir)
    for (int rot = 0; rot < m; ++rot) {
      std::vector<int> cand(m);
      for (int i = 0; i < m; ++i) cand[i] = start[((dir == 0 ? i : m - 1 - i) + rot) % m];
      TreeScore score = score_tree(bw, n, cand, paths);
      for (bool improved = true; improved;) {
        improved = false;
        for (int i = 0; i < m; ++i)
          for (int j = i + 1; j < m; ++j) {
            std::swap(cand[i], cand[j]);
            TreeScore sc = score_tree(bw, n, cand, paths);
            if (better(sc, score)) {
              score = sc;
              improved = true;
            } else {
              std::swap(cand[i], cand[j]);
            }
          }
      }
      if (better(score, best_score)) best = cand, best_score = score;
    }
  return best;
}

namespace {

// A shared thing a hop consumes: (kind, x, y). Capacities in GB/s.
using Resource = std::tuple<int, int, int>;
enum { kNvlDirect, kNvsOut, kNvsIn, kPciOut, kPciIn, kSysLink };

struct Hop {
  std::vector<std::pair<Resource, double>> uses;  // resource, GB/s consumed per GB/s carried
};

class ChannelModel {
 public:
  ChannelModel(const System& s, const std::vector<int>& gpus) : s_(s), gpus_(gpus) {}

  Hop hop(int a, int b) {  // GPU indices
    Hop h;
    const PairInfo& p = s_.pair(a, b);
    int da = s_.gpus[a], db = s_.gpus[b];
    if (p.p2p && p.path == PathClass::kNvLink) {
      double per_link = p.bandwidth_gbs / std::max(1, p.nvlinks);
      int direct = 0, port_a = 0, port_b = 0;
      for (const Link& l : s_.links) {
        if (l.kind != LinkKind::kNvLink) continue;
        if ((l.a == da && l.b == db) || (l.a == db && l.b == da)) direct += l.count;
        if (is_switch_link(l, da)) port_a += l.count;
        if (is_switch_link(l, db)) port_b += l.count;
      }
      if (direct > 0 || port_a == 0 || port_b == 0) {
        use(&h, {kNvlDirect, a, b}, p.bandwidth_gbs, 1);
      } else {
        use(&h, {kNvsOut, a, 0}, port_a * per_link, 1);
        use(&h, {kNvsIn, b, 0}, port_b * per_link, 1);
      }
      return h;
    }
    // PCIe, peer-to-peer or staged through host memory (which costs twice per byte carried).
    double factor = p.p2p ? 1.0 : 1.0 / kHostStagingFactor;
    double leg_a = p.p2p ? p.bandwidth_gbs : p.bandwidth_gbs / kHostStagingFactor;
    use(&h, {kPciOut, a, 0}, leg_a, factor);
    use(&h, {kPciIn, b, 0}, leg_a, factor);
    if (p.path == PathClass::kSys) {
      int ca = s_.cpu_of(da), cb = s_.cpu_of(db);
      use(&h, {kSysLink, ca, cb}, p.bandwidth_gbs, 1);
    }
    return h;
  }

  double capacity(const Resource& r) const { return cap_.at(r); }
  double& residual(const Resource& r) { return left_.at(r); }

 private:
  bool is_switch_link(const Link& l, int d) const {
    int other = l.a == d ? l.b : l.b == d ? l.a : -1;
    return other >= 0 && s_.devices[other].kind == DeviceKind::kNvSwitch;
  }
  void use(Hop* h, Resource r, double cap, double factor) {
    // Capacities are set by the first hop that names a resource; PCIe legs are per GPU, so the
    // largest claim wins (a GPU's link is as fast as its fastest use of it).
    auto [it, fresh] = cap_.emplace(r, cap);
    if (!fresh && cap > it->second) {
      left_[r] += cap - it->second;
      it->second = cap;
    }
    if (fresh) left_[r] = cap;
    h->uses.emplace_back(r, factor);
  }

  const System& s_;
  const std::vector<int>& gpus_;
  std::map<Resource, double> cap_, left_;
};

}  // namespace

Status plan_collectives(const System& s, const std::vector<int>& gpus_in, Plan* out) {
  *out = Plan();
  std::vector<int> gpus = gpus_in;
  if (gpus.empty()) {
    gpus.resize(s.gpu_count());
    std::iota(gpus.begin(), gpus.end(), 0);
  }
  std::vector<bool> seen(s.gpu_count());
  for (int g : gpus) {
    if (g < 0 || g >= s.gpu_count())
      return error(ACCORD_ERR_INVALID_ARGUMENT, "plan: GPU %d does not exist (the system has %d)",
                   g, s.gpu_count());
    if (seen[g])
      return error(ACCORD_ERR_INVALID_ARGUMENT,
                   "plan: GPU %d is listed twice; one rank per GPU is supported", g);
    seen[g] = true;
  }
  out->gpus = gpus;
  const int n = static_cast<int>(gpus.size());
  if (n == 0) return Status();
  if (n == 1) {
    out->rings = {{gpus[0]}};
    out->rank_rings = {{0}};
    out->ring_bandwidth_gbs = {0};
    return Status();
  }

  // Hops between ranks and the resources each one uses.
  ChannelModel model(s, gpus);
  std::vector<Hop> hops(n * n);
  std::vector<double> static_bw(n * n, 0);
  std::vector<PathClass> paths(n * n, PathClass::kSelf);  // Note [Path class tie-break]
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b) {
        hops[a * n + b] = model.hop(gpus[a], gpus[b]);
        static_bw[a * n + b] = s.bandwidth_gbs(gpus[a], gpus[b]);
        paths[a * n + b] = s.path(gpus[a], gpus[b]);
      }
  constexpr int kMaxChannels = 16;
  double first_bw = 0;
  for (int c = 0; c < kMaxChannels; ++c) {
    std::vector<double> bw = static_bw;
    if (c > 0)
      for (int i = 0; i < n * n; ++i)
        for (const auto& [r, f] : hops[i].uses) bw[i] = std::min(bw[i], model.residual(r) / f);
    std::vector<int> order = best_ring(bw, n, paths);
    // The channel's bandwidth: each resource shared by all the hops of this ring that use it.
    std::map<Resource, double> load;
    for (int i = 0; i < n; ++i)
      for (const auto& [r, f] : hops[order[i] * n + order[(i + 1) % n]].uses) load[r] += f;
    double channel = std::numeric_limits<double>::infinity();
    for (const auto& [r, l] : load) channel = std::min(channel, model.residual(r) / l);
    RingScore score = score_ring(bw, n, order, paths);
    channel = std::min(channel, score.bottleneck);
    if (c == 0) {
      first_bw = channel;
      out->bottleneck_gbs = score.bottleneck;
      out->bottleneck_hops = score.slow_hops;
    } else if (channel < 0.5 * first_bw - kEps || channel <= kEps) {
      break;
    }
    for (const auto& [r, l] : load) model.residual(r) -= channel * l;
    std::vector<int> ring(n);
    for (int i = 0; i < n; ++i) ring[i] = gpus[order[i]];
    out->rings.push_back(ring);
    out->rank_rings.push_back(order);
    out->ring_bandwidth_gbs.push_back(channel);
    if (c == 0 && channel <= kEps) break;
  }

  // Trees: the double binary tree with GPUs placed to maximise its slowest edge (the same
  // placement serves every channel, so it is searched once); a tree pair runs at its slowest
  // edge and at most at its channel's bandwidth.
  std::vector<int> p0, p1;
  double_binary_tree(n, &p0, &p1);
  const std::vector<int> tree_order = best_tree_order(static_bw, n, out->rank_rings[0], paths);
  double tree_sum = 0;
  double ring_sum = 0;
  for (size_t c = 0; c < out->rings.size(); ++c) {
    double tree_pair = out->ring_bandwidth_gbs[c];
    ring_sum += out->ring_bandwidth_gbs[c];
    for (const std::vector<int>* parents : {&p0, &p1}) {
      Tree t;
      t.channel = static_cast<int>(c);
      t.bandwidth_gbs = std::numeric_limits<double>::infinity();
      for (int pos = 0; pos < n; ++pos) {
        int gpu = gpus[tree_order[pos]];
        if ((*parents)[pos] < 0) {
          t.root = gpu;
          continue;
        }
        int parent = gpus[tree_order[(*parents)[pos]]];
        t.edges.emplace_back(parent, gpu);
        t.bandwidth_gbs = std::min({t.bandwidth_gbs, s.bandwidth_gbs(parent, gpu), s.bandwidth_gbs(gpu, parent)});
      }
      tree_pair = std::min(tree_pair, t.bandwidth_gbs);
      out->trees.push_back(t);
    }
    tree_sum += tree_pair;
  }
  out->ring_bus_gbs = ring_sum;
  out->ring_alg_gbs = ring_sum * n / (2.0 * (n - 1));
  out->tree_alg_gbs = 0.5 * tree_sum;
  out->tree_bus_gbs = out->tree_alg_gbs * 2.0 * (n - 1) / n;
  return Status();
}

}  // namespace accord::topo
