// The board: one to eight cache lines per rank per call for the smallest collectives on one host.
//
// Note [Board]: an 8-byte all-reduce through the slot FIFOs costs each rank an acquire, a post,
// a wait and a release per peer, and the head stores and sleep checks that go with them; on
// the 2-core VM that software took about 0.1 us of a 0.16 us call whose data needs one
// cache-line transfer each way (55 ns). The board keeps only what that exchange needs. Every
// local rank owns two lines (calls alternate between them) in its segment's header page;
// for call k it writes its payload, size and call tag into line k % 2 and then stores
// seq = k there, and reads every peer's line k % 2 once its seq says k. A "line" is a block
// of eight cache lines: the first holds seq, size, tag and 52 bytes, the next seven 448 bytes
// more, so payloads up to 500 bytes ride on the board and a payload of at most 52 bytes still
// moves one cache line (the others are neither written nor read). With a single line, 64 B
// took the FIFOs at twice the board's time (0.49 against 0.24-0.28 us, 2 ranks, Intel Xeon
// VM) and lost a run to Open MPI beside a busy process (bench/NOTES-2026-11.md); with four,
// 256 B was the size that did, and eight took it from 0.56 to 0.45 us (bench/NOTES-2026-11.md,
// "Single copy"). Nobody acknowledges: line k % 2 is next written for call k + 2, which starts only after this rank saw every
// peer's line of call k + 1, and a peer writes that line only after it finished reading call k
// (program order, and the release/acquire pair on seq). Every rank must therefore make the
// same board calls in the same order, which the collective layer guarantees by choosing the
// board from the call's arguments alone; a rank that calls something else shows up as a
// different tag (ACCORD_ERR_MISMATCH), not as corruption.
//
// Sleeping: a reader that gives up spinning sets its own flag in the owner's sleep table
// (one word per reader, so two sleepers never clear each other's flag), fences, checks seq
// once more and futex-waits on it; the owner, after storing seq, fences and wakes the line if
// any flag is set (wake_readers). The owner does that at the end of its call, not right after
// the store: a fence right after it waits for the store to reach the reader (the reader
// holds the line), about 20 ns of the 0.16 us call on the 2-core VM, while at the end of the
// call the store is long done. The pairing is unchanged (store seq, fence, load flags), so no
// wake is lost, and nothing waits for it meanwhile: a rank posts before it waits for anyone,
// so every line of the call appears whether or not a sleeper is woken.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.hpp"
#include "transport/wait.hpp"

namespace accord {

struct alignas(64) BoardLine {
  std::atomic<uint32_t> seq;  // the call whose payload the line holds (0: none yet)
  uint32_t bytes;
  uint32_t tag;               // Note [Call signature] (transport/channel.hpp)
  uint8_t data[52 + 7 * 64];  // the first 52 bytes share the cache line of seq
};
static_assert(sizeof(BoardLine) == 512);

// Where a rank's board sits in its segment's 4 KiB header page, and how many readers its sleep
// table has room for. Its two lines are kBoardLineStride apart, not adjacent: CPUs fetch
// 128-byte pairs of lines (and prefetch the next lines of a stream), and a reader polling one
// line would then hold the other, which the owner writes next. Two cache lines apart, so
// that neither a pair nor the next line after a block's last is the other block's.
constexpr size_t kBoardOffset = 512;
constexpr size_t kBoardBytes = 4096 - kBoardOffset;
constexpr size_t kBoardLineStride = sizeof(BoardLine) + 128;
constexpr size_t kBoardFlagsOffset = 2 * kBoardLineStride;
constexpr size_t kBoardPayloadBytes = sizeof(BoardLine::data);
constexpr int kBoardMaxRanks = static_cast<int>((kBoardBytes - kBoardFlagsOffset) / sizeof(uint32_t));

class Board {
 public:
  // `areas[r]`: rank r's board (kBoardBytes of its segment, zero-filled at creation), for
  // every local rank r including `self`; nullptr for ranks on other hosts.
  Board(const std::vector<uint8_t*>& areas, int self, const WaitPolicy* policy);

  // Publishes this rank's part of board call `seq` (1, 2, ...): at most kBoardPayloadBytes.
  void post(uint32_t seq, const void* data, size_t bytes, uint32_t tag);
  // Wakes the readers of call `seq` that went to sleep; once per post, before the next one.
  void wake_readers(uint32_t seq);
  // The line of `rank` that board call `seq` uses, and whether it holds that call's part.
  const BoardLine* line(int rank, uint32_t seq) const {
    return reinterpret_cast<const BoardLine*>(areas_[static_cast<size_t>(rank)] + (seq & 1) * kBoardLineStride);
  }
  static bool ready(const BoardLine* line, uint32_t seq) {
    return line->seq.load(std::memory_order_acquire) == seq;
  }
  // Waits until `line` (of `peer`) holds call `seq`: spin, yield, sleep (Note [Waiting]).
  Status wait(const BoardLine* line, int peer, uint32_t seq, const WaitContext& ctx);

 private:
  std::atomic<uint32_t>* sleep_flags(int rank) const;

  std::vector<uint8_t*> areas_;
  int self_;
  int nranks_;
  const WaitPolicy* policy_;
};

}  // namespace accord
