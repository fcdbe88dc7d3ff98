// A channel moves messages from one rank to one peer, in order. Transports implement it; the
// executor (collectives/executor.cpp) drives it and knows nothing of how bytes move.
//
// Note [Call signature]: every message carries a 32-bit tag that the executor derives from
// the call (collective, count, dtype, op, root). The receiver compares it with its own, so
// ranks that disagree about a call fail with ACCORD_ERR_MISMATCH instead of silently reducing
// int32 into float32 or max into sum, even without ACCORD_CHECK. The tag rides in the cache
// line that already carries the ready flag: it costs nothing.
//
// Zero-copy protocol: the sender asks for a slot, writes the message straight into it (the
// collectives copy it in with kernels::copy_to_peer, Note [Copies into a peer's slot]), then
// posts it. The receiver waits for the
// next message, reads it in place (and may reduce it into the next rank's slot), then
// releases it. One slot holds at most max_bytes().
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.hpp"
#include "transport/wait.hpp"

namespace accord {

class SendChannel {
 public:
  virtual ~SendChannel() = default;
  // Waits for a free slot able to hold `bytes` (<= max_bytes()).
  Status acquire(size_t bytes, void** slot, const WaitContext& ctx) {
    return acquire_like(bytes, nullptr, slot, ctx);
  }
  // The same, for a message that carries the bytes at `like` (a piece of a user buffer): the
  // slot may start at like's offset within a 64-byte line, so that the receiver, whose buffers
  // are usually aligned as the sender's, reads and writes with the same alignment (Note [Slot
  // alignment], transport/shm/fifo.hpp). A hint: null, or a transport without it, is fine.
  virtual Status acquire_like(size_t bytes, const void* like, void** slot,
                              const WaitContext& ctx) = 0;
  // Publishes the slot last acquired, holding `bytes`, stamped with `tag`.
  virtual void post(size_t bytes, uint32_t tag) = 0;
  virtual size_t max_bytes() const = 0;
  virtual const char* name() const = 0;  // "shm", for logs and --show-plan
};

class RecvChannel {
 public:
  virtual ~RecvChannel() = default;
  // Waits for the next message.
  virtual Status wait(const void** data, size_t* bytes, uint32_t* tag, const WaitContext& ctx) = 0;
  // Gives the slot of the message last waited for back to the sender.
  virtual void release() = 0;
};

}  // namespace accord
