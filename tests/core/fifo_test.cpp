// The shared-memory slot FIFO (transport/shm/fifo.hpp) on its own, sender and receiver in one
// thread over a zero-filled buffer: where a message's payload sits in its slot (Note [Slot
// alignment]) and that every byte arrives.
#include "transport/shm/fifo.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace accord {
namespace {

struct Fifo {
  explicit Fifo(FifoShape s, bool device_data = false)
      : shape(s),
        memory(s.total_bytes() / 64 + 1),
        device(device_data ? s.data_bytes() / 64 + 1 : 0),
        sender(memory.data(), s, &policy, device_data ? bytes(device) : nullptr),
        receiver(memory.data(), s, &policy, device_data ? bytes(device) : nullptr) {
    ctx.deadline = Deadline::after_ms(10000);
  }
  struct alignas(64) Line {
    uint8_t b[64];
  };
  static uint8_t* bytes(std::vector<Line>& v) { return reinterpret_cast<uint8_t*>(v.data()); }

  // Sends `n` bytes of pattern `seed`, aligned like `like`; returns where the slot was.
  const uint8_t* send(size_t n, const void* like, uint8_t seed, uint32_t tag = 7) {
    void* slot = nullptr;
    EXPECT_TRUE(sender.acquire_like(n, like, &slot, ctx).ok());
    for (size_t i = 0; i < n; ++i)
      static_cast<uint8_t*>(slot)[i] = static_cast<uint8_t>(seed + i * 31);
    sender.post(n, tag);
    return static_cast<const uint8_t*>(slot);
  }
  // Receives the next message and checks its size, tag and bytes; returns where it was.
  const uint8_t* receive(size_t n, uint8_t seed, uint32_t tag = 7) {
    const void* data = nullptr;
    size_t got = 0;
    uint32_t got_tag = 0;
    EXPECT_TRUE(receiver.wait(&data, &got, &got_tag, ctx).ok());
    EXPECT_EQ(got, n);
    EXPECT_EQ(got_tag, tag);
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i)
      if (p[i] != static_cast<uint8_t>(seed + i * 31)) {
        ADD_FAILURE() << "byte " << i << " of a " << n << "-byte message";
        break;
      }
    receiver.release();
    return p;
  }

  FifoShape shape;
  WaitPolicy policy;
  WaitContext ctx;
  std::vector<Line> memory, device;
  FifoSender sender;
  FifoReceiver receiver;
};

size_t line_offset(const void* p) { return reinterpret_cast<uintptr_t>(p) & 63; }

TEST(Fifo, PayloadSitsAtTheOffsetOfTheBufferItCarries) {
  Fifo f(FifoShape{4, 4096});
  alignas(64) static uint8_t user[128];
  for (size_t off = 0; off < 64; ++off) {
    for (const size_t n : {kInlineBytes + 1, size_t{1000}, size_t{4096}}) {
      const uint8_t* slot = f.send(n, user + off, static_cast<uint8_t>(off));
      EXPECT_EQ(line_offset(slot), off) << n << " bytes";
      const uint8_t* data = f.receive(n, static_cast<uint8_t>(off));
      EXPECT_EQ(data, slot) << "the receiver reads where the sender wrote (one mapping here)";
      EXPECT_EQ(line_offset(data), off) << n << " bytes";
    }
  }
}

TEST(Fifo, WithoutAHintOrInlineThePayloadIsWhereItWas) {
  Fifo f(FifoShape{4, 4096});
  alignas(64) static uint8_t user[64];
  EXPECT_EQ(line_offset(f.send(500, nullptr, 1)), 0u);
  EXPECT_EQ(line_offset(f.receive(500, 1)), 0u);
  // A message of at most kInlineBytes rides in its slot header, whatever the hint.
  const uint8_t* small = f.send(kInlineBytes, user + 5, 2);
  EXPECT_EQ(f.receive(kInlineBytes, 2), small);
  EXPECT_EQ(line_offset(small), 12u) << "inline data follows seq, bytes/offset and tag";
}

TEST(Fifo, FullSlotsAtTheLastOffsetDoNotOverlap) {
  // Every slot holds a full slot_bytes before any is read, at offsets 63, 0, 63, 0: a slot
  // stride without its 64 spare bytes would let a message at 63 run into the next slot, and the
  // message there (at 0) would overwrite its end.
  for (const size_t slot_bytes : {size_t{64}, size_t{4096}, size_t{4096 * 3 - 64}}) {
    Fifo f(FifoShape{4, slot_bytes});
    alignas(64) static uint8_t user[128];
    for (uint8_t k = 0; k < 4; ++k)
      f.send(slot_bytes, user + (k % 2 == 0 ? 63 : 0), static_cast<uint8_t>(k * 50));
    for (uint8_t k = 0; k < 4; ++k) f.receive(slot_bytes, static_cast<uint8_t>(k * 50));
  }
}

TEST(Fifo, DeviceFifosKeepOffsetZero) {
  // Note [Device FIFOs]: their data is elsewhere; the hint is not used there.
  Fifo f(FifoShape{4, 4096}, /*device_data=*/true);
  alignas(64) static uint8_t user[128];
  const uint8_t* slot = f.send(1000, user + 16, 3);
  EXPECT_EQ(line_offset(slot), 0u);
  EXPECT_GE(slot, Fifo::bytes(f.device));
  EXPECT_EQ(f.receive(1000, 3), slot);
}

}  // namespace
}  // namespace accord
