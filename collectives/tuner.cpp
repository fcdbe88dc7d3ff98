#include "collectives/tuner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <tuple>

#include "core/status.hpp"

namespace accord {
namespace {

constexpr const char* kHeader = "accord-tune 1";
// Near-ties: 2%, below the noise of medians of interleaved rounds (bench/calibrate.sh checks
// picks against a 10% bound; a 5% margin left half of it to noise, and missed at 7%).
constexpr double kTieMargin = 0.02;
// Note [Near ties between algorithms]: two algorithms whose measured times are within
// kAlgoTieMargin are within the calibration's noise: the same candidate's median moved by up
// to 5% (at worst 13%) between two jobs of bench/calibrate.sh, 4 ranks bound two to a core.
// There the built-in model breaks the tie, if it has a clear view (one predicted at least
// kModelClearRatio faster): with 4 ranks at 256 B rd measured 2.93 us against direct's 2.99
// in the calibration and 3.37 against 2.95 in the check (1.14x); the model, counting
// oversubscribed hops, puts direct's one exchange at half rd's two rounds. Where the model is
// nearly indifferent (ring and tree at 8 B on 2 ranks) the faster measurement still wins.
constexpr double kAlgoTieMargin = 0.05;
constexpr double kModelClearRatio = 1.25;

bool parse_algo_name(const std::string& s, Algo* out) {
  if (s == "ring") return *out = Algo::kRing, true;
  if (s == "tree") return *out = Algo::kTree, true;
  if (s == "direct") return *out = Algo::kDirect, true;
  if (s == "rd") return *out = Algo::kRecursiveDoubling, true;
  return false;
}

size_t effective_chunk(const TuneCandidate& c, size_t max_chunk) {
  return c.chunk_bytes == 0 ? max_chunk : std::min(c.chunk_bytes, max_chunk);
}

double ceil_div(double a, double b) { return std::max(1.0, std::ceil(a / b)); }

auto point_key(const Tuner::Point& p) {
  return std::make_tuple(p.nranks, static_cast<int>(p.cand.algo), p.cand.chunk_bytes, p.bytes);
}

}  // namespace

std::string candidate_name(const TuneCandidate& c) {
  std::string s = algo_name(c.algo);
  if (c.chunk_bytes != 0) s += "/" + std::to_string(c.chunk_bytes >> 10) + "K";
  return s;
}

Status Tuner::load(const std::string& path, Tuner* out) {
  std::ifstream in(path);
  if (!in)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "ACCORD_TUNE_FILE=%s cannot be opened; write one with "
                 "bench/calibrate.sh, or unset it to use the built-in model", path.c_str());
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path, out);
}

// Format: a first line "accord-tune 1", then lines "all_reduce NRANKS ALGO CHUNK_BYTES BYTES TIME_US";
// '#' starts a comment.
Status Tuner::parse(const std::string& text, const std::string& name, Tuner* out) {
  Tuner t;
  t.source_ = name;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  bool header = false;
  while (std::getline(in, line)) {
    ++lineno;
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream f(line);
    std::string coll, algo;
    if (!(f >> coll)) continue;
    if (!header) {
      std::string version;
      f >> version;
      if (coll + " " + version != kHeader)
        return error(ACCORD_ERR_INVALID_ARGUMENT, "%s:%d: expected the header '%s', found '%s'; is this a tune file "
                     "written by bench/calibrate.sh?", name.c_str(), lineno, kHeader, line.c_str());
      header = true;
      continue;
    }
    Point p;
    double chunk = -1, bytes = -1;
    std::string extra;
    if (coll != "all_reduce" || !(f >> p.nranks >> algo >> chunk >> bytes >> p.us) || (f >> extra))
      return error(ACCORD_ERR_INVALID_ARGUMENT, "%s:%d: expected 'all_reduce NRANKS ALGO CHUNK_BYTES BYTES TIME_US', "
                   "found '%s'", name.c_str(), lineno, line.c_str());
    if (!parse_algo_name(algo, &p.cand.algo))
      return error(ACCORD_ERR_INVALID_ARGUMENT, "%s:%d: '%s' is not an all-reduce algorithm (ring, tree, direct, rd)",
                   name.c_str(), lineno, algo.c_str());
    if (p.nranks < 1 || chunk < 0 || bytes < 0 || !(p.us > 0) || !std::isfinite(p.us))
      return error(ACCORD_ERR_INVALID_ARGUMENT, "%s:%d: NRANKS must be >= 1, CHUNK_BYTES and BYTES >= 0 and TIME_US a "
                   "positive number: '%s'", name.c_str(), lineno, line.c_str());
    p.cand.chunk_bytes = static_cast<size_t>(chunk);
    p.bytes = static_cast<size_t>(bytes);
    t.points_.push_back(p);
  }
  if (!header)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "%s: empty; expected the header '%s' and measurements", name.c_str(),
                 kHeader);
  std::sort(t.points_.begin(), t.points_.end(),
            [](const Point& a, const Point& b) { return point_key(a) < point_key(b); });
  for (size_t i = 1; i < t.points_.size(); ++i)
    if (point_key(t.points_[i]) == point_key(t.points_[i - 1]))
      return error(ACCORD_ERR_INVALID_ARGUMENT, "%s: %s on %d ranks at %zu bytes is measured twice", name.c_str(),
                   candidate_name(t.points_[i].cand).c_str(), t.points_[i].nranks, t.points_[i].bytes);
  *out = std::move(t);
  return Status::success();
}

