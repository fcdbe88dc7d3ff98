// SPSC slot FIFO in shared memory (see fifo.hpp).
#include "transport/shm/fifo.hpp"

namespace accord {

size_t FifoShape::header_bytes() const {
  size_t h = sizeof(FifoCtrl) + nslots * sizeof(SlotHeader);
  return (h + 4095) & ~size_t{4095};
}

size_t FifoShape::total_bytes() const {
  size_t slot = (slot_bytes + 4095) & ~size_t{4095};
  return header_bytes() + nslots * slot;
}

FifoView::FifoView(void* base, FifoShape s, const WaitPolicy* p)
    : ctrl(static_cast<FifoCtrl*>(base)),
      headers(reinterpret_cast<SlotHeader*>(static_cast<uint8_t*>(base) + sizeof(FifoCtrl))),
      data(static_cast<uint8_t*>(base) + s.header_bytes()),
      shape(s),
      policy(p) {}

uint8_t* FifoView::slot_data(uint32_t index) const {
  return data + index * ((shape.slot_bytes + 4095) & ~size_t{4095});
}

Status FifoSender::acquire(size_t bytes, void** slot, const WaitContext& ctx) {
  const uint32_t nslots = static_cast<uint32_t>(f_.shape.nslots);
  if (sent_ - cached_head_ >= nslots) {
    cached_head_ = f_.ctrl->head.load(std::memory_order_acquire);
    if (sent_ - cached_head_ >= nslots) {
      auto ready = [&] {
        cached_head_ = f_.ctrl->head.load(std::memory_order_acquire);
        return sent_ - cached_head_ < nslots;
      };
      ACCORD_TRY(wait_for(ready, &f_.ctrl->head, &f_.ctrl->send_sleeping, *f_.policy, ctx, "a free slot"));
    }
  }
  uint32_t index = sent_ % nslots;
  *slot = bytes <= kInlineBytes ? static_cast<void*>(f_.headers[index].inline_data)
                                : static_cast<void*>(f_.slot_data(index));
  return Status::success();
}

void FifoSender::post(size_t bytes, uint32_t tag) {
  SlotHeader& h = f_.headers[sent_ % f_.shape.nslots];
  h.bytes = static_cast<uint32_t>(bytes);
  h.tag = tag;
  ++sent_;
  h.seq.store(sent_, std::memory_order_release);
  wake_if_sleeping(&h.seq, &f_.ctrl->recv_sleeping);
}

Status FifoReceiver::wait(const void** data, size_t* bytes, uint32_t* tag, const WaitContext& ctx) {
  uint32_t index = received_ % static_cast<uint32_t>(f_.shape.nslots);
  SlotHeader& h = f_.headers[index];
  const uint32_t want = received_ + 1;
  if (h.seq.load(std::memory_order_acquire) != want) {
    auto ready = [&] { return h.seq.load(std::memory_order_acquire) == want; };
    ACCORD_TRY(wait_for(ready, &h.seq, &f_.ctrl->recv_sleeping, *f_.policy, ctx, "the next message"));
  }
  *bytes = h.bytes;
  *tag = h.tag;
  *data = h.bytes <= kInlineBytes ? static_cast<const void*>(h.inline_data)
                                  : static_cast<const void*>(f_.slot_data(index));
  return Status::success();
}

void FifoReceiver::release() {
  ++received_;
  f_.ctrl->head.store(received_, std::memory_order_release);
  wake_if_sleeping(&f_.ctrl->head, &f_.ctrl->send_sleeping);
}

}  // namespace accord
