// Schedule interpreter (see executor.hpp).
#include "collectives/executor.hpp"

#include <algorithm>

namespace accord {
namespace {

// A message from `peer` must carry this call's tag (`expected`) and the size the schedule
// expects.
Status check_message(const WaitContext& w, uint32_t expected, int peer, uint32_t tag, size_t want, size_t got) {
  if (tag != expected)
    return error(ACCORD_ERR_MISMATCH,
                 "rank %d: %s (seq %llu): rank %d is making a different call (another collective, count, dtype, op "
                 "or root); every rank must make the same calls in the same order (ACCORD_CHECK=1 names the "
                 "difference)",
                 w.self_rank, w.operation, static_cast<unsigned long long>(w.seq), peer);
  if (got != want)
    return error(ACCORD_ERR_MISMATCH,
                 "rank %d: %s (seq %llu) expected a message of %zu bytes from rank %d but got %zu; the ranks "
                 "called it with different counts, dtypes or collectives (run with ACCORD_CHECK=1 to name the "
                 "difference)",
                 w.self_rank, w.operation, static_cast<unsigned long long>(w.seq), want, peer, got);
  return Status::success();
}

// The wait context of a call on `links`, pointed at no peer yet.
WaitContext call_context(const ExecArgs& a, const PeerLinks& links) {
  WaitContext ctx = a.wait;
  ctx.pidfds = links.pidfd.data();
  ctx.nranks = static_cast<int>(links.pidfd.size());
  ctx.death_notes = links.death_notes;
  ctx.departures = links.departures;
  return ctx;
}

class Runner {
 public:
  Runner(const ExecArgs& args, const PeerLinks& links) : a_(args), links_(links), ctx_(call_context(args, links)) {}

  Status run(const Schedule& schedule) {
    const std::vector<Step>& steps = schedule.steps;
    steps_ = &steps;
    for (size_t i = 0; i < steps.size(); ++i) {
      if (a_.fault != nullptr && static_cast<long>(i) == a_.fault_step) trigger_fault(*a_.fault);
      current_ = i;
      ACCORD_TRY(step(steps[i]));
    }
    return Status::success();
  }

 private:
  const uint8_t* src(const Step& s) const { return step_src(s, a_.input, a_.output); }
  uint8_t* dst(const Step& s) const { return step_dst(s, a_.input, a_.output); }
  // The call's wait context, pointed at `peer` (set up once per call, not copied per wait).
  const WaitContext& ctx(int peer) {
    ctx_.peer_rank = peer;
    ctx_.peer_pidfd = links_.pidfd[static_cast<size_t>(peer)];
    return ctx_;
  }
  Status copy(void* d, const void* s, size_t bytes, bool streaming) {
    const Ahead next = streaming ? ahead() : Ahead{};
    kernels::copy(d, s, bytes, streaming, next.at, next.bytes);
    return Status::success();
  }
  Status reduce(const kernels::ReduceArgs& k) {
    a_.reduce(k);
    return Status::success();
  }
  // Note [Prefetch while streaming] (kernels/reduce_isa.cpp): a copy or reduction that streams
  // its output pulls in the user-buffer bytes that a later step reads: the first such step
  // after this one that no earlier streaming call has claimed, within a few steps (with 2
  // ranks, ring's fused reduction claims the next send and its all-gather copy the next
  // fused reduction).
  struct Ahead {
    const void* at = nullptr;
    size_t bytes = 0;
  };
  Ahead ahead() {
    constexpr size_t kLookahead = 4;
    const std::vector<Step>& steps = *steps_;
    const size_t end = std::min(steps.size(), current_ + 1 + kLookahead);
    for (size_t j = std::max(claimed_, current_ + 1); j < end; ++j) {
      const Step& s = steps[j];
      // kRecv and kRecvCopySend read a message; the other kinds read src(s).
      if (s.kind == StepKind::kRecv || s.kind == StepKind::kRecvCopySend || s.bytes == 0) continue;
      claimed_ = j + 1;
      return {src(s), s.bytes};
    }
    return {};
  }
  void prefetch_next(kernels::ReduceArgs* k) {
    if (!k->dst0_streaming) return;
    const Ahead next = ahead();
    k->prefetch = next.at;
    k->prefetch_bytes = next.bytes;
  }
  size_t count(const Step& s) const { return s.bytes / a_.elem_bytes; }
  int divisor(const Step& s) const { return s.postop ? a_.divisor : 0; }

