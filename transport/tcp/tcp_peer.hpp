// One remote peer over TCP: its sockets, a bounded send ring and a bounded receive ring, and
// the two channels the executor uses. The transport's progress thread moves the bytes; the
// channels only touch the rings and sleep on futex words that the progress thread bumps.
//
// Note [TCP framing]: a message of `bytes` is cut into at most nsocks pieces of at least
// kMinPieceBytes; piece i of message m travels on socket (m + i) % nsocks, so small messages
// rotate over the sockets and large ones spread over all of them. Each piece is one frame:
//   FrameHeader (24 bytes: kind, seq, tag, total bytes, offset, piece bytes) + payload.
// Frames on one socket arrive in message order; the receiver places each piece at its offset
// in receive slot seq % nslots and the message is complete when all `total` bytes arrived (a
// 0-byte message is one empty frame). Flow control is TCP's own: the receiver stops reading a
// socket whose next frame belongs to a message beyond its ring (seq >= released + nslots), so
// memory stays bounded at nslots slots each way. No deadlock: every socket delivers frames in
// seq order, so the pieces of the oldest unreleased message are never behind a blocked frame.
// Byte order is the host's (every platform Accord supports is little-endian).
//
// Note [TCP liveness]: a socket that reads EOF or fails is finished. The peer counts as gone
// when all its sockets are finished (a process that exits closes them all at once), when one
// failed hard (reset, malformed frame), or 300 ms after the first one finished (half-closed
// states never last). Then waits that have no complete message left return ACCORD_ERR_REMOTE
// at once. A peer that destroys its transport sends a goodbye frame on every socket first, so
// the error can tell "exited without finishing the same calls" from "died".
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "transport/channel.hpp"
#include "transport/socket.hpp"
#include "transport/wait.hpp"

namespace accord {

constexpr size_t kMinPieceBytes = 64 << 10;

struct FrameHeader {
  uint32_t kind;
  uint32_t seq;
  uint32_t tag;
  uint32_t total_bytes;
  uint32_t offset;
  uint32_t piece_bytes;
};
static_assert(sizeof(FrameHeader) == 24);
constexpr uint32_t kFrameData = 0x31444341;     // "ACD1"
constexpr uint32_t kFrameGoodbye = 0x59424341;  // "ACBY"

class TcpPeer;

// Wakes the progress thread (an eventfd it polls); cheap when it is busy.
class ProgressBell {
 public:
  ProgressBell();
  ~ProgressBell();
  int fd() const { return fd_; }
  void ring();            // from any thread
  void drain();           // progress thread, after poll
  std::atomic<uint32_t> sleeping{0};

 private:
  int fd_ = -1;
};

struct PeerShape {
  size_t nslots = 8;
  size_t slot_bytes = 128 << 10;
};

class TcpPeer {
 public:
  TcpPeer(int rank, int peer, std::vector<Fd> socks, PeerShape shape, const WaitPolicy* policy, ProgressBell* bell);
  ~TcpPeer();

  SendChannel* sender() const { return sender_.get(); }
  RecvChannel* receiver() const { return receiver_.get(); }
  int peer() const { return peer_; }
  size_t nsocks() const { return socks_.size(); }
  int fd(size_t s) const { return socks_[s].fd.get(); }

  // Note [TCP rings in the caller's memory]: a caller that drives one peer's traffic itself (the
  // GPU data pumps, Note [Device data over TCP] in collectives/device/engine_tcp.cpp) gives the peer
  // its own memory for the rings before the first message either way: `tx` and `rx` hold nslots
  // slots of slot_bytes each, `stride` bytes apart (the pinned FIFOs' data areas). The progress
  // thread then writes messages straight from the slots the caller filled and reads them
  // straight into the caller's slots, with no copy in between. The caller posts message m from
  // tx slot m % nslots (sender()->acquire then post, as usual, without a copy) and may reuse
  // that slot once sent() > m; it takes message m from rx slot m % nslots once arrived(m), and
  // gives slots back with release_to(n) (messages below n are consumed) instead of receiver().
  // The memory must outlive the transport (its destructor still writes out what was posted).
  void use_rings(uint8_t* tx, uint8_t* rx, size_t stride);
  uint32_t sent() const { return tx_done_.load(std::memory_order_acquire); }  // messages written out
  bool arrived(uint32_t m, uint32_t* bytes, uint32_t* tag) const;              // message m is complete
  Status wait_arrived(uint32_t m, const WaitContext& ctx);  // until arrived(m), or the peer failed
  void release_to(uint32_t n);
  const std::string& failure() const { return cause_; }  // only once failed()

