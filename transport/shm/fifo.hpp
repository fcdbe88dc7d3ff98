// Single-producer single-consumer FIFO of slots in shared memory, and the channels over it.
//
// Layout of one FIFO (all offsets 64-byte aligned, slot data 4096-byte aligned):
//   FifoCtrl | SlotHeader[nslots] | data[nslots][slot_bytes]
// Message m uses slot m % nslots. The sender writes the payload, then stores seq = m + 1 in the
// slot header (release). Payloads of at most kInlineBytes live in the header's own cache line,
// so a small message costs the receiver a single cache-line transfer: the line that carries
// the flag also carries the data (the idea of NCCL's LL protocol, without its 50% overhead for
// large messages). The receiver releases a slot by storing head = m + 1.
//
// Note [Device FIFOs]: the same FIFO with its slot data somewhere else. The control part
// (FifoCtrl and the slot headers, with their inline payloads) stays in the receiver's
// shared-memory segment, registered with the device runtime as pinned memory; the slot data
// is GPU memory of the receiver, written directly by the sender's kernels (CUDA peer access in
// one process, "p2p"; an IPC mapping of it in another process, "ipc"). The protocol does not
// change: the sender's DataMover synchronizes its stream before post(), so the data has landed
// before the flag is seen.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transport/channel.hpp"
#include "transport/wait.hpp"

namespace accord {

constexpr size_t kInlineBytes = 52;

struct alignas(64) SlotHeader {
  std::atomic<uint32_t> seq;
  uint32_t bytes;
  uint32_t tag;  // the sender's call signature (Note [Call signature])
  uint8_t inline_data[kInlineBytes];
};
static_assert(sizeof(SlotHeader) == 64);

struct FifoCtrl {
  alignas(64) std::atomic<uint32_t> head;           // messages released by the receiver
  alignas(64) std::atomic<uint32_t> recv_sleeping;  // receiver is in futex_wait on a slot's seq
  alignas(64) std::atomic<uint32_t> send_sleeping;  // sender is in futex_wait on head
};

struct FifoShape {
  size_t nslots = 8;
  size_t slot_bytes = 128 << 10;

  size_t header_bytes() const;  // ctrl + slot headers, rounded up to 4096
  size_t data_bytes() const;    // slot data, each slot rounded up to 4096
  size_t total_bytes() const;   // header + data
};

// Where the parts of one FIFO at `base` are (zero-filled memory is an empty FIFO). The slot
// data follows the header unless `data` says where it is (Note [Device FIFOs]).
struct FifoView {
  FifoView(void* base, FifoShape shape, const WaitPolicy* policy, uint8_t* data = nullptr);
  uint8_t* slot_data(uint32_t index) const;

  FifoCtrl* ctrl;
  SlotHeader* headers;
  uint8_t* data;
  FifoShape shape;
  const WaitPolicy* policy;
};

class FifoSender final : public SendChannel {
 public:
  // `data` and `name`: a device FIFO (Note [Device FIFOs]).
  FifoSender(void* base, FifoShape shape, const WaitPolicy* policy, uint8_t* data = nullptr,
             const char* name = "shm")
      : f_(base, shape, policy, data), name_(name) {}
  Status acquire(size_t bytes, void** slot, const WaitContext& ctx) override;
  void post(size_t bytes, uint32_t tag) override;
  size_t max_bytes() const override { return f_.shape.slot_bytes; }
  const char* name() const override { return name_; }

 private:
  FifoView f_;
  const char* name_;
  uint32_t sent_ = 0;
  uint32_t cached_head_ = 0;
};

class FifoReceiver final : public RecvChannel {
 public:
  FifoReceiver(void* base, FifoShape shape, const WaitPolicy* policy, uint8_t* data = nullptr)
      : f_(base, shape, policy, data) {}
  Status wait(const void** data, size_t* bytes, uint32_t* tag, const WaitContext& ctx) override;
  void release() override;

 private:
  FifoView f_;
  uint32_t received_ = 0;
};

}  // namespace accord