  Status receive(int peer, size_t want, const void** data) {
    size_t got = 0;
    uint32_t tag = 0;
    ACCORD_TRY(links_.recv[static_cast<size_t>(peer)]->wait(data, &got, &tag, ctx(peer)));
    if (tag != a_.tag) links_.recv[static_cast<size_t>(peer)]->release();
    return check_message(a_.wait, a_.tag, peer, tag, want, got);
  }

  // `like`: the user-buffer piece the message carries. Only calls that stream pass it on (Note
  // [Slot alignment]): elsewhere it costs a line more per message and the kernels do not align.
  Status acquire(int peer, size_t bytes, const void* like, void** slot) {
    return links_.send[static_cast<size_t>(peer)]->acquire_like(
        bytes, a_.streaming ? like : nullptr, slot, ctx(peer));
  }

  Status step(const Step& s) {
    const void* msg = nullptr;
    void* slot = nullptr;
    kernels::ReduceArgs k;
    k.count = count(s);
    switch (s.kind) {
      case StepKind::kSend:
        ACCORD_TRY(acquire(s.send_peer, s.bytes, src(s), &slot));
        kernels::copy_to_peer(slot, src(s), s.bytes);
        links_.send[static_cast<size_t>(s.send_peer)]->post(s.bytes, a_.tag);
        return Status::success();
      case StepKind::kRecv:
        ACCORD_TRY(receive(s.recv_peer, s.bytes, &msg));
        ACCORD_TRY(copy(dst(s), msg, s.bytes, a_.streaming));
        links_.recv[static_cast<size_t>(s.recv_peer)]->release();
        return Status::success();
      case StepKind::kCopy:
        if (dst(s) != src(s)) ACCORD_TRY(copy(dst(s), src(s), s.bytes, a_.streaming));
        return Status::success();
      case StepKind::kRecvReduce:
        ACCORD_TRY(receive(s.recv_peer, s.bytes, &msg));
        k.dst0 = dst(s);
        k.dst0_streaming = a_.streaming;
        k.a = s.message_right ? static_cast<const void*>(src(s)) : msg;
        k.b = s.message_right ? msg : static_cast<const void*>(src(s));
        k.divisor = divisor(s);
        prefetch_next(&k);
        ACCORD_TRY(reduce(k));
        links_.recv[static_cast<size_t>(s.recv_peer)]->release();
        return Status::success();
      case StepKind::kRecvReduceSend:
      case StepKind::kRecvReduceCopySend:
      case StepKind::kRecvCopySend: {
        ACCORD_TRY(receive(s.recv_peer, s.bytes, &msg));
        ACCORD_TRY(acquire(s.send_peer, s.bytes,
                           s.kind == StepKind::kRecvReduceSend ? src(s) : dst(s), &slot));
        if (s.kind == StepKind::kRecvReduceSend) {
          // Note [Copies into a peer's slot] (kernels/reduce_isa.cpp): the result goes to the
          // slot in one copy from the stage, not by the kernel's stores.
          if (s.bytes <= a_.stage_bytes) {
            k.dst0 = a_.stage;
            k.dst1 = slot;
          } else {
            k.dst0 = slot;
          }
        } else {
          k.dst0 = dst(s);
          k.dst1 = slot;
          k.dst0_streaming = a_.streaming;
        }
        k.a = msg;
        k.b = s.kind == StepKind::kRecvCopySend ? nullptr : src(s);
        k.divisor = divisor(s);
        if (k.b == nullptr && k.divisor <= 1) {
          ACCORD_TRY(copy(k.dst0, msg, s.bytes, a_.streaming));
          kernels::copy_to_peer(slot, msg, s.bytes);
        } else {
          prefetch_next(&k);
          ACCORD_TRY(reduce(k));
        }
        links_.send[static_cast<size_t>(s.send_peer)]->post(s.bytes, a_.tag);
        links_.recv[static_cast<size_t>(s.recv_peer)]->release();
        return Status::success();
      }
      case StepKind::kReduceAll:
        return reduce_all(s);
    }
    return error(ACCORD_ERR_INTERNAL, "unknown schedule step %d", static_cast<int>(s.kind));
  }

