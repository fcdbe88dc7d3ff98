// Schedules checked with no transport: every rank's schedule runs in a simulator where each
// element carries the count of each rank's contribution. A correct all-reduce leaves every
// output element with exactly one contribution from every rank; a schedule that reads a
// buffer before it was written, double-counts or forgets shows up as a wrong count. FIFOs
// hold at most 4 messages, as the shared-memory transport's minimum (Note [FIFO depth]), so
// a schedule that could deadlock there fails here. Bytes moved are compared with the cost
// stated at the top of each algorithm's file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <random>
#include <map>
#include <string>
#include <vector>

#include "collectives/schedule.hpp"

namespace accord {
namespace {

using Counts = std::vector<uint8_t>;  // contributions per rank, for one element
using Buffer = std::vector<Counts>;

struct Sim {
  int n;
  size_t es;
  std::vector<Schedule> sched;
  std::vector<Buffer> in, out;
  std::vector<bool> in_place;
  std::map<std::pair<int, int>, std::deque<Buffer>> fifo;  // (from, to)
  std::vector<size_t> pc;
  std::vector<size_t> bytes_sent;
  const std::vector<int>* hosts = nullptr;  // host of each rank, to count bytes between hosts
  size_t bytes_between_hosts = 0;
  std::string error;

  // In place, input and output are one buffer.
  Buffer& buf(int r, Buf b) {
    const size_t i = static_cast<size_t>(r);
    return b == Buf::kInput || in_place[i] ? in[i] : out[i];
  }

  Buffer slice(int r, Buf b, size_t off, size_t bytes) {
    Buffer& B = buf(r, b);
    if ((off + bytes) / es > B.size()) {
      error = "out of bounds read";
      return {};
    }
    return Buffer(B.begin() + static_cast<long>(off / es), B.begin() + static_cast<long>((off + bytes) / es));
  }
  void write(int r, Buf b, size_t off, const Buffer& v) {
    Buffer& B = buf(r, b);
    if (off / es + v.size() > B.size()) {
      error = "out of bounds write";
      return;
    }
    for (size_t i = 0; i < v.size(); ++i) B[off / es + i] = v[i];
  }
  static Buffer combine(const Buffer& a, const Buffer& b) {
    Buffer c = a;
    for (size_t i = 0; i < c.size(); ++i)
      for (size_t k = 0; k < c[i].size(); ++k) c[i][k] = static_cast<uint8_t>(c[i][k] + b[i][k]);
    return c;
  }

  bool can_send(int from, int to) { return fifo[{from, to}].size() < 4; }
  bool can_recv(int from, int to) { return !fifo[{from, to}].empty(); }

  // Executes rank r's next step if its messages are there; returns whether it progressed.
  bool step(int r) {
    const Step& s = sched[static_cast<size_t>(r)].steps[pc[static_cast<size_t>(r)]];
    auto recv = [&](int from) {
      Buffer m = fifo[{from, r}].front();
      fifo[{from, r}].pop_front();
      if (m.size() * es != s.bytes) error = "message size mismatch";
      return m;
    };
    auto send = [&](int to, const Buffer& m) {
      fifo[{r, to}].push_back(m);
      bytes_sent[static_cast<size_t>(r)] += m.size() * es;
      if (hosts != nullptr && (*hosts)[static_cast<size_t>(r)] != (*hosts)[static_cast<size_t>(to)])
        bytes_between_hosts += m.size() * es;
    };
    switch (s.kind) {
      case StepKind::kSend:
        if (!can_send(r, s.send_peer)) return false;
        send(s.send_peer, slice(r, s.src, s.src_off, s.bytes));
        break;
      case StepKind::kRecv:
        if (!can_recv(s.recv_peer, r)) return false;
        write(r, s.dst, s.dst_off, recv(s.recv_peer));
        break;
      case StepKind::kCopy:
        write(r, s.dst, s.dst_off, slice(r, s.src, s.src_off, s.bytes));
        break;
      case StepKind::kRecvReduce:
        if (!can_recv(s.recv_peer, r)) return false;
        write(r, s.dst, s.dst_off, combine(recv(s.recv_peer), slice(r, s.src, s.src_off, s.bytes)));
        break;
      case StepKind::kRecvReduceSend:
      case StepKind::kRecvReduceCopySend:
      case StepKind::kRecvCopySend: {
        if (!can_recv(s.recv_peer, r) || !can_send(r, s.send_peer)) return false;
        Buffer m = recv(s.recv_peer);
        if (s.kind != StepKind::kRecvCopySend) m = combine(m, slice(r, s.src, s.src_off, s.bytes));
        if (s.kind != StepKind::kRecvReduceSend) write(r, s.dst, s.dst_off, m);
        send(s.send_peer, m);
        break;
      }
      case StepKind::kReduceAll: {
        for (int p = 0; p < n; ++p)
          if (p != r && !can_recv(p, r)) return false;
        Buffer acc = slice(r, s.src, s.src_off, s.bytes);
        for (int p = 0; p < n; ++p)
          if (p != r) acc = combine(acc, recv(p));
        write(r, s.dst, s.dst_off, acc);
        break;
      }
    }
    ++pc[static_cast<size_t>(r)];
    return true;
  }