  // --- progress thread only ---
  void enqueue_posted();                 // splits newly posted messages into frames
  void unblock_if_room();                // resumes sockets whose next frame now fits
  short poll_events(size_t s, bool closing) const;  // what to wait for on socket s (-1: skip it)
  void on_events(size_t s, short revents, bool closing);
  void check_liveness(int64_t now);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  bool flushed() const;                  // every posted message is written out (or can't be)
  void queue_goodbyes();
  bool done_for_close() const;           // failed, or every socket read EOF

 private:
  friend class TcpSender;
  friend class TcpReceiver;
  struct TxFrame {
    FrameHeader header;
    const uint8_t* payload;
    size_t written;  // of header + payload
    int slot;        // -1: goodbye
  };
  struct Sock {
    Fd fd;
    std::deque<TxFrame> txq;
    bool goodbye_queued = false;
    // receive side
    FrameHeader rx;
    size_t rx_header_got = 0;
    bool rx_accepted = false;  // the header in rx passed accept_header
    size_t rx_payload_got = 0;
    bool rx_have_seq = false;
    uint32_t rx_last_seq = 0;
    bool blocked = false;    // next frame is beyond the receive ring
    bool peer_closed = false;  // hang-up seen while blocked: read the rest once unblocked
    bool finished = false;   // EOF or error: nothing more will arrive
    bool goodbye = false;    // the peer said goodbye on it
  };
  struct RxSlot {
    std::atomic<uint32_t> ready{0};  // seq + 1 once complete
    uint32_t seq = 0;
    bool active = false;
    uint32_t total = 0;
    uint32_t tag = 0;
    uint32_t got = 0;
  };

  void send_some(size_t s);
  void recv_some(size_t s);
  void discard_some(size_t s);
  bool accept_header(Sock& k, size_t s);
  void finish_socket(size_t s, const char* how, bool hard);
  void fail(std::string cause);
  void notify_tx();
  void notify_rx();
  uint8_t* tx_slot(size_t i) const {
    return tx_base_.load(std::memory_order_acquire) + i * stride_.load(std::memory_order_relaxed);
  }
  uint8_t* rx_slot(size_t i) const {
    return rx_base_.load(std::memory_order_acquire) + i * stride_.load(std::memory_order_relaxed);
  }

  const int rank_, peer_;
  const PeerShape shape_;
  const WaitPolicy* policy_;
  ProgressBell* bell_;
  std::vector<Sock> socks_;
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t[], FreeDeleter> tx_data_, rx_data_;
  // The rings in use: tx_data_ and rx_data_, or the caller's (use_rings).
  std::atomic<uint8_t*> tx_base_{nullptr}, rx_base_{nullptr};
  std::atomic<size_t> stride_{0};

  // Send ring: the sender writes meta and bumps posted_; the progress thread bumps done_.
  struct TxMeta {
    uint32_t bytes;
    uint32_t tag;
  };
  std::vector<TxMeta> tx_meta_;
  std::atomic<uint32_t> tx_posted_{0};
  std::atomic<uint32_t> tx_done_{0};
  std::atomic<uint32_t> tx_word_{0}, tx_sleeping_{0};
  uint32_t tx_queued_ = 0;                 // progress thread
  std::vector<uint32_t> tx_pieces_left_;   // progress thread, per slot

  // Receive ring: the progress thread fills slots; the receiver bumps released_.
  std::unique_ptr<RxSlot[]> rx_slots_;
  std::atomic<uint32_t> rx_released_{0};
  std::atomic<uint32_t> rx_word_{0}, rx_sleeping_{0};

  // Liveness (Note [TCP liveness]). cause_ is written once before failed_ is set.
  std::atomic<bool> failed_{false};
  std::string cause_;
  int64_t first_finish_ns_ = 0;

  std::unique_ptr<SendChannel> sender_;
  std::unique_ptr<RecvChannel> receiver_;
};

}  // namespace accord