bool Tuner::calibrated_for(int nranks) const {
  return std::any_of(points_.begin(), points_.end(), [&](const Point& p) { return p.nranks == nranks; });
}

// Note [Tuner model]: hops of latency and bytes through the busiest rank, from the costs at the
// top of algorithms/*.cpp.
double Tuner::model_us(const TuneCandidate& c, size_t bytes, int nranks, bool oversubscribed, size_t max_chunk) const {
  const double n = nranks, s = static_cast<double>(bytes);
  const double chunk = static_cast<double>(effective_chunk(c, max_chunk));
  const double hop = oversubscribed ? k_.oversubscribed_hop_us : k_.hop_us;
  const double copy = k_.copy_bytes_per_us, red = k_.reduce_bytes_per_us;
  switch (c.algo) {
    case Algo::kRing: {
      const double pieces = ceil_div(s / n, chunk);
      return hop * (2 * (n - 1) + pieces - 1) + 2 * (n - 1) / n * s / copy + (n - 1) / n * s / red;
    }
    case Algo::kTree: {
      const double depth = std::ceil(std::log2(n));
      const double pieces = ceil_div(s / 2, chunk);
      return hop * (2 * depth + pieces - 1) + 2 * s / copy + s / red;
    }
    case Algo::kDirect:
      return hop * ceil_div(s, chunk) + (n - 1) * s / copy + (n - 1) * s / red;
    case Algo::kRecursiveDoubling: {
      const double p = std::exp2(std::floor(std::log2(n)));
      const double rounds = std::log2(p) + (p < n ? 2 : 0);
      return hop * rounds * ceil_div(s, chunk) + rounds * s / copy + std::log2(p) * s / red;
    }
    default:
      return 1e30;
  }
}

bool Tuner::measured_us(const TuneCandidate& c, size_t bytes, int nranks, size_t max_chunk, double* us) const {
  if (c.chunk_bytes > max_chunk) return false;  // measured with chunks this transport cannot carry
  std::vector<const Point*> pts;
  for (const Point& p : points_)
    if (p.nranks == nranks && p.cand.algo == c.algo && p.cand.chunk_bytes == c.chunk_bytes) pts.push_back(&p);
  if (pts.empty()) return false;
  if (bytes <= pts.front()->bytes || pts.size() == 1) {
    // Below the smallest measured size: latency-bound, its time. One point only: scale the
    // part above it linearly.
    const Point& p = *pts.front();
    *us = bytes <= p.bytes ? p.us : p.us * static_cast<double>(bytes) / static_cast<double>(std::max<size_t>(1, p.bytes));
    return true;
  }
  size_t i = 1;
  while (i + 1 < pts.size() && pts[i]->bytes < bytes) ++i;
  const Point& a = *pts[i - 1];
  const Point& b = *pts[i];
  // The segment's own alpha + bytes / beta (extrapolated past the last point).
  const double slope = (b.us - a.us) / static_cast<double>(b.bytes - a.bytes);
  *us = std::max(a.us + slope * (static_cast<double>(bytes) - static_cast<double>(a.bytes)), 1e-3);
  return true;
}

double Tuner::predict(const TuneCandidate& c, size_t bytes, int nranks, bool oversubscribed, size_t max_chunk) const {
  double us = 0;
  if (measured_us(c, bytes, nranks, max_chunk, &us)) return us;
  return model_us(c, bytes, nranks, oversubscribed, max_chunk);
}

