// A collective as a schedule: the list of steps one rank performs, in order. Algorithms are
// pure functions from (rank, nranks, count, element size, chunk size, root) to a Schedule;
// the executor runs it on channels. Schedules are tested with no transport at all
// (tests/core/schedule_test.cpp simulates every rank and checks that each output element
// receives each rank's contribution exactly once).
//
// Buffers: kInput is the caller's sendbuf, kOutput its recvbuf. For collectives whose input
// and output differ in size (reduce-scatter, all-gather) offsets are in each buffer's own
// bytes.
//
// Note [Chunk alignment]: every offset and length in a schedule is a whole number of
// elements; pieces are cut at multiples of chunk_elems (chunk_bytes / element size, at least
// 1), so no element is ever split between two messages and kernels never see a partial one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace accord {

// kAddress: the offset is the buffer's address (point-to-point batches: each call has buffers
// of its own; Note [Point-to-point schedules], point_to_point.cpp).
enum class Buf : uint8_t { kInput, kOutput, kAddress };

enum class StepKind : uint8_t {
  kSend,                // send src[src_off, +bytes) to send_peer
  kRecv,                // dst[dst_off, +bytes) = message from recv_peer
  kRecvReduce,          // dst = message op src
  kRecvReduceSend,      // send (message op src) to send_peer
  kRecvReduceCopySend,  // dst = message op src, and send it to send_peer
  kRecvCopySend,        // dst = message, and forward it to send_peer
  kCopy,                // dst = src (local)
  kReduceAll,           // dst = in_0 op in_1 op ... op in_{n-1}, in rank order: own src at
                        // this rank's place, every other operand a message from that rank
};

const char* step_kind_name(StepKind k);

struct Step {
  StepKind kind;
  Buf src = Buf::kInput;
  Buf dst = Buf::kOutput;
  bool postop = false;         // final reduction of these elements: apply avg's divide
  bool message_right = false;  // recv-reduce: src op message instead of message op src
  // A send or receive whose payload a copy engine moves between the buffer and the FIFO slot
  // (in host memory) on the same stream: the kernel only hands the slot off (Note [Copy-engine
  // messages], collectives/device/fifo_wait.cpp).
  bool copied = false;
  int send_peer = -1;
  int recv_peer = -1;
  size_t src_off = 0;
  size_t dst_off = 0;
  size_t bytes = 0;
  uint32_t tag = 0;  // its messages' tag; 0: the call's
};

// The bytes a step reads and writes, in the call's input and output (the executor and the
// device path's one-rank copies).
inline const uint8_t* step_src(const Step& s, const void* input, const void* output) {
  if (s.src == Buf::kAddress) return reinterpret_cast<const uint8_t*>(s.src_off);
  return static_cast<const uint8_t*>(s.src == Buf::kInput ? input : output) + s.src_off;
}
inline uint8_t* step_dst(const Step& s, const void* input, void* output) {
  if (s.dst == Buf::kAddress) return reinterpret_cast<uint8_t*>(s.dst_off);
  return static_cast<uint8_t*>(s.dst == Buf::kOutput ? output : const_cast<void*>(input)) +
         s.dst_off;
}

// The one way algorithms build steps. src and dst offsets are bytes into their buffers.
inline Step make_step(StepKind kind, Buf src, size_t src_off, Buf dst, size_t dst_off, size_t bytes,
                      int send_peer = -1, int recv_peer = -1, bool postop = false) {
  Step s;
  s.kind = kind;
  s.src = src;
  s.dst = dst;
  s.postop = postop;
  s.send_peer = send_peer;
  s.recv_peer = recv_peer;
  s.src_off = src_off;
  s.dst_off = dst_off;
  s.bytes = bytes;
  return s;
}

