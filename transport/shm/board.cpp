// The board's post and wait (see board.hpp, Note [Board]).
#include "transport/shm/board.hpp"

#include <cstring>

namespace accord {

Board::Board(const std::vector<uint8_t*>& areas, int self, const WaitPolicy* policy)
    : areas_(areas), self_(self), nranks_(static_cast<int>(areas.size())), policy_(policy) {}

std::atomic<uint32_t>* Board::sleep_flags(int rank) const {
  return reinterpret_cast<std::atomic<uint32_t>*>(areas_[static_cast<size_t>(rank)] + kBoardFlagsOffset);
}

void Board::post(uint32_t seq, const void* data, size_t bytes, uint32_t tag) {
  BoardLine* l = const_cast<BoardLine*>(line(self_, seq));
  std::memcpy(l->data, data, bytes);
  l->bytes = static_cast<uint32_t>(bytes);
  l->tag = tag;
  l->seq.store(seq, std::memory_order_release);
}

void Board::wake_readers(uint32_t seq) {
  wake_if_sleeping(const_cast<std::atomic<uint32_t>*>(&line(self_, seq)->seq), sleep_flags(self_), nranks_);
}

Status Board::wait(const BoardLine* line, int peer, uint32_t seq, const WaitContext& ctx) {
  auto* word = const_cast<std::atomic<uint32_t>*>(&line->seq);
  auto is_ready = [line, seq] { return ready(line, seq); };
  return wait_for(is_ready, word, &sleep_flags(peer)[self_], *policy_, ctx, "its part of the call");
}

}  // namespace accord
