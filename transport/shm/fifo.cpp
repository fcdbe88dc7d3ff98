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

namespace {
size_t slot_stride(const FifoShape& s) { return (s.slot_bytes + 4095) & ~size_t{4095}; }
}  // namespace

FifoSender::FifoSender(void* base, FifoShape shape, const WaitPolicy* policy)
    : ctrl_(static_cast<FifoCtrl*>(base)),
      headers_(reinterpret_cast<SlotHeader*>(static_cast<uint8_t*>(base) + sizeof(FifoCtrl))),
      data_(static_cast<uint8_t*>(base) + shape.header_bytes()),
      shape_(shape),
      policy_(policy) {}

Status FifoSender::acquire(size_t bytes, void** slot, const WaitContext& ctx) {
  const uint32_t nslots = static_cast<uint32_t>(shape_.nslots);
  if (sent_ - cached_head_ >= nslots) {
    cached_head_ = ctrl_->head.load(std::memory_order_acquire);
    if (sent_ - cached_head_ >= nslots) {
      auto ready = [&] {
        cached_head_ = ctrl_->head.load(std::memory_order_acquire);
        return sent_ - cached_head_ < nslots;
      };
      ACCORD_TRY(wait_for(ready, &ctrl_->head, &ctrl_->send_sleeping, *policy_, ctx, "a free slot"));
    }
  }
  uint32_t index = sent_ % nslots;
  *slot = bytes <= kInlineBytes ? static_cast<void*>(headers_[index].inline_data)
                                : static_cast<void*>(data_ + index * slot_stride(shape_));
  return Status::success();
}

void FifoSender::post(size_t bytes, uint32_t tag) {
  SlotHeader& h = headers_[sent_ % shape_.nslots];
  h.bytes = static_cast<uint32_t>(bytes);
  h.tag = tag;
  ++sent_;
  h.seq.store(sent_, std::memory_order_release);
  wake_if_sleeping(&h.seq, &ctrl_->recv_sleeping);
}

FifoReceiver::FifoReceiver(void* base, FifoShape shape, const WaitPolicy* policy)
    : ctrl_(static_cast<FifoCtrl*>(base)),
      headers_(reinterpret_cast<SlotHeader*>(static_cast<uint8_t*>(base) + sizeof(FifoCtrl))),
      data_(static_cast<uint8_t*>(base) + shape.header_bytes()),
      shape_(shape),
      policy_(policy) {}

Status FifoReceiver::wait(const void** data, size_t* bytes, uint32_t* tag, const WaitContext& ctx) {
  uint32_t index = received_ % static_cast<uint32_t>(shape_.nslots);
  SlotHeader& h = headers_[index];
  const uint32_t want = received_ + 1;
  if (h.seq.load(std::memory_order_acquire) != want) {
    auto ready = [&] { return h.seq.load(std::memory_order_acquire) == want; };
    ACCORD_TRY(wait_for(ready, &h.seq, &ctrl_->recv_sleeping, *policy_, ctx, "the next message"));
  }
  *bytes = h.bytes;
  *tag = h.tag;
  *data = h.bytes <= kInlineBytes ? static_cast<const void*>(h.inline_data)
                                  : static_cast<const void*>(data_ + index * slot_stride(shape_));
  return Status::success();
}

void FifoReceiver::release() {
  ++received_;
  ctrl_->head.store(received_, std::memory_order_release);
  wake_if_sleeping(&ctrl_->head, &ctrl_->send_sleeping);
}

}  // namespace accord