// kSend and kRecv are point-to-point (CollArgs::root is the peer): on host buffers the
// communicator runs them itself; on device buffers a batch of them is a schedule of its own
// (point_to_point_schedule, collectives/point_to_point.cpp).
enum class Collective : uint8_t {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kBarrier,
  kSend,
  kRecv
};
const char* collective_name(Collective c);
// Whether the collective combines values (all-reduce, reduce-scatter, reduce): dtype and op matter.
inline bool reduces(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter || c == Collective::kReduce;
}

enum class Algo : uint8_t { kRing, kDirect, kChain, kTree, kRecursiveDoubling, kHierarchical };
const char* algo_name(Algo a);

struct ScheduleRequest {
  Collective coll = Collective::kAllReduce;
  Algo algo = Algo::kRing;
  int rank = 0;
  int nranks = 1;
  size_t count = 0;       // elements: per rank for RS (recvcount) and AG (sendcount)
  size_t elem_bytes = 4;
  size_t chunk_bytes = 0;  // at most one channel slot
  int root = 0;
  bool in_place = false;
  // Host of every rank (nranks entries, small ints; equal means same host), for the
  // hierarchical algorithm. Null: unknown, and hierarchical says "not supported".
  const int* host_of = nullptr;
};

struct Schedule {
  std::vector<Step> steps;
  size_t scratch_bytes = 0;  // executor scratch needed (kReduceAll with 3+ ranks)
};

// Returns false (and leaves out empty) when the algorithm cannot serve the request.
bool build_schedule(const ScheduleRequest& req, Schedule* out);

// One rank's share of `count` elements split into n parts: the first count % n parts get
// one more element. Used by every algorithm so that all ranks agree on segment bounds.
inline size_t segment_count(size_t count, int n, int i) {
  return count / static_cast<size_t>(n) + (static_cast<size_t>(i) < count % static_cast<size_t>(n) ? 1 : 0);
}
inline size_t segment_offset(size_t count, int n, int i) {
  size_t base = count / static_cast<size_t>(n), extra = count % static_cast<size_t>(n);
  size_t ui = static_cast<size_t>(i);
  return ui * base + (ui < extra ? ui : extra);
}

// One send or receive of a point-to-point batch on device buffers: `bytes` at address `addr`,
// to or from `peer`, its messages tagged `tag` (non-zero).
struct P2pCall {
  bool send = true;
  int peer = 0;
  uint64_t addr = 0;
  size_t bytes = 0;
  uint32_t tag = 0;
};
// The batch's steps for `rank` (algorithms/point_to_point.cpp): sends and receives to and from
// each peer p of at most piece_bytes[p] each (both ends of a pair must cut them alike: Note
// [Point-to-point FIFOs], collectives/point_to_point.cpp), in rounds, and a copy for each send
// to `rank` paired (in call order) with a receive from it. The caller checks that those pairs
// match; calls of 0 bytes have no step.
void point_to_point_schedule(const std::vector<P2pCall>& calls, int rank, int nranks,
                             const std::vector<size_t>& piece_bytes, Schedule* out);

// Algorithm builders (one file each).
void ring_all_reduce(const ScheduleRequest& req, Schedule* out);
void ring_reduce_scatter(const ScheduleRequest& req, Schedule* out);
void ring_all_gather(const ScheduleRequest& req, Schedule* out);
void direct_all_reduce(const ScheduleRequest& req, Schedule* out);
void tree_all_reduce(const ScheduleRequest& req, Schedule* out);
void recursive_doubling_all_reduce(const ScheduleRequest& req, Schedule* out);
// False unless host_of is set and every host holds the same number of ranks.
bool hierarchical_all_reduce(const ScheduleRequest& req, Schedule* out);
// Note [Tree shape] (tree.cpp): parent (-1 for the root) and children of rank in tree 0 or 1.
void tree_shape(int tree, int rank, int nranks, int* parent, std::vector<int>* children);
void chain_broadcast(const ScheduleRequest& req, Schedule* out);
void chain_reduce(const ScheduleRequest& req, Schedule* out);
void direct_barrier(const ScheduleRequest& req, Schedule* out);

}  // namespace accord
