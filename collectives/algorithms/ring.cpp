// Ring all-reduce, reduce-scatter and all-gather.
//
// Cost for n ranks and S bytes (all-reduce): per chunk, one send and 2(n-1) steps that each
// wait for a message (2(n-1) hops of latency); each rank sends and
// receives 2(n-1)/n * S bytes; every byte is reduced once by one rank and copied to the
// others, so all ranks end bitwise identical. Reduce-scatter and all-gather are the two
// halves: n-1 steps, (n-1)/n * S bytes each way (S = the whole gathered size).
//
// Segments: the buffer is cut into n segments (segment_count); segment s is reduced along the
// ring and finishes on rank s-1 (all-reduce) or rank s (reduce-scatter). Pipelining: each
// segment is cut into pieces of chunk_elems (Note [Chunk alignment]); loop j handles piece j
// of every segment through all steps, so while rank r reduces piece j its neighbours already
// move piece j+1. A piece that is empty for a short segment is skipped by both its sender
// and its receiver (both compute the same bounds).
#include <algorithm>

#include "collectives/schedule.hpp"

namespace accord {
namespace {

struct Piece {
  size_t off = 0;    // bytes
  size_t bytes = 0;
};

// Piece j of segment s (segments of `counts`/`offsets` elements).
Piece piece(const ScheduleRequest& req, size_t seg_off_elems, size_t seg_count_elems, size_t chunk_elems,
            size_t j) {
  size_t start = j * chunk_elems;
  if (start >= seg_count_elems) return {};
  size_t n = std::min(chunk_elems, seg_count_elems - start);
  return {(seg_off_elems + start) * req.elem_bytes, n * req.elem_bytes};
}

size_t chunk_elems_of(const ScheduleRequest& req) {
  return std::max<size_t>(1, req.chunk_bytes / req.elem_bytes);
}

int mod(int a, int n) { return ((a % n) + n) % n; }

void add(Schedule* out, StepKind kind, const Piece& src, const Piece& dst, int send_peer, int recv_peer,
         Buf src_buf = Buf::kInput, Buf dst_buf = Buf::kOutput, bool postop = false) {
  if (src.bytes == 0 && dst.bytes == 0) return;
  out->steps.push_back(make_step(kind, src_buf, src.off, dst_buf, dst.off, std::max(src.bytes, dst.bytes), send_peer,
                                 recv_peer, postop));
}

}  // namespace

void ring_all_reduce(const ScheduleRequest& req, Schedule* out) {
  const int n = req.nranks, r = req.rank;
  if (n == 1) {
    if (!req.in_place && req.count > 0) {
      Piece all{0, req.count * req.elem_bytes};
      add(out, StepKind::kCopy, all, all, -1, -1, Buf::kInput, Buf::kOutput, true);
    }
    return;
  }
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const size_t ce = chunk_elems_of(req);
  const size_t loops = (segment_count(req.count, n, 0) + ce - 1) / ce;
  auto seg = [&](int s, size_t j) {
    return piece(req, segment_offset(req.count, n, s), segment_count(req.count, n, s), ce, j);
  };
  for (size_t j = 0; j < loops; ++j) {
    // Reduce-scatter half: segment r leaves, segments r-1, r-2, ... arrive and are reduced.
    Piece p = seg(r, j);
    add(out, StepKind::kSend, p, {}, next, -1);
    for (int k = 0; k < n - 2; ++k) {
      p = seg(mod(r - 1 - k, n), j);
      add(out, StepKind::kRecvReduceSend, p, {}, next, prev);
    }
    // Segment r+1 is now complete here: keep it and start it around the ring.
    p = seg(mod(r + 1, n), j);
    add(out, StepKind::kRecvReduceCopySend, p, p, next, prev, Buf::kInput, Buf::kOutput, true);
    // All-gather half: completed segments travel on.
    for (int k = 0; k < n - 2; ++k) {
      p = seg(mod(r - k, n), j);
      add(out, StepKind::kRecvCopySend, {}, p, next, prev);
    }
    p = seg(mod(r + 2, n), j);
    add(out, StepKind::kRecv, {}, p, -1, prev);
  }
}

void ring_reduce_scatter(const ScheduleRequest& req, Schedule* out) {
  const int n = req.nranks, r = req.rank;
  const size_t ce = chunk_elems_of(req);
  const size_t loops = (req.count + ce - 1) / ce;
  auto in_seg = [&](int s, size_t j) { return piece(req, static_cast<size_t>(s) * req.count, req.count, ce, j); };
  auto out_seg = [&](size_t j) { return piece(req, 0, req.count, ce, j); };
  if (n == 1) {
    for (size_t j = 0; j < loops && !req.in_place; ++j)
      add(out, StepKind::kCopy, in_seg(0, j), out_seg(j), -1, -1, Buf::kInput, Buf::kOutput, true);
    return;
  }
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  for (size_t j = 0; j < loops; ++j) {
    add(out, StepKind::kSend, in_seg(mod(r - 1, n), j), {}, next, -1);
    for (int k = 0; k < n - 2; ++k) add(out, StepKind::kRecvReduceSend, in_seg(mod(r - 2 - k, n), j), {}, next, prev);
    add(out, StepKind::kRecvReduce, in_seg(r, j), out_seg(j), -1, prev, Buf::kInput, Buf::kOutput, true);
  }
}

void ring_all_gather(const ScheduleRequest& req, Schedule* out) {
  const int n = req.nranks, r = req.rank;
  const size_t ce = chunk_elems_of(req);
  const size_t loops = (req.count + ce - 1) / ce;
  auto in_piece = [&](size_t j) { return piece(req, 0, req.count, ce, j); };
  auto out_seg = [&](int s, size_t j) { return piece(req, static_cast<size_t>(s) * req.count, req.count, ce, j); };
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  for (size_t j = 0; j < loops; ++j) {
    if (n > 1) add(out, StepKind::kSend, in_piece(j), {}, next, -1);
    if (!req.in_place) add(out, StepKind::kCopy, in_piece(j), out_seg(r, j), -1, -1);
    for (int k = 0; k < n - 2; ++k) add(out, StepKind::kRecvCopySend, {}, out_seg(mod(r - 1 - k, n), j), next, prev);
    if (n > 1) add(out, StepKind::kRecv, {}, out_seg(mod(r + 1, n), j), -1, prev);
  }
}

}  // namespace accord
