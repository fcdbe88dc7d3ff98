// Hierarchical all-reduce, for ranks spread over several hosts (ACCORD_ALGO=hier).
//
// With H hosts of L ranks each (req.host_of; every host must hold the same number of ranks,
// else the algorithm says "not supported"), the buffer is cut into blocks of L * H chunks.
// For each block:
//   1. reduce-scatter inside each host (a ring over its L ranks, shared memory): local rank l
//      ends with slice l of the block reduced over its host;
//   2. all-reduce of slice l across hosts (a ring over the H ranks of local index l, one per
//      host, TCP), so the L rings of a host run side by side on different slices;
//   3. all-gather inside each host.
//
// Cost for n = L * H ranks and S bytes: each rank sends 2(L-1)/L * S inside its host and
// 2(H-1)/(L H) * S to other hosts, 2(n-1) * S in all as for the flat ring; but each host's
// network link carries 2(H-1)/H * S each way, the lower bound for any all-reduce, where a
// flat ring over rank order carries 2(n-1)/n * S on each host boundary (1.5 S instead of S
// for 2 x 2). Latency per block: 2(L-1) local hops plus 2(H-1) network hops.
//
// Note [Hierarchical pipeline]: the executor runs a rank's steps in order, and TCP sends
// return once queued, so the steps of consecutive blocks interleave to keep the network busy
// while the rank works locally. For block b the network ring's first send goes out, then the
// rank reduce-scatters block b+1 inside its host; after the ring step that sends its reduced
// piece it all-gathers block b-1 inside the host, and only then waits for the ring's last
// messages. Every rank of a ring or of a host runs the same interleaving, so each channel
// carries its messages in the same order on both ends.
#include <algorithm>
#include <vector>

#include "collectives/schedule.hpp"

namespace accord {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

// Elements [off, off + count) of the buffer, cut into `parts` segments of segment_count.
struct Region {
  size_t off = 0;
  size_t count = 0;
  size_t seg_off(int parts, int s) const { return off + segment_offset(count, parts, mod(s, parts)); }
  size_t seg_count(int parts, int s) const { return segment_count(count, parts, mod(s, parts)); }
};

class Builder {
 public:
  Builder(const ScheduleRequest& req, Schedule* out) : req_(req), out_(out) {}

  bool layout() {
    const int n = req_.nranks;
    std::vector<int> host_index(static_cast<size_t>(n), -1);  // host id -> index, by first appearance
    std::vector<std::vector<int>> hosts;
    for (int r = 0; r < n; ++r) {
      const int id = req_.host_of[r];
      if (id < 0 || id >= n) return false;
      int& h = host_index[static_cast<size_t>(id)];
      if (h < 0) {
        h = static_cast<int>(hosts.size());
        hosts.emplace_back();
      }
      hosts[static_cast<size_t>(h)].push_back(r);
    }
    H_ = static_cast<int>(hosts.size());
    L_ = n / H_;
    for (const auto& members : hosts)
      if (static_cast<int>(members.size()) != L_) return false;
    h_ = host_index[static_cast<size_t>(req_.host_of[req_.rank])];
    const auto& mine = hosts[static_cast<size_t>(h_)];
    l_ = static_cast<int>(std::find(mine.begin(), mine.end(), req_.rank) - mine.begin());
    local_next_ = mine[static_cast<size_t>(mod(l_ + 1, L_))];
    local_prev_ = mine[static_cast<size_t>(mod(l_ - 1, L_))];
    net_next_ = hosts[static_cast<size_t>(mod(h_ + 1, H_))][static_cast<size_t>(l_)];
    net_prev_ = hosts[static_cast<size_t>(mod(h_ - 1, H_))][static_cast<size_t>(l_)];
    // With one rank per host, the slice is still in the input when the network ring starts.
    slice_buf_ = L_ == 1 ? Buf::kInput : Buf::kOutput;
    return true;
  }

  void build() {
    ce_ = std::max<size_t>(1, req_.chunk_bytes / req_.elem_bytes);
    const size_t block = ce_ * static_cast<size_t>(L_) * static_cast<size_t>(H_);
    const size_t nblocks = (req_.count + block - 1) / block;
    auto block_region = [&](size_t b) {
      Region g;
      g.off = b * block;
      g.count = std::min(block, req_.count - g.off);
      return g;
    };
    if (nblocks > 0) local_reduce_scatter(block_region(0));
    for (size_t b = 0; b < nblocks; ++b) {
      const Region g = block_region(b);
      Region slice;
      slice.off = g.seg_off(L_, l_);
      slice.count = g.seg_count(L_, l_);
      net_first_send(slice);
      if (b + 1 < nblocks) local_reduce_scatter(block_region(b + 1));
      net_reduce(slice);
      if (b > 0) local_all_gather(block_region(b - 1));
      net_gather(slice);
    }
    if (nblocks > 0) local_all_gather(block_region(nblocks - 1));
  }

 private:
  void add(StepKind kind, Buf src, Buf dst, size_t off_elems, size_t count_elems, int send_peer, int recv_peer,
           bool postop = false) {
    if (count_elems == 0) return;  // both ends compute the same bounds and skip it alike
    const size_t off = off_elems * req_.elem_bytes, bytes = count_elems * req_.elem_bytes;
    out_->steps.push_back(make_step(kind, src, off, dst, off, bytes, send_peer, recv_peer, postop));
  }

