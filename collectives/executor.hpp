// Runs one rank's Schedule on channels. Fused steps read a received slot in place, compute
// into the output (or, for reduce-and-send, a stage buffer) and copy the result into the next
// rank's slot with one `rep movsb` (Note [Copies into a peer's slot], kernels/reduce_isa.cpp):
// the reduction's own stores would first fetch every slot line from the core that read it.
//
// Deadlock freedom (Note [FIFO depth]): every step receives before it sends except a
// schedule's plain sends, so a rank never has more than one message sent but not received
// by it in flight, plus one it holds; all FIFOs can only be full at once if slots <= 2.
// The shared-memory transport therefore uses at least 4 slots.
#pragma once

#include <atomic>
#include <cstddef>
#include <vector>

#include "collectives/kernels/reduce_kernels.hpp"
#include "collectives/schedule.hpp"
#include "core/fault.hpp"
#include "core/status.hpp"
#include "transport/channel.hpp"
#include "transport/shm/board.hpp"

namespace accord {

struct ExecArgs {
  const void* input = nullptr;
  void* output = nullptr;
  kernels::ReduceFn reduce = nullptr;  // may be null for collectives without reduction
  size_t elem_bytes = 1;
  int divisor = 0;          // nranks for avg, else 0
  bool streaming = false;   // write the output with non-temporal stores
  void* scratch = nullptr;  // at least schedule.scratch_bytes
  // Where a reduce-and-send step computes before copying into the slot (Note [Copies into a
  // peer's slot], kernels/reduce_isa.cpp); steps larger than stage_bytes reduce into the slot.
  void* stage = nullptr;
  size_t stage_bytes = 0;
  const FaultPlan* fault = nullptr;  // ACCORD_FAULT: misbehave before step fault_step
  long fault_step = -1;
  uint32_t tag = 0;         // call signature stamped on every message (Note [Call signature])
  WaitContext wait;         // deadline, abort flag, self rank, operation, seq
};

struct PeerLinks {
  std::vector<SendChannel*> send;  // indexed by peer rank
  std::vector<RecvChannel*> recv;
  std::vector<int> pidfd;          // liveness, -1 if none
  const std::atomic<int32_t>* const* death_notes = nullptr;  // Note [Death notes]
  const Departure* const* departures = nullptr;               // Note [Departures]
};

Status execute(const Schedule& schedule, const ExecArgs& args, const PeerLinks& links);

// One direct all-reduce of at most kBoardPayloadBytes among ranks all on this host (Note
// [Board]).
struct BoardCall {
  const void* input = nullptr;
  void* output = nullptr;
  size_t bytes = 0;
  size_t elem_bytes = 1;
  kernels::ReduceFn reduce = nullptr;
  int divisor = 0;
  uint32_t tag = 0;
  uint32_t seq = 0;  // this communicator's board calls, from 1
  const FaultPlan* fault = nullptr;
  long fault_step = -1;
};

// `ctx`: everything but the deadline (set here, timeout_ms from the first wait that has to
// spin) and the peer; its pidfds cover every rank.
Status execute_on_board(Board& board, const BoardCall& call, WaitContext* ctx, int64_t timeout_ms);

}  // namespace accord