// Note [Near ties between algorithms]: the model's clear favourite among the measured near-ties
// of the fastest, if it is not the fastest itself; *why says so.
std::optional<TuneCandidate> Tuner::algo_tie_favourite(
    const std::vector<std::pair<double, TuneCandidate>>& v, size_t bytes, int nranks,
    bool oversubscribed, size_t max_chunk, std::string* why) const {
  if (v.empty()) return std::nullopt;
  const auto fastest = std::min_element(
      v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const double fastest_model = model_us(fastest->second, bytes, nranks, oversubscribed, max_chunk);
  auto favourite = fastest;
  double favourite_model = fastest_model;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it->second.algo == fastest->second.algo ||
        it->first > fastest->first * (1 + kAlgoTieMargin))
      continue;
    const double m = model_us(it->second, bytes, nranks, oversubscribed, max_chunk);
    if (m * kModelClearRatio <= fastest_model && m < favourite_model) {
      favourite = it;
      favourite_model = m;
    }
  }
  if (favourite == fastest) return std::nullopt;
  *why = format(
      "; %s measured within %.0f%% of %s (%.2f us against %.2f), a near-tie the built-in model "
      "breaks (%.1f us against %.1f)",
      candidate_name(favourite->second).c_str(), kAlgoTieMargin * 100,
      candidate_name(fastest->second).c_str(), favourite->first, fastest->first, favourite_model,
      fastest_model);
  return favourite->second;
}

TuneChoice Tuner::pick(std::vector<std::pair<double, TuneCandidate>> scored, size_t max_chunk,
                       const std::string& model, const std::optional<TuneCandidate>& prefer) const {
  TuneChoice best;
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  // Note [Near ties between algorithms]: the preferred candidate goes first.
  const auto preferred = std::find_if(scored.begin(), scored.end(), [&](const auto& s) {
    return prefer && s.second.algo == prefer->algo && s.second.chunk_bytes == prefer->chunk_bytes;
  });
  if (preferred != scored.end()) std::rotate(scored.begin(), preferred, preferred + 1);
  // A near-tie (within kTieMargin) between chunk sizes of the fastest algorithm goes to the
  // default chunk: at small sizes ring and ring/64K are the same schedule, and noise must not
  // flip between them. Between algorithms the faster wins unless the built-in model clearly
  // prefers a near-tie (Note [Near ties between algorithms], `prefer`); a plain "prefer ring"
  // rule picked ring where it then ran 1.3-1.4x slower on another communicator of the job.
  auto default_chunk = [&](const TuneCandidate& c) { return c.chunk_bytes == 0 || c.chunk_bytes >= max_chunk; };
  size_t chosen = 0;
  for (size_t i = 1; i < scored.size(); ++i)
    if (scored[i].first <= scored.front().first * (1 + kTieMargin) &&
        scored[i].second.algo == scored.front().second.algo && default_chunk(scored[i].second) &&
        !default_chunk(scored[chosen].second))
      chosen = i;
  if (chosen != 0) std::swap(scored[0], scored[chosen]);
  best.pick = scored.front().second;
  best.predicted_us = scored.front().first;
  best.why = format("%s predicts %.1f us", model.c_str(), best.predicted_us);
  for (size_t i = 1; i < scored.size() && i < 4; ++i)
    best.why += format(i == 1 ? " vs %s %.1f" : ", %s %.1f", candidate_name(scored[i].second).c_str(),
                       scored[i].first);
  return best;
}