  // dst = in_0 op in_1 op ... op in_{n-1}, in rank order, so every rank gets the same bits.
  Status reduce_all(const Step& s) {
    const int n = static_cast<int>(links_.recv.size());
    const int me = a_.wait.self_rank;
    auto operand = [&](int r, const void** p) -> Status {
      if (r == me) {
        *p = src(s);
        return Status::success();
      }
      return receive(r, s.bytes, p);
    };
    auto done_with = [&](int r) {
      if (r != me) links_.recv[static_cast<size_t>(r)]->release();
    };
    kernels::ReduceArgs k;
    k.count = count(s);
    const void* x = nullptr;
    const void* y = nullptr;
    ACCORD_TRY(operand(0, &x));
    if (n == 1) {
      if (dst(s) != x) ACCORD_TRY(copy(dst(s), x, s.bytes, false));
      return Status::success();
    }
    ACCORD_TRY(operand(1, &y));
    k.a = x;
    k.b = y;
    k.dst0 = n == 2 ? static_cast<void*>(dst(s)) : a_.scratch;
    k.dst0_streaming = n == 2 && a_.streaming;
    k.divisor = n == 2 ? divisor(s) : 0;
    prefetch_next(&k);
    ACCORD_TRY(reduce(k));
    done_with(0);
    done_with(1);
    for (int r = 2; r < n; ++r) {
      ACCORD_TRY(operand(r, &y));
      const bool last = r == n - 1;
      k.a = a_.scratch;
      k.b = y;
      k.dst0 = last ? static_cast<void*>(dst(s)) : a_.scratch;
      k.dst0_streaming = last && a_.streaming;
      k.divisor = last ? divisor(s) : 0;
      prefetch_next(&k);
      ACCORD_TRY(reduce(k));
      done_with(r);
    }
    return Status::success();
  }

  const ExecArgs& a_;
  const PeerLinks& links_;
  WaitContext ctx_;
  // Note [Prefetch while streaming]: the schedule, the step running, the steps claimed.
  const std::vector<Step>* steps_ = nullptr;
  size_t current_ = 0;
  size_t claimed_ = 0;
};

}  // namespace

Status execute(const Schedule& schedule, const ExecArgs& args, const PeerLinks& links) {
  return Runner(args, links).run(schedule);
}

// The direct all-reduce of Note [Board]: the same operands in the same order as the direct
// schedule's kReduceAll (so the same bits), each peer's read from its board line and this
// rank's own from its input. ACCORD_FAULT steps count as in the direct schedule: n - 1 sends
// (one post here), then the reduction. The deadline is read from the clock only if a peer's
// line is not there at the first look.
//
// Note [Own operand off the board]: reading this rank's own line back after posting it cost a
// 2-rank 8 B call about 80 ns of 0.29 us (Intel Xeon VM; a two-thread model of the call went
// from 144 to 200 ns per call with it), as the peer was fetching that line at the same moment.
// The input holds the same bytes. In place, the output is written only by the last reduction,
// which reads each element before it writes it (the kernels allow dst0 to alias an operand
// exactly), so the input is still this rank's operand whenever it is read.
Status execute_on_board(Board& board, const BoardCall& c, WaitContext* ctx, int64_t timeout_ms) {
  const int n = ctx->nranks;
  if (c.fault != nullptr && c.fault_step < n - 1) trigger_fault(*c.fault);
  board.post(c.seq, c.input, c.bytes, c.tag);
  if (c.fault != nullptr && c.fault_step == n - 1) trigger_fault(*c.fault);
  bool timed = false;
  auto operand = [&](int r, const void** data) -> Status {
    if (r == ctx->self_rank) {
      *data = c.input;
      return Status::success();
    }
    const BoardLine* line = board.line(r, c.seq);
    if (!board.ready(line, c.seq)) {
      if (!timed) ctx->deadline = Deadline::after_ms_coarse(timeout_ms);
      timed = true;
      ctx->peer_rank = r;
      ctx->peer_pidfd = ctx->pidfds[r];
      ACCORD_TRY(board.wait(line, r, c.seq, *ctx));
    }
    *data = line->data;
    return check_message(*ctx, c.tag, r, line->tag, c.bytes, line->bytes);
  };
  auto reduce_all = [&]() -> Status {
    alignas(64) uint8_t acc[kBoardPayloadBytes];
    kernels::ReduceArgs k;
    k.count = c.bytes / c.elem_bytes;
    ACCORD_TRY(operand(0, &k.a));
    for (int r = 1; r < n; ++r) {
      ACCORD_TRY(operand(r, &k.b));
      const bool last = r == n - 1;
      k.dst0 = last ? c.output : acc;
      k.divisor = last ? c.divisor : 0;
      c.reduce(k);
      k.a = acc;
    }
    return Status::success();
  };
  Status s = reduce_all();
  board.wake_readers(c.seq);
  return s;
}

}  // namespace accord
