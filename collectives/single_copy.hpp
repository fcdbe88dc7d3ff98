// Collectives on host buffers that copy each byte between ranks once (Note [Single copy],
// single_copy.cpp): a rank reads its peers' inputs and writes its peers' outputs itself, by
// process_vm_readv/writev between processes, by plain copies between threads of a process.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/kernels/reduce_kernels.hpp"
#include "collectives/schedule.hpp"
#include "core/fault.hpp"
#include "core/status.hpp"
#include "transport/shm/board.hpp"
#include "transport/wait.hpp"

namespace accord {

// How this rank reaches one local peer's memory.
struct SingleCopyPeer {
  pid_t pid = 0;              // the peer's process in this rank's pid namespace
  bool same_process = false;  // a thread of this process: plain loads and stores
};

// Reads `bytes` at `remote` in process `pid` into `local` (process_vm_readv, all of it). "" on
// success, else why (errno's text); *gone tells a process that no longer exists (ESRCH).
std::string read_process_memory(pid_t pid, void* local, const void* remote, size_t bytes, bool* gone);

// Where Yama restricts ptrace to descendants (ptrace_scope 1), lets every process of this user
// read and write this one's memory (prctl PR_SET_PTRACER_ANY), as process_vm_readv needs.
void allow_peers_to_read_memory();

// The word a peer reads at init to see whether it can reach this process's memory, and its
// value (Note [Single copy]: the probe at init).
const uint64_t* single_copy_probe_word();
inline constexpr uint64_t kSingleCopyProbeValue = 0x5349434f50593031ULL;  // "SICOPY01"

struct SingleCopyCall {
  Collective coll = Collective::kAllReduce;  // all-reduce, all-gather, broadcast, reduce-scatter
  const void* input = nullptr;
  void* output = nullptr;
  // count times the element size: the all-reduce's and broadcast's buffers, the
  // all-gather's input (a block of its output), the reduce-scatter's output (a block of its input)
  size_t bytes = 0;
  int root = 0;  // broadcast
  size_t elem_bytes = 1;
  kernels::ReduceFn reduce = nullptr;
  int divisor = 0;
  uint32_t tag = 0;
  uint32_t seq = 0;  // the first of the two board calls it makes (Note [Board])
  const FaultPlan* fault = nullptr;
  long fault_step = -1;
  // An all-reduce above the window (Note [Single copy], "in place above the window"): taken
  // only if every rank is in place, which the address posts tell every rank alike; else
  // *declined and nothing else done (the caller runs the FIFOs' schedule).
  bool in_place_only = false;
  bool* declined = nullptr;
};

// The collective, every rank of the communicator on this host: `peers` has an entry per rank
// (this rank's unused). `tmp`: at least kSingleCopyChunk bytes, for peers' operands.
// `ctx`: as for execute_on_board.
Status execute_single_copy(Board& board, const std::vector<SingleCopyPeer>& peers, const SingleCopyCall& call,
                           void* tmp, WaitContext* ctx, int64_t timeout_ms);
inline constexpr size_t kSingleCopyChunk = 256 << 10;
// The smallest broadcast and reduce-scatter (bytes per rank) that take it: below, on the 2-vCPU
// VM, they tied or lost against the FIFOs (Communicator::takes_single_copy).
inline constexpr size_t kSingleCopyFloor = 64 << 10;

}  // namespace accord
