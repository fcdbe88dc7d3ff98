// Double binary tree all-reduce.
//
// Two binary trees over the ranks, each carrying half of the buffer: in each, chunks are
// reduced up to the root and broadcast back down, pipelined so that chunk j goes down while
// chunk j+1 goes up. Every rank is a leaf in at least one tree (interior in at most one), so
// the work of reducing and forwarding is spread evenly.
//
// Cost for n ranks and S bytes: 2 * ceil(log2 n) hops of latency per chunk (up and down);
// each tree moves (n-1) * S/2 bytes up and as many down, 2(n-1) * S in all (like the ring),
// but a rank's messages go to at most 3 peers and the latency grows with log n, not n.
//
// The trees (Note [Tree shape]): rank r sits at position p = r + 1 in tree 0. A node at
// position p whose lowest set bit is 2^h has children p - 2^(h-1) and p + 2^(h-1) (the right
// one, if beyond n, is replaced by p + 2^(h-2), p + 2^(h-3)... until it fits); its parent is
// p with bit h cleared and bit h+1 set, or just bit h cleared when that is beyond n. The root
// is the largest power of two <= n; odd positions are leaves. Tree 1 renumbers the ranks, r -> n-1-r for even n (leaves
// and interior nodes swap) and r -> r+1 mod n for odd n, and applies the same shape.
#include <algorithm>
#include <vector>

#include "collectives/schedule.hpp"

namespace accord {
namespace {

struct Node {
  int parent = -1;          // rank
  std::vector<int> children;  // ranks
};

int lowbit(int p) { return p & -p; }

// Position-space tree of size m (positions 1..m).
void tree_links(int p, int m, int* parent, std::vector<int>* children) {
  const int b = lowbit(p);
  int up = (p & ~b) | (b << 1);
  if (up > m) up = p & ~b;
  *parent = up;  // 0: p is the root
  children->clear();
  if (b > 1) {
    children->push_back(p - b / 2);
    for (int step = b / 2; step >= 1; step /= 2) {
      if (p + step <= m) {
        children->push_back(p + step);
        break;
      }
    }
  }
}

Node node_of(int tree, int rank, int n) {
  // Renumbering: the rank at position p of this tree.
  auto to_virtual = [&](int r) { return tree == 0 ? r : (n % 2 == 0 ? n - 1 - r : (r + 1) % n); };
  auto to_rank = [&](int v) { return tree == 0 ? v : (n % 2 == 0 ? n - 1 - v : (v + n - 1) % n); };
  int parent_pos = 0;
  std::vector<int> child_pos;
  tree_links(to_virtual(rank) + 1, n, &parent_pos, &child_pos);
  Node node;
  node.parent = parent_pos == 0 ? -1 : to_rank(parent_pos - 1);
  for (int c : child_pos) node.children.push_back(to_rank(c - 1));
  return node;
}

Step make(StepKind kind, Buf src, Buf dst, int send_peer, int recv_peer, size_t off, size_t bytes,
          bool postop = false) {
  return make_step(kind, src, off, dst, off, bytes, send_peer, recv_peer, postop);
}

// Reduce one chunk up the tree: this rank's contribution plus its children's, to the parent
// (or, at the root, into the output with the post-op).
void up(const Node& node, size_t off, size_t bytes, Schedule* out) {
  const Buf in = Buf::kInput, o = Buf::kOutput;
  const auto& kids = node.children;
  const bool root = node.parent < 0;
  if (kids.empty()) {
    if (root) out->steps.push_back(make(StepKind::kCopy, in, o, -1, -1, off, bytes, true));
    else out->steps.push_back(make(StepKind::kSend, in, o, node.parent, -1, off, bytes));
    return;
  }
  // The running sum lives in the output chunk (it is overwritten by the broadcast later).
  for (size_t k = 0; k < kids.size(); ++k) {
    const bool last = k + 1 == kids.size();
    const Buf src = k == 0 ? in : o;
    if (last && !root) out->steps.push_back(make(StepKind::kRecvReduceSend, src, o, node.parent, kids[k], off, bytes));
    else out->steps.push_back(make(StepKind::kRecvReduce, src, o, -1, kids[k], off, bytes, last && root));
  }
}

// Broadcast one reduced chunk down the tree.
void down(const Node& node, size_t off, size_t bytes, Schedule* out) {
  const Buf o = Buf::kOutput;
  const auto& kids = node.children;
  size_t first_send = 0;
  if (node.parent >= 0) {
    if (kids.empty()) {
      out->steps.push_back(make(StepKind::kRecv, o, o, -1, node.parent, off, bytes));
      return;
    }
    out->steps.push_back(make(StepKind::kRecvCopySend, o, o, kids[0], node.parent, off, bytes));
    first_send = 1;
  }
  for (size_t k = first_send; k < kids.size(); ++k)
    out->steps.push_back(make(StepKind::kSend, o, o, kids[k], -1, off, bytes));
}

}  // namespace

void tree_all_reduce(const ScheduleRequest& req, Schedule* out) {
  const int n = req.nranks;
  const size_t es = req.elem_bytes;
  const size_t ce = std::max<size_t>(1, req.chunk_bytes / es);
  // Halves: tree 0 takes the first ceil(count/2) elements, tree 1 the rest.
  const size_t half0 = (req.count + 1) / 2, half1 = req.count - half0;
  const Node nodes[2] = {node_of(0, req.rank, n), node_of(1, req.rank, n)};
  const size_t counts[2] = {half0, half1}, offsets[2] = {0, half0};
  const size_t loops = (half0 + ce - 1) / ce;
  auto piece = [&](int t, size_t j, size_t* off, size_t* bytes) {
    size_t start = j * ce;
    if (start >= counts[t]) return false;
    *off = (offsets[t] + start) * es;
    *bytes = std::min(ce, counts[t] - start) * es;
    return true;
  };
  size_t off, bytes;
  for (size_t j = 0; j <= loops; ++j) {
    for (int t = 0; t < 2; ++t)
      if (j < loops && piece(t, j, &off, &bytes)) up(nodes[t], off, bytes, out);
    for (int t = 0; t < 2; ++t)
      if (j >= 1 && piece(t, j - 1, &off, &bytes)) down(nodes[t], off, bytes, out);
  }
}

// Exposed for tests: parent and children of `rank` in tree 0 or 1.
void tree_shape(int tree, int rank, int nranks, int* parent, std::vector<int>* children) {
  Node node = node_of(tree, rank, nranks);
  *parent = node.parent;
  *children = node.children;
}

}  // namespace accord