  // Runs all ranks to completion. Returns false on deadlock or error.
  bool run() {
    for (;;) {
      bool progressed = false, all_done = true;
      for (int r = 0; r < n; ++r) {
        if (pc[static_cast<size_t>(r)] >= sched[static_cast<size_t>(r)].steps.size()) continue;
        all_done = false;
        progressed |= step(r);
        if (!error.empty()) return false;
      }
      if (all_done) return true;
      if (!progressed) {
        error = "deadlock";
        return false;
      }
    }
  }
};

struct Case {
  Collective coll;
  Algo algo;
};

// Builds and simulates one case; returns an empty string when correct.
std::string simulate(Case c, int n, size_t count, size_t chunk_elems, bool in_place, int root,
                     const std::vector<int>* hosts = nullptr, size_t* between_hosts = nullptr) {
  const size_t es = 4;
  Sim sim;
  sim.hosts = hosts;
  sim.n = n;
  sim.es = es;
  sim.pc.assign(static_cast<size_t>(n), 0);
  sim.bytes_sent.assign(static_cast<size_t>(n), 0);
  const size_t nn = static_cast<size_t>(n);
  size_t in_elems = c.coll == Collective::kReduceScatter ? count * nn : count;
  size_t out_elems = c.coll == Collective::kAllGather ? count * nn : count;
  for (int r = 0; r < n; ++r) {
    ScheduleRequest req;
    req.coll = c.coll;
    req.algo = c.algo;
    req.rank = r;
    req.nranks = n;
    req.count = count;
    req.elem_bytes = es;
    req.chunk_bytes = chunk_elems * es;
    req.root = root;
    req.host_of = hosts != nullptr ? hosts->data() : nullptr;
    // In place only where the layouts make it the same buffer (RS/AG handled as separate).
    req.in_place = in_place && (c.coll == Collective::kAllReduce || ((c.coll == Collective::kBroadcast ||
                                                                       c.coll == Collective::kReduce) && r == root));
    Schedule s;
    if (!build_schedule(req, &s)) return "no schedule";
    sim.sched.push_back(s);
    sim.in_place.push_back(req.in_place);
    Buffer in(in_elems, Counts(nn, 0));
    for (auto& e : in) e[static_cast<size_t>(r)] = 1;
    sim.in.push_back(in);
    sim.out.push_back(Buffer(req.in_place ? 0 : out_elems, Counts(nn, 0)));
  }
  if (!sim.run()) return sim.error;
  if (between_hosts != nullptr) *between_hosts = sim.bytes_between_hosts;
  size_t total_sent = 0;
  for (size_t b : sim.bytes_sent) total_sent += b;
  const size_t S = count * es;
  size_t want_sent = 0;
  Counts all(nn, 1);
  for (int r = 0; r < n; ++r) {
    Buffer& out = sim.in_place[static_cast<size_t>(r)] ? sim.in[static_cast<size_t>(r)] : sim.out[static_cast<size_t>(r)];
    for (size_t i = 0; i < out_elems; ++i) {
      Counts want(nn, 0);
      switch (c.coll) {
        case Collective::kAllReduce:
        case Collective::kReduceScatter: want = all; break;
        case Collective::kAllGather: want[i / count] = 1; break;
        case Collective::kBroadcast: want[static_cast<size_t>(root)] = 1; break;
        case Collective::kReduce:
          if (r != root) continue;
          want = all;
          break;
        default: break;
      }
      if (out[i] != want)
        return "rank " + std::to_string(r) + " element " + std::to_string(i) + " has the wrong contributions";
    }
  }
  switch (c.coll) {
    case Collective::kAllReduce:
      if (c.algo == Algo::kDirect) {
        want_sent = nn * (nn - 1) * S;
      } else if (c.algo == Algo::kRecursiveDoubling) {
        size_t p = 1, rounds = 0;
        while (p * 2 <= nn) p *= 2, ++rounds;
        want_sent = p * rounds * S + 2 * (nn - p) * S;  // rounds, plus folding the extras in and out
      } else {
        want_sent = 2 * (nn - 1) * S;  // ring and tree alike
      }
      break;
    case Collective::kReduceScatter:
    case Collective::kAllGather: want_sent = (nn - 1) * nn * S; break;
    case Collective::kBroadcast:
    case Collective::kReduce: want_sent = (nn - 1) * S; break;
    default: break;
  }
  if (total_sent != want_sent)
    return "moved " + std::to_string(total_sent) + " bytes, the cost model says " + std::to_string(want_sent);
  return "";
}

TEST(Schedule, EveryCollectiveAndAlgorithmDeliversEachContributionExactlyOnce) {
  const Case cases[] = {{Collective::kAllReduce, Algo::kRing},     {Collective::kAllReduce, Algo::kDirect},
                        {Collective::kAllReduce, Algo::kTree},   {Collective::kAllReduce, Algo::kRecursiveDoubling},
                        {Collective::kReduceScatter, Algo::kRing}, {Collective::kAllGather, Algo::kRing},
                        {Collective::kBroadcast, Algo::kChain},    {Collective::kReduce, Algo::kChain}};
  int checked = 0;
  for (const Case& c : cases)
    for (int n = 1; n <= 9; ++n)
      for (size_t count : {0, 1, 2, 5, 7, 13, 64, 101})
        for (size_t chunk : {1, 3, 16, 1000})
          for (bool in_place : {false, true})
            for (int root : {0, n - 1}) {
              std::string e = simulate(c, n, count, chunk, in_place, root);
              EXPECT_EQ(e, "") << collective_name(c.coll) << "/" << algo_name(c.algo) << " n=" << n
                               << " count=" << count << " chunk=" << chunk << " in_place=" << in_place
                               << " root=" << root;
              ++checked;
            }
  EXPECT_GT(checked, 2000);
}

// Hierarchical all-reduce over H hosts of L ranks, placed in blocks (0,1 | 2,3) or round
// robin (0,2 | 1,3): every element gets every contribution once, 2(n-1) S bytes move in all
// (as for the ring), and only 2(H-1) S cross host boundaries (every host link carries
// 2(H-1)/H S out, the all-reduce lower bound).
TEST(Schedule, HierarchicalDeliversEachContributionOnceAndCrossesHostsLeast) {
  int checked = 0;
  for (int H = 1; H <= 4; ++H)
    for (int L = 1; L <= 4; ++L)
      for (bool round_robin : {false, true}) {
        const int n = H * L;
        std::vector<int> hosts(static_cast<size_t>(n));
        for (int r = 0; r < n; ++r) hosts[static_cast<size_t>(r)] = round_robin ? r % H : r / L;
        for (size_t count : {0, 1, 5, 13, 64, 101, 1000})
          for (size_t chunk : {1, 3, 16, 1000})
            for (bool in_place : {false, true}) {
              size_t between = 0;
              std::string e = simulate({Collective::kAllReduce, Algo::kHierarchical}, n, count, chunk, in_place, 0,
                                       &hosts, &between);
              EXPECT_EQ(e, "") << "H=" << H << " L=" << L << " round_robin=" << round_robin << " count=" << count
                               << " chunk=" << chunk << " in_place=" << in_place;
              EXPECT_EQ(between, 2 * static_cast<size_t>(H - 1) * count * 4) << "H=" << H << " L=" << L;
              ++checked;
            }
      }
  EXPECT_GT(checked, 1500);
}

TEST(Schedule, HierarchicalNeedsHostsOfEqualSize) {
  ScheduleRequest req;
  req.algo = Algo::kHierarchical;
  req.nranks = 3;
  req.count = 100;
  req.chunk_bytes = 64;
  Schedule s;
  EXPECT_FALSE(build_schedule(req, &s));  // no host layout
  const int uneven[] = {0, 0, 1};
  req.host_of = uneven;
  EXPECT_FALSE(build_schedule(req, &s));
  const int even[] = {0, 1, 2};
  req.host_of = even;
  EXPECT_TRUE(build_schedule(req, &s));
}

// Note [Tree shape]: both trees span every rank, are acyclic, have at most 2 children, and
// no rank is interior (has children) in both; depth is ceil(log2 n) + 1 at most.
TEST(Schedule, DoubleBinaryTreesAreTreesAndShareTheInteriorWork) {
  for (int n = 1; n <= 64; ++n) {
    std::vector<int> interior(static_cast<size_t>(n), 0);
    for (int t = 0; t < 2; ++t) {
      int roots = 0;
      for (int r = 0; r < n; ++r) {
        int parent;
        std::vector<int> kids;
        tree_shape(t, r, n, &parent, &kids);
        EXPECT_LE(kids.size(), 2u);
        if (!kids.empty()) ++interior[static_cast<size_t>(r)];
        if (parent < 0) ++roots;
        for (int k : kids) {  // the child agrees
          int kp;
          std::vector<int> kk;
          tree_shape(t, k, n, &kp, &kk);
          EXPECT_EQ(kp, r) << "n=" << n << " tree " << t;
        }
        // Walk to the root: no cycles, logarithmic depth.
        int depth = 0, at = r;
        while (at >= 0 && depth <= n) {
          int p;
          std::vector<int> ignored;
          tree_shape(t, at, n, &p, &ignored);
          at = p;
          ++depth;
        }
        int log2n = 0;
        while ((1 << log2n) < n) ++log2n;
        EXPECT_LE(depth, log2n + 1) << "n=" << n << " rank " << r;
      }
      EXPECT_EQ(roots, 1) << "n=" << n;
    }
    for (int r = 0; r < n; ++r) EXPECT_LE(interior[static_cast<size_t>(r)], 1) << "n=" << n << " rank " << r;
  }
}

TEST(Schedule, RingStepCountMatchesCost) {
  // Per chunk loop: one plain send, then 2(n-1) steps that each wait for a message (the
  // 2(n-1) hops of latency in ring.cpp's cost).
  for (int n = 2; n <= 8; ++n) {
    ScheduleRequest req;
    req.nranks = n;
    req.count = static_cast<size_t>(n) * 10;
    req.elem_bytes = 4;
    req.chunk_bytes = 40;  // one loop
    Schedule s;
    ASSERT_TRUE(build_schedule(req, &s));
    EXPECT_EQ(s.steps.size(), static_cast<size_t>(2 * (n - 1) + 1)) << "n=" << n;
    size_t receiving = 0;
    for (const Step& st : s.steps) receiving += st.recv_peer >= 0;
    EXPECT_EQ(receiving, static_cast<size_t>(2 * (n - 1))) << "n=" << n;
  }
}

TEST(Schedule, BarrierRoundsAreLogarithmic) {
  for (int n = 1; n <= 9; ++n) {
    ScheduleRequest req;
    req.coll = Collective::kBarrier;
    req.algo = Algo::kDirect;
    req.nranks = n;
    Schedule s;
    ASSERT_TRUE(build_schedule(req, &s));
    int rounds = 0;
    for (int d = 1; d < n; d *= 2) ++rounds;
    EXPECT_EQ(s.steps.size(), static_cast<size_t>(2 * rounds));
  }
}

TEST(Schedule, UnsupportedCombinationsSayNo) {
  ScheduleRequest req;
  req.coll = Collective::kBroadcast;
  req.algo = Algo::kRing;
  req.nranks = 2;
  Schedule s;
  EXPECT_FALSE(build_schedule(req, &s));
  req.coll = Collective::kAllReduce;
  req.rank = 5;
  req.algo = Algo::kRing;
  EXPECT_FALSE(build_schedule(req, &s));
}


// ---- point-to-point batches (algorithms/point_to_point.cpp) ----

// One message of a batch: `bytes` from rank `from` to rank `to`.
struct Message {
  int from, to;
  size_t bytes;
};

// Runs every rank's batch schedule over FIFOs of `depth` messages, steps in order, until all
// are done or none can move (a deadlock: false). Each rank's calls are its messages' sends and
// receives in the order `order_of` gives; the receive buffers must end up holding the sends'.
bool run_p2p(int n, const std::vector<Message>& msgs, size_t piece, size_t depth, std::mt19937* shuffle,
             std::string* why) {
  std::vector<std::vector<uint8_t>> send_buf(msgs.size()), recv_buf(msgs.size());
  std::vector<std::vector<P2pCall>> calls(static_cast<size_t>(n));
  for (size_t m = 0; m < msgs.size(); ++m) {
    send_buf[m].resize(msgs[m].bytes);
    for (size_t i = 0; i < msgs[m].bytes; ++i) send_buf[m][i] = static_cast<uint8_t>(m * 31 + i * 7);
    recv_buf[m].assign(msgs[m].bytes, 0);
    const uint32_t tag = static_cast<uint32_t>(1 + msgs[m].bytes);
    calls[static_cast<size_t>(msgs[m].from)].push_back(
        P2pCall{true, msgs[m].to, reinterpret_cast<uintptr_t>(send_buf[m].data()), msgs[m].bytes, tag});
    calls[static_cast<size_t>(msgs[m].to)].push_back(
        P2pCall{false, msgs[m].from, reinterpret_cast<uintptr_t>(recv_buf[m].data()), msgs[m].bytes, tag});
  }
  // Any order of a rank's calls, keeping the order of the calls of one direction of one pair
  // (NCCL's matching rule): a stable sort by random keys per (direction, peer) run.
  if (shuffle != nullptr)
    for (auto& c : calls) {
      std::vector<std::pair<uint32_t, size_t>> keys;
      std::map<std::pair<bool, int>, std::vector<size_t>> groups;
      for (size_t i = 0; i < c.size(); ++i) groups[{c[i].send, c[i].peer}].push_back(i);
      std::vector<uint32_t> key(c.size());
      for (auto& [k, idx] : groups) {
        std::vector<uint32_t> ks;
        for (size_t j = 0; j < idx.size(); ++j) ks.push_back((*shuffle)());
        std::sort(ks.begin(), ks.end());
        for (size_t j = 0; j < idx.size(); ++j) key[idx[j]] = ks[j];
      }
      std::vector<size_t> order(c.size());
      for (size_t i = 0; i < c.size(); ++i) order[i] = i;
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key[a] < key[b]; });
      std::vector<P2pCall> sorted;
      for (size_t i : order) sorted.push_back(c[i]);
      c = sorted;
    }
  std::vector<Schedule> sched(static_cast<size_t>(n));
  const std::vector<size_t> pieces(static_cast<size_t>(n), piece);
  for (int r = 0; r < n; ++r) point_to_point_schedule(calls[static_cast<size_t>(r)], r, n, pieces, &sched[static_cast<size_t>(r)]);
  struct Msg {
    std::vector<uint8_t> data;
    uint32_t tag;
  };
  std::map<std::pair<int, int>, std::deque<Msg>> fifo;
  std::vector<size_t> pc(static_cast<size_t>(n), 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < n; ++r) {
      const Schedule& sc = sched[static_cast<size_t>(r)];
      for (size_t& i = pc[static_cast<size_t>(r)]; i < sc.steps.size(); ++i) {
        const Step& st = sc.steps[i];
        if (st.kind != StepKind::kCopy && st.bytes > piece) return *why = "a message larger than the piece", false;
        if (st.kind == StepKind::kSend) {
          auto& q = fifo[{r, st.send_peer}];
          if (q.size() == depth) break;
          const uint8_t* from = step_src(st, nullptr, nullptr);
          q.push_back(Msg{std::vector<uint8_t>(from, from + st.bytes), st.tag});
        } else if (st.kind == StepKind::kRecv) {
          auto& q = fifo[{st.recv_peer, r}];
          if (q.empty()) break;
          if (q.front().tag != st.tag || q.front().data.size() != st.bytes)
            return *why = "rank " + std::to_string(r) + " step " + std::to_string(i) + " got another message", false;
          std::memcpy(step_dst(st, nullptr, nullptr), q.front().data.data(), st.bytes);
          q.pop_front();
        } else if (st.kind == StepKind::kCopy) {
          std::memcpy(step_dst(st, nullptr, nullptr), step_src(st, nullptr, nullptr), st.bytes);
        } else {
          return *why = "an unexpected step kind", false;
        }
        moved = true;
      }
    }
  }
  for (int r = 0; r < n; ++r)
    if (pc[static_cast<size_t>(r)] != sched[static_cast<size_t>(r)].steps.size())
      return *why = "deadlock: rank " + std::to_string(r) + " stuck at step " + std::to_string(pc[static_cast<size_t>(r)]), false;
  for (size_t m = 0; m < msgs.size(); ++m)
    if (recv_buf[m] != send_buf[m]) return *why = "message " + std::to_string(m) + " arrived wrong", false;
  return true;
}