  // Calls f(off, count) for every chunk-sized piece j of segment s, all segments of a ring
  // stage together: piece j of every segment before piece j+1 of any.
  template <typename F>
  void pieces(const Region& g, int parts, int s, size_t j, F f) {
    const size_t c = g.seg_count(parts, s), start = j * ce_;
    if (start < c) f(g.seg_off(parts, s) + start, std::min(ce_, c - start));
  }
  size_t loops(const Region& g, int parts) const { return (g.seg_count(parts, 0) + ce_ - 1) / ce_; }

  // Stage 1: local rank l ends with segment l of the block, reduced over its host, in the
  // output (the input too, with one rank per host, where nothing moves).
  void local_reduce_scatter(const Region& g) {
    if (L_ == 1) return;
    const bool last = H_ == 1;  // then this is the final reduction (avg divides here)
    for (size_t j = 0; j < loops(g, L_); ++j) {
      pieces(g, L_, l_ - 1, j, [&](size_t o, size_t c) { add(StepKind::kSend, Buf::kInput, Buf::kOutput, o, c, local_next_, -1); });
      for (int k = 0; k < L_ - 2; ++k)
        pieces(g, L_, l_ - 2 - k, j, [&](size_t o, size_t c) {
          add(StepKind::kRecvReduceSend, Buf::kInput, Buf::kOutput, o, c, local_next_, local_prev_);
        });
      pieces(g, L_, l_, j, [&](size_t o, size_t c) {
        add(StepKind::kRecvReduce, Buf::kInput, Buf::kOutput, o, c, -1, local_prev_, last);
      });
    }
  }

  // Stage 3: every local rank's segment to every other, output to output.
  void local_all_gather(const Region& g) {
    if (L_ == 1) return;
    for (size_t j = 0; j < loops(g, L_); ++j) {
      pieces(g, L_, l_, j, [&](size_t o, size_t c) { add(StepKind::kSend, Buf::kOutput, Buf::kOutput, o, c, local_next_, -1); });
      for (int k = 0; k < L_ - 2; ++k)
        pieces(g, L_, l_ - 1 - k, j, [&](size_t o, size_t c) {
          add(StepKind::kRecvCopySend, Buf::kOutput, Buf::kOutput, o, c, local_next_, local_prev_);
        });
      pieces(g, L_, l_ + 1, j, [&](size_t o, size_t c) { add(StepKind::kRecv, Buf::kOutput, Buf::kOutput, o, c, -1, local_prev_); });
    }
  }

  // Stage 2, a ring all-reduce (ring.cpp) of the slice over the H ranks of local index l, in
  // three parts so that local work fits between them (Note [Hierarchical pipeline]). A
  // slice is H chunks at most, so each part is one step per segment.
  void net_first_send(const Region& s) {
    if (H_ == 1) return;
    for (size_t j = 0; j < loops(s, H_); ++j)
      pieces(s, H_, h_, j, [&](size_t o, size_t c) { add(StepKind::kSend, slice_buf_, Buf::kOutput, o, c, net_next_, -1); });
  }
  void net_reduce(const Region& s) {
    if (H_ == 1) {
      if (L_ == 1) add(StepKind::kCopy, Buf::kInput, Buf::kOutput, s.off, req_.in_place ? 0 : s.count, -1, -1, true);
      return;
    }
    for (size_t j = 0; j < loops(s, H_); ++j) {
      for (int k = 0; k < H_ - 2; ++k)
        pieces(s, H_, h_ - 1 - k, j, [&](size_t o, size_t c) {
          add(StepKind::kRecvReduceSend, slice_buf_, Buf::kOutput, o, c, net_next_, net_prev_);
        });
      pieces(s, H_, h_ + 1, j, [&](size_t o, size_t c) {
        add(StepKind::kRecvReduceCopySend, slice_buf_, Buf::kOutput, o, c, net_next_, net_prev_, true);
      });
    }
  }
  void net_gather(const Region& s) {
    if (H_ == 1) return;
    for (size_t j = 0; j < loops(s, H_); ++j) {
      for (int k = 0; k < H_ - 2; ++k)
        pieces(s, H_, h_ - k, j, [&](size_t o, size_t c) {
          add(StepKind::kRecvCopySend, Buf::kOutput, Buf::kOutput, o, c, net_next_, net_prev_);
        });
      pieces(s, H_, h_ + 2, j, [&](size_t o, size_t c) { add(StepKind::kRecv, Buf::kOutput, Buf::kOutput, o, c, -1, net_prev_); });
    }
  }

  const ScheduleRequest& req_;
  Schedule* out_;
  int H_ = 1, L_ = 1, h_ = 0, l_ = 0;
  int local_next_ = -1, local_prev_ = -1, net_next_ = -1, net_prev_ = -1;
  Buf slice_buf_ = Buf::kOutput;
  size_t ce_ = 1;
};

}  // namespace

bool hierarchical_all_reduce(const ScheduleRequest& req, Schedule* out) {
  if (req.host_of == nullptr) return false;
  Builder b(req, out);
  if (!b.layout()) return false;
  b.build();
  return true;
}

}  // namespace accord