// Note [Tuner across hosts]: H hosts with L ranks each (N = H L, numbered host by host). Every
// candidate pays its hops over the network (net_hop_us each, in sequence), its hops inside a
// host (the shared-memory hop), the bytes the busiest host link carries per direction at
// ACCORD_NET_MBPS, and its copies and reductions in memory:
//  - ring over all N ranks: 2(N-1) + pieces - 1 steps in lockstep, each as slow as its network
//    hop; every host link carries 2(N-1)/N S.
//  - hierarchical (algorithms/hierarchical.cpp): 2(L-1) shared-memory steps, then a ring over
//    H hosts on slices of S/L, all L slices of a host side by side: 2(H-1) + pieces - 1 network
//    steps; the link carries 2(H-1)/H S, the least any all-reduce can.
//  - recursive doubling: log2 L rounds inside a host, log2 H across (each sending the whole
//    buffer from every one of the host's L ranks: L S per crossing round), 2 more for the
//    ranks above a power of two.
//  - direct: one step; each host sends each of its L ranks' buffer to the N - L others.
// The tree is not weighed: over rank order its edges cross hosts where its shape says, not
// where the hosts are.
double Tuner::predict_hosts(const TuneCandidate& c, size_t bytes, int nranks, const HostLayout& layout,
                            bool oversubscribed, size_t max_chunk) const {
  const double n = nranks, s = static_cast<double>(bytes);
  const double h = std::max(1, layout.nhosts), l = std::max(1, layout.ranks_per_host);
  const double chunk = static_cast<double>(effective_chunk(c, max_chunk));
  const double hop = oversubscribed ? k_.oversubscribed_hop_us : k_.hop_us;
  const double net = k_.net_hop_us, link = k_.net_bytes_per_us;
  const double copy = k_.copy_bytes_per_us, red = k_.reduce_bytes_per_us;
  switch (c.algo) {
    case Algo::kRing: {
      const double pieces = ceil_div(s / n, chunk);
      return net * (2 * (n - 1) + pieces - 1) + 2 * (n - 1) / n * s / link + 2 * (n - 1) / n * s / copy +
             (n - 1) / n * s / red;
    }
    case Algo::kHierarchical: {
      if (!layout.even) return 1e30;
      const double pieces = ceil_div(s / (l * h), chunk);
      return hop * 2 * (l - 1) + net * (2 * (h - 1) + pieces - 1) + 2 * (h - 1) / h * s / link +
             2 * s / copy + s / red;
    }
    case Algo::kRecursiveDoubling: {
      const double p = std::exp2(std::floor(std::log2(n)));
      const double extra = p < n ? 2 : 0;
      const double inside = std::floor(std::log2(l)), across = std::log2(p) - inside + extra;
      return hop * inside + net * across * ceil_div(s, chunk) + across * l * s / link +
             (std::log2(p) + extra) * s / copy + std::log2(p) * s / red;
    }
    case Algo::kDirect:
      return net * ceil_div(s, chunk) + l * (n - l) * s / link + (n - 1) * s / copy + (n - 1) * s / red;
    default:
      return 1e30;
  }
}

TuneChoice Tuner::choose_all_reduce_hosts(size_t bytes, int nranks, const HostLayout& layout, bool oversubscribed,
                                          size_t max_chunk) const {
  std::vector<std::pair<double, TuneCandidate>> scored;
  std::vector<Algo> algos = {Algo::kRing, Algo::kDirect, Algo::kRecursiveDoubling};
  if (layout.even) algos.push_back(Algo::kHierarchical);
  for (Algo a : algos) {
    TuneCandidate c{a, 0};
    scored.emplace_back(predict_hosts(c, bytes, nranks, layout, oversubscribed, max_chunk), c);
  }
  return pick(std::move(scored), max_chunk,
              format("multi-host model (%d hosts x %d ranks, %.0f Mbit/s links)", layout.nhosts,
                     layout.ranks_per_host, k_.net_bytes_per_us * 8));
}

TuneChoice Tuner::choose_all_reduce(size_t bytes, int nranks, bool oversubscribed, size_t max_chunk) const {
  TuneChoice best;
  if (nranks <= 1) {
    best.why = "one rank: a local copy";
    return best;
  }
  std::vector<TuneCandidate> cands;
  bool measured = false;
  for (const Point& p : points_) {
    if (p.nranks != nranks || p.cand.chunk_bytes > max_chunk) continue;
    if (std::none_of(cands.begin(), cands.end(), [&](const TuneCandidate& c) {
          return c.algo == p.cand.algo && c.chunk_bytes == p.cand.chunk_bytes;
        }))
      cands.push_back(p.cand);
    measured = true;
  }
  if (!measured) cands = {{Algo::kRing, 0}, {Algo::kTree, 0}, {Algo::kDirect, 0}, {Algo::kRecursiveDoubling, 0}};
  std::vector<std::pair<double, TuneCandidate>> scored;
  for (const TuneCandidate& c : cands) scored.emplace_back(predict(c, bytes, nranks, oversubscribed, max_chunk), c);
  std::string tie;
  std::optional<TuneCandidate> prefer;
  if (measured) prefer = algo_tie_favourite(scored, bytes, nranks, oversubscribed, max_chunk, &tie);
  best = pick(std::move(scored), max_chunk, measured ? source_ : "built-in model", prefer);
  best.why += tie;
  if (!measured && !points_.empty())
    best.why += format("; %s has no measurements for %d ranks", source_.c_str(), nranks);
  return best;
}

}  // namespace accord