// Rings (each rank sends to the next and receives from the one before) and all-to-all, with
// messages of up to 3 whole FIFOs, in any order of each rank's calls: a batch whose calls ran
// one after the other would deadlock with FIFOs of 4 messages; the rounds never do.
TEST(Schedule, PointToPointBatchesNeverDeadlock) {
  const size_t piece = 64, depth = 4;
  std::mt19937 rng(7);
  for (int n : {1, 2, 3, 4})
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, 3 * depth * piece + 5}) {
      std::vector<Message> ring, all;
      for (int r = 0; r < n; ++r) {
        ring.push_back({r, (r + 1) % n, bytes});
        for (int q = 0; q < n; ++q) all.push_back({r, q, bytes + static_cast<size_t>(q)});
      }
      for (int trial = 0; trial < 4; ++trial) {
        std::string why;
        EXPECT_TRUE(run_p2p(n, ring, piece, depth, trial == 0 ? nullptr : &rng, &why))
            << n << " ranks, ring of " << bytes << " bytes: " << why;
        EXPECT_TRUE(run_p2p(n, all, piece, depth, trial == 0 ? nullptr : &rng, &why))
            << n << " ranks, all-to-all of " << bytes << " bytes: " << why;
      }
    }
  // Any mix: random messages between random pairs (several per pair, both directions, to
  // itself), each rank's calls in random order.
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 5);
    std::vector<Message> msgs;
    const int count = static_cast<int>(rng() % 12);
    for (int m = 0; m < count; ++m)
      msgs.push_back({static_cast<int>(rng() % n), static_cast<int>(rng() % n), rng() % (3 * depth * piece)});
    std::string why;
    EXPECT_TRUE(run_p2p(n, msgs, piece, depth, &rng, &why)) << "trial " << trial << ": " << why;
  }
}

}  // namespace
}  // namespace accord
