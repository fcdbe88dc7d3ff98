// SPSC slot FIFO in shared memory (see fifo.hpp).
#include "transport/shm/fifo.hpp"

#include <algorithm>

// Note [ThreadSanitizer and device FIFOs]: ThreadSanitizer learns happens-before from the
// address of an atomic. With ranks as threads of one process, each rank maps its peers'
// shared-memory segments itself, so the sender's seq/head store and the receiver's load are at
// two different addresses and carry no order for it. For host FIFOs the slot data is aliased the
// same way, so it never sees the accesses as one location either. A device FIFO's slot data is
// one address for both (the receiver's GPU memory), so the order the flags give must be told to
// the sanitizer by hand (core/tsan.hpp): release on the slot's data where a flag is stored,
// acquire where one is seen.
#include "core/tsan.hpp"

namespace accord {

size_t FifoShape::header_bytes() const {
  size_t h = sizeof(FifoCtrl) + nslots * sizeof(SlotHeader);
  return (h + 4095) & ~size_t{4095};
}

size_t FifoShape::slot_stride() const { return (slot_bytes + 64 + 4095) & ~size_t{4095}; }

size_t FifoShape::data_bytes() const { return nslots * slot_stride(); }

size_t FifoShape::total_bytes() const { return header_bytes() + data_bytes(); }

FifoView::FifoView(void* base, FifoShape s, const WaitPolicy* p, uint8_t* d)
    : ctrl(static_cast<FifoCtrl*>(base)),
      headers(reinterpret_cast<SlotHeader*>(static_cast<uint8_t*>(base) + sizeof(FifoCtrl))),
      data(d != nullptr ? d : static_cast<uint8_t*>(base) + s.header_bytes()),
      shape(s),
      policy(p) {}

uint8_t* FifoView::slot_data(uint32_t index) const { return data + index * shape.slot_stride(); }

void warm_fifo(void* base, const FifoShape& shape, size_t bytes) {
  const FifoView f(base, shape, nullptr);
  const size_t head = sizeof(FifoCtrl) + shape.nslots * sizeof(SlotHeader);
  for (size_t at = 0; at < head; at += 64) __builtin_prefetch(static_cast<uint8_t*>(base) + at, 0, 3);
  const size_t n = std::min(bytes, shape.slot_bytes + 64);
  for (uint32_t i = 0; i < shape.nslots; ++i)
    for (size_t at = 0; at < n; at += 64) __builtin_prefetch(f.slot_data(i) + at, 0, 3);
}

Status FifoSender::acquire_like(size_t bytes, const void* like, void** slot,
                                const WaitContext& ctx) {
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
  ACCORD_TSAN_ACQUIRE(f_.slot_data(index));
  // Note [Slot alignment]: like's offset in its line, for host FIFOs and payloads in slot data.
  offset_ = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(like) & offset_mask_);
  if (bytes <= kInlineBytes) {
    offset_ = 0;
    *slot = f_.headers[index].inline_data;
    return Status::success();
  }
  *slot = f_.slot_data(index) + offset_;
  return Status::success();
}

void FifoSender::post(size_t bytes, uint32_t tag) {
  SlotHeader& h = f_.headers[sent_ % f_.shape.nslots];
  h.size = static_cast<uint32_t>(bytes) | offset_ << kOffsetShift;
  h.tag = tag;
  ACCORD_TSAN_RELEASE(f_.slot_data(sent_ % f_.shape.nslots));
  ++sent_;
  h.seq.store(sent_, std::memory_order_release);
  wake_if_sleeping(&h.seq, &f_.ctrl->recv_sleeping);
}

// Note [Slot alignment]: the payload at an offset, out of line. As `slot + offset` the
// payload's address depended on the header word the receiver has just loaded, and a 64-byte
// all-reduce took 0.20 us instead of 0.19 with offset 0 (its loads wait for the word); with a
// branch the common case's address is known beforehand.
namespace {
[[gnu::noinline]] const uint8_t* offset_payload(const uint8_t* slot, uint32_t offset) {
  return slot + offset;
}
}  // namespace

Status FifoReceiver::wait(const void** data, size_t* bytes, uint32_t* tag, const WaitContext& ctx) {
  uint32_t index = received_ % static_cast<uint32_t>(f_.shape.nslots);
  SlotHeader& h = f_.headers[index];
  const uint32_t want = received_ + 1;
  if (h.seq.load(std::memory_order_acquire) != want) {
    auto ready = [&] { return h.seq.load(std::memory_order_acquire) == want; };
    ACCORD_TRY(wait_for(ready, &h.seq, &f_.ctrl->recv_sleeping, *f_.policy, ctx, "the next message"));
  }
  ACCORD_TSAN_ACQUIRE(f_.slot_data(index));
  const uint32_t size = h.size;
  *bytes = size & ((1u << kOffsetShift) - 1);
  *tag = h.tag;
  if (*bytes <= kInlineBytes) {
    *data = h.inline_data;
  } else if ((size >> kOffsetShift) == 0) [[likely]] {
    *data = f_.slot_data(index);
  } else {
    *data = offset_payload(f_.slot_data(index), size >> kOffsetShift);
  }
  return Status::success();
}

void FifoReceiver::release() {
  ACCORD_TSAN_RELEASE(f_.slot_data(received_ % static_cast<uint32_t>(f_.shape.nslots)));
  ++received_;
  f_.ctrl->head.store(received_, std::memory_order_release);
  wake_if_sleeping(&f_.ctrl->head, &f_.ctrl->send_sleeping);
}

}  // namespace accord
