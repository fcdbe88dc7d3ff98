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
// Note [Device FIFOs]: the device path (collectives/device/dev_call.hpp) uses this layout too,
// driven by a kernel instead of these classes: FifoCtrl's head word and the slot headers' seq,
// size and tag, with no inline payloads. For GPUs that peer (or ranks sharing a GPU) the whole
// FIFO is GPU memory of the receiver, written by the sender's kernel through peer access ("p2p")
// or an IPC mapping ("ipc"); for host-staged pairs it is a device area of the receiver's
// shared-memory segment (ShmOptions::device_fifos), registered with the device runtime. Host
// calls and device calls never share a FIFO.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transport/channel.hpp"
#include "transport/wait.hpp"

namespace accord {

constexpr size_t kInlineBytes = 52;

// Note [Slot alignment]: a streaming reduction (large calls) aligns its stores to the output
// and then loads the message and its own buffer at the output's offset within a line; when
// the message sits at another offset (a malloc'd buffer starts 16 bytes into a line, slot
// data at 0), those loads straddle lines. 256 MiB, 2 ranks, direct, out of place, buffers 16
// bytes into a line: 46.5 ms with the slot data line-aligned, 36.4 ms with it at the buffers'
// offset (both with the prefetch of Note [Prefetch while streaming]). So a host FIFO's sender
// may put the payload at the offset of the user-buffer piece it carries
// (SendChannel::acquire_like), records it in the header, and each slot has 64 bytes to spare.
// The executor asks for it only in calls that stream: elsewhere a message at offset 16 spans
// one line more, and the non-streaming kernels do not align, so 4-64 KiB messages lost 5-8%
// with it (2 ranks). Device FIFOs keep offset 0.
constexpr unsigned kOffsetShift = 26;
constexpr size_t kMaxSlotBytes =
    (size_t{1} << kOffsetShift) - 64;  // what SlotHeader::size can hold

struct alignas(64) SlotHeader {
  std::atomic<uint32_t> seq;
  // Payload bytes | offset << kOffsetShift, the payload starting `offset` bytes into the slot's
  // data (Note [Slot alignment]). One word written whole: as two bitfields the sender's
  // read-modify-write of it cost 0.18 -> 0.22 us per 64-byte all-reduce.
  uint32_t size;
  uint32_t tag;  // the sender's call signature (Note [Call signature])
  uint8_t inline_data[kInlineBytes];
};
static_assert(sizeof(SlotHeader) == 64);

struct FifoCtrl {
  alignas(64) std::atomic<uint32_t> head;           // messages released by the receiver
  alignas(64) std::atomic<uint32_t> recv_sleeping;  // receiver is in futex_wait on a slot's seq
  // Device FIFOs only (Note [Waiting FIFOs], collectives/device/fifo_wait.cpp): how many of the
  // receiver's messages to the sender, on the FIFO that goes the other way, the sender has
  // released; written by the sender's stream, so the receiver waits on its own memory.
  std::atomic<uint32_t> reverse_head;
  alignas(64) std::atomic<uint32_t> send_sleeping;  // sender is in futex_wait on head
};
static_assert(sizeof(FifoCtrl) == 192, "the FIFO layout: three lines of control, then the slot headers");

struct FifoShape {
  size_t nslots = 8;
  size_t slot_bytes = 128 << 10;

  size_t header_bytes() const;  // ctrl + slot headers, rounded up to 4096
  size_t slot_stride() const;   // slot_bytes + 64 (Note [Slot alignment]), rounded up to 4096
  size_t data_bytes() const;    // nslots * slot_stride()
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

// Note [FIFO lines at init] (shm_transport.cpp): brings the control and header lines of the
// host FIFO at `base`, and the first `bytes` of each slot's data, into this CPU's caches
// (prefetches: no load or store the protocol, or a race detector, could see).
void warm_fifo(void* base, const FifoShape& shape, size_t bytes);

class FifoSender final : public SendChannel {
 public:
  // `data` and `name`: a device FIFO (Note [Device FIFOs]).
  FifoSender(void* base, FifoShape shape, const WaitPolicy* policy, uint8_t* data = nullptr,
             const char* name = "shm")
      : f_(base, shape, policy, data), name_(name), offset_mask_(data == nullptr ? 63 : 0) {}
  Status acquire_like(size_t bytes, const void* like, void** slot, const WaitContext& ctx) override;
  void post(size_t bytes, uint32_t tag) override;
  size_t max_bytes() const override { return f_.shape.slot_bytes; }
  const char* name() const override { return name_; }

 private:
  FifoView f_;
  const char* name_;
  uintptr_t offset_mask_;  // 63 for host FIFOs, 0 for device ones (Note [Slot alignment])
  uint32_t offset_ = 0;    // of the slot last acquired
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
